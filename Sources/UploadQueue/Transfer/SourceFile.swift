import Foundation

/// The file a job uploads, open for reading, checked against what intake recorded.
///
/// A `reference` file must keep its size, mtime and inode from intake to the end of the upload; the queue's own
/// blobs must still be there with their size. Anything else is a permanent "source changed"/"source missing".
final class SourceFile: Sendable {
    let descriptor: Int32
    let path: String
    private let job: Job

    init(job: Job) throws(TransferFailure) {
        self.job = job
        self.path = job.file
        let descriptor = open(job.file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT {
                throw .permanent("source-missing", "the file to upload is gone: \(job.file)")
            }
            throw .system("open", path: job.file, errno: code)
        }
        self.descriptor = descriptor
        try verifyUnchanged()
    }

    deinit {
        close(descriptor)
    }

    /// Throws a permanent failure when the file no longer matches what intake recorded.
    func verifyUnchanged() throws(TransferFailure) {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .system("fstat", path: path, errno: errno) }
        let now = FileFingerprint(info)
        var changes: [String] = []
        if now.size != job.size { changes.append("size \(job.size) → \(now.size)") }
        if now.inode != job.inode || now.device != job.device { changes.append("replaced by another file") }
        if job.mode == .reference && now.modifiedNanoseconds != job.modifiedNanoseconds {
            changes.append("modified since it was enqueued")
        }
        if !changes.isEmpty {
            throw .permanent("source-changed", "source changed: \(path) is no longer the file that was enqueued "
                + "(\(changes.joined(separator: ", "))); enqueue it again to upload the new content")
        }
    }

    /// Reads up to `buffer.count` bytes at `offset`; returns how many were read.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(TransferFailure) -> Int {
        while true {
            let count = pread(descriptor, buffer.baseAddress, buffer.count, off_t(offset))
            if count >= 0 { return count }
            if errno != EINTR { throw .system("read", path: path, errno: errno) }
        }
    }
}
