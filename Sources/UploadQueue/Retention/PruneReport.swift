import Foundation

/// What a prune removed (or, with `dryRun`, would remove).
public struct PruneReport: Sendable, Equatable {
    /// Uploaded jobs removed, with their history.
    public var jobs = 0
    /// Their attempt records.
    public var attempts = 0
    /// Patches and hook runs (delivered, or failed for good) removed with their jobs.
    public var patches = 0
    /// Acknowledged completions removed with their jobs.
    public var completions = 0
    /// Files of cancelled jobs (under `state_dir/cancelled/`) removed.
    public var cancelledFiles = 0
    /// The database file's size before and after (after the space was given back); equal on a dry run.
    public var databaseBytesBefore: Int64 = 0
    public var databaseBytesAfter: Int64 = 0
}
