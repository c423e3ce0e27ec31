import Foundation

/// The file a job uploads, open for reading, checked against what intake recorded.
///
/// A `reference` file must keep its size, mtime and inode from intake to the end of the upload; the queue's own
/// blobs must still be there with their size. Anything else is a permanent "source changed"/"source missing".
final class SourceFile: Sendable {
    let descriptor: Int32
    let path: String
    let job: Job
    /// The digest of what the upload reads: for a job without its SHA-256 yet (hashed while sending), the one
    /// recorded; for every other job, checked against the one intake recorded (`sentDigest`).
    let digest: ContentDigest

    init(job: Job) throws(TransferFailure) {
        self.job = job
        self.path = job.file
        digest = ContentDigest()
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
        if !now.isRecordedFile(inode: job.inode, device: job.device, modifiedNanoseconds: job.modifiedNanoseconds) {
            changes.append("replaced by another file")
        }
        if job.mode == .reference && now.modifiedNanoseconds != job.modifiedNanoseconds {
            changes.append("modified since it was enqueued")
        }
        if !changes.isEmpty {
            throw .permanent("source-changed", "source changed: \(path) is no longer the file that was enqueued "
                + "(\(changes.joined(separator: ", "))); enqueue it again to upload the new content")
        }
    }

    /// What `fstat` says of the file now (its mode, for a job from before intake recorded its source's).
    func fingerprint() throws(TransferFailure) -> FileFingerprint {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .system("fstat", path: path, errno: errno) }
        return FileFingerprint(info)
    }

    /// Reads up to `buffer.count` bytes at `offset` (taken into the digest); returns how many
    /// were read.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(TransferFailure) -> Int {
        let count = try readUnhashed(into: buffer, at: offset)
        digest.take(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), at: offset)
        return count
    }

    /// `read` without the digest.
    func readUnhashed(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(TransferFailure) -> Int {
        while true {
            let count = pread(descriptor, buffer.baseAddress, buffer.count, off_t(offset))
            if count >= 0 { return count }
            if errno != EINTR { throw .system("read", path: path, errno: errno) }
        }
    }

    /// Hashes what an earlier process sent (the bytes before `offset`) so that the digest of a resumed upload
    /// goes on from where this one starts (a thread hashing beside the upload reads them anyway).
    func hashPrefix(upTo offset: Int64) async throws(TransferFailure) {
        guard !digest.isHashingBeside, digest.hashedUpTo < offset else { return }
        try await digest.catchUpAside(to: offset, from: self)
    }

    /// For an upload that reads its file out of order (S3 parts, several at once): hashes the file beside the upload, on a thread of its own (see `ContentDigest`).
    func hashBesideUpload() {
        digest.hashBeside(self, size: job.size)
    }

    /// The SHA-256 of the file as sent: read for whatever the upload did not read itself, and checked against
    /// the intake's fingerprint afterwards. A job hashed at intake must get the digest intake recorded: bytes
    /// changed in place since (by a writer that kept a descriptor, or restored the mtime) are a permanent
    /// "source changed", never an upload.
    func sentDigest() async throws(TransferFailure) -> String {
        let hex = try await digest.finish(size: job.size, from: self)
        try verifyUnchanged()
        if !job.sha256.isEmpty && hex != job.sha256 {
            throw .permanent("source-changed", """
                source changed: the bytes read to send \(path) are not those enqueued (SHA-256 \(job.sha256.prefix(12))… \
                at intake, \(hex.prefix(12))… now): it was changed in place after it was enqueued. The file is kept; \
                enqueue it again to upload what it holds now
                """)
        }
        return hex
    }
}
