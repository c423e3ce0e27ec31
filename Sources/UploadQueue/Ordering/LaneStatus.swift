import Foundation

/// A lane as `uploadq lanes` shows it: what it holds, which job is its head, and what blocks it.
public struct LaneStatus: Sendable, Equatable {
    public var name: String
    /// Whose lane it is; nil: the queue's own user's.
    public var ownerUID: UInt32?
    /// Its jobs that are not uploaded yet and still in its order (pending, uploading, or failed and holding it).
    public var queued: Int
    /// The job the lane is at: the first of its order that is not uploaded; nil when none is.
    public var head: JobID?
    /// The head's state.
    public var headState: JobState?
    /// Since when the head has been at the front (its enqueue, or the end of the job before it).
    public var headSince: Date?
    /// The job that failed and holds the lane (its head), while one does.
    public var blockedBy: JobID?
    /// Since when it holds the lane.
    public var blockedSince: Date?
    /// Why it holds it: the head's last error.
    public var reason: String?
    /// What the lane does with a job that fails for good.
    public var onFailure: Configuration.LaneFailure
}
