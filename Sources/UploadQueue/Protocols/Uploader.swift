import Foundation

/// Moves one job's bytes to a destination, resuming from what the destination already holds.
///
/// One implementation per protocol. An uploader persists its resume state through `TransferContext` before bytes
/// move and after each confirmed chunk, and stops at the next safe point when its task is cancelled.
protocol Uploader: Sendable {
    /// Uploads the job's file and returns where it now lives, with the file's SHA-256 for a job that has none yet
    /// (hashed while sending).
    func upload(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome

    /// Drops what a cancelled job left at the destination (partial uploads), where the protocol allows. It runs to
    /// the end even when the calling task is cancelled (the worker of a cancelled job calls it).
    func discard(_ job: Job) async

    /// Asks the destination with one cheap request whether it answers at all (for the circuit breaker).
    func probe() async -> Bool
}

/// What a finished upload produced.
struct UploadOutcome: Sendable, Equatable {
    /// The job's `remote_url`.
    var remoteURL: String
    /// For a job hashed while sending: the SHA-256 of the bytes sent, recorded with the upload.
    var sha256: String? = nil
}

/// What an uploader gets for one attempt: the job, the shared bandwidth cap, and ways to report progress.
struct TransferContext: Sendable {
    let job: Job
    let limiter: BandwidthLimiter
    /// Checks the link and the device's constraints before a chunk: throws an `interrupted` failure when the job
    /// may not send now (metered and deferred, offline, the power, outside its windows, the metered budget spent);
    /// the job then waits and resumes from its confirmed offset.
    var checkConstraints: @Sendable () throws(TransferFailure) -> Void = {}
    /// Records the offset this attempt really starts from (after looking at the destination).
    let resumed: @Sendable (Int64) async throws(TransferFailure) -> Void
    /// Persists confirmed bytes and, when given, a new resume record; also feeds progress events.
    let confirmed: @Sendable (Int64, String?) async throws(TransferFailure) -> Void
    /// Reports bytes handed to the destination but not confirmed yet (progress only, never persisted).
    let sent: @Sendable (Int64) -> Void
    /// Forgets the remote upload: clears the resume record and the confirmed bytes.
    let forgetResumeState: @Sendable () async throws(TransferFailure) -> Void
}
