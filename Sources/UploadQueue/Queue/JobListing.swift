import Foundation

/// What `uploadq list` shows: the jobs, and the rows this version cannot read, apart.
public struct JobListing: Sendable {
    /// A job row this version cannot read: its id and which column holds what.
    public struct UnreadableJob: Sendable, Equatable {
        public let id: JobID
        /// Names the column, never the row's values.
        public let reason: String
    }

    /// The jobs read, newest first.
    public var jobs: [Job] = []
    /// The rows left out, newest first.
    public var unreadable: [UnreadableJob] = []
    /// When the listing was cut short (its limit, or a page's bound in bytes): the last job listed, from which the
    /// next page goes on (older ones). nil: nothing more.
    public var next: JobID?
}
