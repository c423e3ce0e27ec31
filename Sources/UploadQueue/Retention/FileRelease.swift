import Foundation
import GRDB

/// A release owed: the queue's copy of an uploaded file, to delete or archive once `dueAt` has come.
///
/// Written in the transaction that marks the job `uploaded`, so a crash between that commit and the unlink
/// cannot leak the file: whatever is owed is finished at the next start. A row stands on its own (path and
/// target, no reference to the job), so pruning history never strands a file.
struct FileRelease: Sendable, Equatable, Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "file_release"

    /// What is done to the file.
    enum Action: String, Sendable, Codable {
        /// Unlink the copy (and the spool sidecar kept beside it).
        case delete
        /// Move the copy to `target` (and the sidecar beside it).
        case archive
        /// Owed from before retention existed: turned into one of the above by the configured policy.
        case policy
        /// Unlink a `reference` job's own file (`source_after_upload = "delete"`), if it is still the one enqueued.
        case deleteSource = "delete-source"
        /// Move a `reference` job's own file to `target` (`move:DIR`), if it is still the one enqueued.
        case moveSource = "move-source"

        /// True for releases of the caller's file, not the queue's copy: checked against `source`, no sidecar.
        var actsOnSource: Bool { self == .deleteSource || self == .moveSource }
    }

    /// The identity of the file a source release may act on: what was enqueued and uploaded.
    struct SourceIdentity: Sendable, Equatable {
        var inode: Int64
        var device: Int64
        var size: Int64
        var modifiedNanoseconds: Int64
    }

    var jobID: JobID
    var action: Action
    /// The queue's copy under `blobs/`.
    var path: String
    /// For `archive`: where the copy goes.
    var target: String?
    var dueAt: Date
    var attempts: Int = 0
    var lastError: String?
    var createdAt: Date
    var sourceInode: Int64? = nil
    var sourceDevice: Int64? = nil
    var sourceSize: Int64? = nil
    var sourceModifiedNanoseconds: Int64? = nil

    enum CodingKeys: String, CodingKey, ColumnExpression {
        case jobID = "job_id"
        case action, path, target
        case dueAt = "due_at"
        case attempts
        case lastError = "last_error"
        case createdAt = "created_at"
        case sourceInode = "source_inode"
        case sourceDevice = "source_device"
        case sourceSize = "source_size"
        case sourceModifiedNanoseconds = "source_mtime_ns"
    }

    /// For a source release: the file it may act on.
    var source: SourceIdentity? {
        guard let sourceInode, let sourceDevice, let sourceSize, let sourceModifiedNanoseconds else { return nil }
        return SourceIdentity(inode: sourceInode, device: sourceDevice, size: sourceSize,
                              modifiedNanoseconds: sourceModifiedNanoseconds)
    }
    typealias Columns = CodingKeys

    /// The sidecar a spool file came with, kept beside the copy (`blobs/ID.uploadq.json`).
    var sidecarPath: String { path + Sidecar.suffix }

    /// What `policy` owes for `job`, confirmed uploaded at `now`; nil when the queue holds no copy of its own
    /// (`reference` jobs upload the caller's file, which the queue never touches).
    static func owed(for job: Job, policy: RetentionPolicy, now: Date) -> FileRelease? {
        guard job.mode != .reference else { return nil }
        switch policy.uploadedCopies {
        case .delete:
            return FileRelease(jobID: job.id, action: .delete, path: job.file, dueAt: now, createdAt: now)
        case .keep(let duration):
            return FileRelease(jobID: job.id, action: .delete, path: job.file,
                               dueAt: now.addingTimeInterval(duration.seconds), createdAt: now)
        case .archive(let directory, let template):
            let relative = template.expand(jobID: job.id, originalName: job.originalName, sha256: job.sha256,
                                           meta: job.meta, date: job.createdAt)
            let target = FileName.fittingPath(relative, under: directory, jobID: job.id,
                                              reserve: Sidecar.suffix.utf8.count)
            return FileRelease(jobID: job.id, action: .archive, path: job.file, target: target, dueAt: now,
                               createdAt: now)
        }
    }

    /// What a job owes once uploaded: the release of the queue's copy by `policy`, or for a `reference` job what
    /// `source` (its own choice, else its destination's) says about the caller's file; nil when nothing is owed.
    static func owed(for job: Job, policy: RetentionPolicy, source: SourceAfterUpload, now: Date) -> FileRelease? {
        guard job.mode == .reference else { return owed(for: job, policy: policy, now: now) }
        var release: FileRelease
        switch source {
        case .keep:
            return nil
        case .delete:
            release = FileRelease(jobID: job.id, action: .deleteSource, path: job.file, dueAt: now, createdAt: now)
        case .move(let directory):
            let target = FileName.fittingPath(job.originalName, under: directory, jobID: job.id)
            release = FileRelease(jobID: job.id, action: .moveSource, path: job.file, target: target, dueAt: now,
                                  createdAt: now)
        }
        release.sourceInode = job.inode
        release.sourceDevice = job.device
        release.sourceSize = job.size
        release.sourceModifiedNanoseconds = job.modifiedNanoseconds
        return release
    }
}
