import CUploadQueueSystem
import Foundation

/// Copies a job's file into a local directory (`protocol = "file"`): temporary name, fsync, rename.
///
/// The temporary file `.uploadq-JOB.partial` sits in the target directory; after a crash its length is where the
/// copy continues. The result is checked against the job's SHA-256 before it takes its final name, and a final
/// name is never overwritten.
struct LocalDirectoryUploader: Uploader {
    let destination: Destination
    let settings: LocalDirectorySettings
    /// Bytes per write; small enough that a bandwidth cap paces smoothly and a stop request is seen quickly.
    var sliceSize = 256 << 10

    /// The file's final path: `name_template` filled, every component shortened to 255 bytes by the name rule
    /// (`FileName`), so a long name is a shorter name, not an error retried for ever.
    func finalPath(for job: Job) -> String {
        let relative = settings.nameTemplate.expand(jobID: job.id, originalName: job.originalName, sha256: job.sha256,
                                                       meta: job.meta, date: job.createdAt)
        return FileName.fittingPath(relative, under: settings.directory, jobID: job.id)
    }

    /// The process's umask, read once (`Umask:` of /proc/self/status: setting it to read it would change it for
    /// every thread meanwhile); 0o022 when it cannot be read.
    static let umask: UInt32 = {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
              let value = UInt32(line.dropFirst("Umask:".count).trimmingCharacters(in: .whitespaces), radix: 8)
        else { return 0o022 }
        return value
    }()

    func temporaryPath(for job: Job) -> String {
        let parent = (finalPath(for: job) as NSString).deletingLastPathComponent
        return (parent as NSString).appendingPathComponent(".uploadq-\(job.id.rawValue).partial")
    }

