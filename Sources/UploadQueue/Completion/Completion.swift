/// An uploaded file, as the library hands it to a sync engine: which job, where it now lives, and what it was.
///
/// Delivered by `UploadQueue.completions()` and `UploadQueueClient.completions()` until acknowledged, also again after a restart.
public struct Completion: Sendable, Equatable {
    public var jobID: JobID
    /// The job's `remote_url`.
    public var remoteURL: String
    public var sha256: String
    public var size: Int64
    /// The metadata given at enqueue (how the host finds its record).
    public var meta: [String: String]
    public var destination: String
    public var originalName: String

    init(_ job: Job) {
        jobID = job.id
        remoteURL = job.remoteURL ?? ""
        sha256 = job.sha256
        size = job.size
        meta = job.meta
        destination = job.destination
        originalName = job.originalName
    }
}
