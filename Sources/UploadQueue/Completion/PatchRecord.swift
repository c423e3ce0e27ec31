import Foundation

/// A metadata patch owed for an uploaded job: how often it was tried, why it last failed, when it is due.
public struct PatchRecord: Sendable, Equatable {
    /// The job the patch is for.
    public var jobID: JobID
    /// Deliveries tried so far.
    public var attempts: Int
    /// Why the last delivery failed (a status and what the server said), if it did.
    public var lastError: String?
    /// When the next delivery is due; nil when none is (delivered, or failed for good).
    public var nextAttemptAt: Date?
}
