import Foundation

/// The answer to `uploadq status`: is a daemon running, the link, and the queue's summary.
public struct QueueStatus: Sendable, Equatable {
    /// The pid of the process running the queue (daemon or library host), or nil.
    public var runnerPID: Int32?
    public var link: LinkStatus
    public var summary: QueueSummary
}
