import Foundation

/// The SHA-256 of a job's file taken at intake after all, for a job hashed while sending that de-duplication must
/// compare with another of the same size.
enum ContentIdentity {
    /// The digest of the job's file (at its source until a `move` intake completes), or nil when the file is gone
    /// or is no longer the one enqueued (size, inode or mtime moved, or it changed while it was read): such a job
    /// is nobody's duplicate, and its upload fails on the change.
    static func digest(of job: Job) throws(UploadQueueError) -> String? {
        let path = job.intakeComplete ? job.file : job.sourcePath
        let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        let before = try FileFingerprint.of(descriptor: descriptor, path: path)
        guard before.size == job.size, before.inode == job.inode, before.device == job.device,
              before.modifiedNanoseconds == job.modifiedNanoseconds else { return nil }
        let sha256 = try SHA256Digest.ofFile(descriptor: descriptor, path: path, job: job.id)
        let after = try FileFingerprint.of(descriptor: descriptor, path: path)
        return after.contentMayDiffer(from: before) ? nil : sha256
    }
}