    func upload(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome {
        let job = context.job
        let source = try SourceFile(job: job)
        let target = finalPath(for: job)
        guard target.utf8.count <= FileName.pathLimit else {
            throw .permanent("name-too-long", """
                the target path is \(target.utf8.count) bytes even with every name shortened; Linux takes at most \
                \(FileName.pathLimit): use a shorter name_template or directory, then `uploadq retry \(job.id)`
                """)
        }
        let directory = (target as NSString).deletingLastPathComponent
        // Each folder made (a new `{date}/`) is fsynced into its parent: else a power cut takes it away, with every
        // file delivered into it since, while their jobs say uploaded (power-cut site `target-directory`).
        let code = await Self.offPool { () throws(Never) in createDirectoryDurably(directory, mode: 0o755) }
        if code != 0 {
            // A full disk (or anything passing) is tried again; a permission or a read-only mount needs a person.
            let message = "cannot create \(directory): \(String(cString: strerror(code)))"
            switch code {
            case EACCES, EPERM, EROFS, ENAMETOOLONG, ENOTDIR: throw .permanent("io", message + "; fix it, then `uploadq retry`")
            case ENOSPC, EDQUOT: throw .targetFull(message)
            default: throw .transient("io", message)
            }
        }
        if try await alreadyDelivered(source, at: target) {
            // Delivered by a pass a crash cut short, perhaps before it fsynced the name.
            try await Self.offPool { () throws(TransferFailure) in
                do throws(UploadQueueError) { try syncDirectory(directory) } catch { throw .transient("io", error.message) }
            }
            return UploadOutcome(remoteURL: Self.fileURL(target), sha256: try await source.sentDigest())
        }

        let temporary = temporaryPath(for: job)
        let output = open(temporary, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard output >= 0 else { throw .system("open", path: temporary, errno: errno) }
        defer { close(output) }
        var info = stat()
        guard fstat(output, &info) == 0 else { throw .system("fstat", path: temporary, errno: errno) }
        var offset = Int64(info.st_size)
        if offset > job.size {
            guard ftruncate(output, 0) == 0 else { throw .system("ftruncate", path: temporary, errno: errno) }
            offset = 0
        }
        try await context.resumed(offset)
        // A job hashed while sending: the part an earlier attempt copied is read once here, the rest as it is copied.
        try await source.hashPrefix(upTo: offset)

        // Used by one slice's blocking work at a time (each awaited before the next).
        nonisolated(unsafe) let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: sliceSize, alignment: 16)
        defer { buffer.deallocate() }
        var lastConfirmed = offset
        var lastConfirmTime = ContinuousClock.now
        while offset < job.size {
            if Task.isCancelled { throw .interrupted }
            let want = Int(min(Int64(sliceSize), job.size - offset))
            do {
                try await context.limiter.acquire(want)
            } catch {
                throw .interrupted
            }
            // The slice read, written and (at a checkpoint: a few MiB, a second, the end) synced, off the pool.
            let (at, checkpointSize) = (offset, settings.checkpointSize)
            let checkpoint = { (end: Int64) in
                end - lastConfirmed >= checkpointSize || ContinuousClock.now - lastConfirmTime >= .seconds(1)
                    || end == job.size
            }
            let due = checkpoint(offset + Int64(want))
            let count = try await Self.offPool { () throws(TransferFailure) -> Int in
                let count = try source.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: at)
                if count == 0 {
                    throw .permanent("source-changed", "source changed: \(source.path) ended at \(at) of \(job.size) bytes")
                }
                do throws(UploadQueueError) {
                    try BlobStore.writeAll(output, UnsafeRawBufferPointer(rebasing: buffer[0..<count]), at: off_t(at),
                                           path: temporary)
                } catch {
                    throw error.code == .diskLow ? .targetFull("writing \(temporary): \(error.message)")
                        : .transient("io", "writing \(temporary): \(error.message)")
                }
                if count == want, due, fsync(output) != 0 { throw .system("fsync", path: temporary, errno: errno) }
                return count
            }
            offset += Int64(count)
            context.sent(offset)
            if checkpoint(offset) {
                // A short read's slice is synced here (a slice as asked was synced with its write).
                if count != want || !due {
                    try await Self.offPool { () throws(TransferFailure) in
                        guard fsync(output) == 0 else { throw .system("fsync", path: temporary, errno: errno) }
                    }
                }
                try await context.confirmed(offset, nil)
                lastConfirmed = offset
                lastConfirmTime = .now
            }
        }
        if job.size == 0 { try await context.confirmed(0, nil) }

        let written = try await Self.offPool { () throws(TransferFailure) -> String in
            do throws(UploadQueueError) {
                return try SHA256Digest.ofFile(descriptor: output, path: temporary, size: job.size)
            } catch {
                throw .transient("io", "re-reading \(temporary): \(error.message)")
            }
        }
        guard try await written == source.sentDigest() else {
            _ = ftruncate(output, 0)
            throw .transient("verification", "the copy at \(temporary) does not match the source's SHA-256; "
                + "it was discarded and will be written again")
        }
        try source.verifyUnchanged()
        // Its source's mode in the group it now has, never wider (the temporary was made 0600, so nobody else could
        // open it meanwhile).
        var delivered = stat()
        guard fstat(output, &delivered) == 0 else { throw .system("fstat", path: temporary, errno: errno) }
        // What intake recorded, kept in the daemon's group (a setgid folder gives the file another: not the group's
        // bits then); a job from before, its file's own.
        let kept: UInt32
        if let recorded = job.sourceMode {
            kept = delivered.st_gid == getegid() ? recorded : recorded & 0o705
        } else {
            kept = try source.fingerprint().modeKept(inGroup: delivered.st_gid)
        }
        // And within the daemon's umask (the unit's `UMask=`), as the mode it was opened with would have been.
        let mode = settings.deliveredMode(kept: kept) & ~Self.umask
        guard fchmod(output, mode_t(mode)) == 0 else { throw .system("fchmod", path: temporary, errno: errno) }
        if uploadq_rename_noreplace(AT_FDCWD, temporary, AT_FDCWD, target) != 0 {
            let code = errno
            guard code == EEXIST else { throw .system("rename", path: target, errno: code) }
            guard try await alreadyDelivered(source, at: target) else {
                throw .permanent("target-exists", "\(target) already exists with other content; "
                    + "move it away or change name_template, then `uploadq retry \(job.id)`")
            }
            unlink(temporary)
        }
        try await Self.offPool { () throws(TransferFailure) in
            do throws(UploadQueueError) { try syncDirectory(directory) } catch { throw .transient("io", error.message) }
        }
        return UploadOutcome(remoteURL: Self.fileURL(target), sha256: try await source.sentDigest())
    }

    /// Runs file work that may block (a read, a write, an fsync, a whole file's hash) off Swift's shared threads.
    private static func offPool<T: Sendable, E: Error>(_ work: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
        try await BlockingWork.runResult(work).get()
    }

    /// True when the final name already holds exactly this job's content (a crash after the rename). A job hashed
    /// while sending has its source read whole for it.
    private func alreadyDelivered(_ source: SourceFile, at target: String) async throws(TransferFailure) -> Bool {
        let job = source.job
        let descriptor = open(target, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, Int64(info.st_size) == job.size else { return false }
        let expected = try await source.sentDigest()
        return try await Self.offPool { () throws(TransferFailure) -> Bool in
            do throws(UploadQueueError) {
                return try SHA256Digest.ofFile(descriptor: descriptor, path: target, size: job.size) == expected
            } catch {
                throw .transient("io", "reading \(target): \(error.message)")
            }
        }
    }

    func discard(_ job: Job) async {
        unlink(temporaryPath(for: job))
    }

    /// The target directory exists and is writable (or can be made).
    func probe() async -> Bool {
        let directory = settings.directory
        return await Self.offPool { () throws(Never) in
            createDirectoryDurably(directory, mode: 0o755) == 0 && access(directory, W_OK) == 0
        }
    }

    static func fileURL(_ path: String) -> String {
        URL(fileURLWithPath: path).absoluteString
    }
}
