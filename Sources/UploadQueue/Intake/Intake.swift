import Foundation
import GRDB

/// Accepts files into the queue durably: checks, hashes, types, dedupes and takes them over.
///
/// Order of operations for `move`: the job row is committed first (marked incomplete), then the file is renamed
/// into `blobs/`, then the row is marked complete; `finishIncompleteIntakes` completes whatever a crash cut short.
struct Intake: Sendable {
    let configuration: Configuration
    let store: QueueStore
    let blobs: BlobStore
    let contentTypes: ContentTypeDetector

    /// Accepts one file. `noFollow` refuses symbolic links (always for the spool and for `move`).
    /// Refuses a patch target now rather than at delivery: an http(s) URL, a method token, a body template with
    /// known placeholders, one-line headers.
    static func check(_ patch: PatchTarget) throws(UploadQueueError) {
        let lowered = patch.url.lowercased()
        guard lowered.hasPrefix("http://") || lowered.hasPrefix("https://"), URL(string: patch.url)?.host != nil else {
            throw UploadQueueError(.invalidArgument, "patch URL \"\(URLRedaction.redact(patch.url))\" is not an "
                + "http:// or https:// URL")
        }
        if let method = patch.method, !PatchSettings.isMethod(method) {
            throw UploadQueueError(.invalidArgument, "patch method \"\(method)\" is not an HTTP method (PATCH, PUT, POST…)")
        }
        if let body = patch.body {
            do {
                _ = try PatchBody(body)
            } catch {
                throw UploadQueueError(.invalidArgument, error.message)
            }
        }
        for (name, value) in patch.headers ?? [:] {
            let valid = !name.isEmpty && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_".contains($0)) }
            guard valid, !value.contains(where: \.isNewline) else {
                throw UploadQueueError(.invalidArgument, "patch header \"\(name)\" is not a valid header")
            }
        }
    }

    func enqueue(_ request: EnqueueRequest, noFollow: Bool = false, now: Date = Date()) throws(UploadQueueError) -> EnqueueResult {
        let destination = try destinationName(request.destination)
        if let policy = request.onMetered, MeteredPolicy(policy) == nil {
            throw UploadQueueError(.invalidArgument, "on_metered \"\(policy)\" is not one of defer, allow, allow-below:SIZE")
        }
        if let patch = request.patch { try Self.check(patch) }
        let path = ConfigurationLoader.absolutePath(request.path, base: FileManager.default.currentDirectoryPath)
        let refuseLinks = noFollow || request.mode == .move
        let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (refuseLinks ? O_NOFOLLOW : 0))
        guard descriptor >= 0 else {
            if errno == ELOOP {
                throw UploadQueueError(.symbolicLink, "is a symbolic link; enqueue the file it points to, or use --mode copy",
                                       path: path)
            }
            throw .system("open", path: path)
        }
        defer { close(descriptor) }
        let before = try FileFingerprint.of(descriptor: descriptor, path: path)
        guard before.isRegularFile else {
            throw UploadQueueError(.notRegularFile, "is a \(before.typeName), not a regular file", path: path)
        }

        let id = JobID.generate(at: now)
        let copies = request.mode == .copy || (request.mode == .move && before.links > 1)
        let sha256 = copies
            ? try blobs.copy(descriptor: descriptor, sourcePath: path, to: id)
            : try SHA256Digest.ofFile(descriptor: descriptor, path: path)
        let after = try FileFingerprint.of(descriptor: descriptor, path: path)
        if after.contentMayDiffer(from: before) {
            if copies { unlink(blobs.path(for: id)) }
            throw UploadQueueError(.sourceUnstable, "the file changed while it was read; it is still being written",
                                   path: path)
        }

        var job = Job(
            id: id, state: .pending, waitingReason: nil, permanent: false, attempts: 0, failures: 0,
            nextAttemptAt: nil, lastError: nil,
            file: request.mode == .reference ? path : blobs.path(for: id),
            sourcePath: path, originalName: (path as NSString).lastPathComponent, mode: request.mode,
            size: before.size, sha256: sha256, contentType: contentTypes.contentType(descriptor: descriptor),
            modifiedNanoseconds: before.modifiedNanoseconds, inode: before.inode, device: before.device,
            destination: destination, priority: request.priority, remoteURL: nil, bytesConfirmed: 0,
            rateBytesPerSecond: 0, meta: request.meta, patch: request.patch, patchState: .none, onMetered: request.onMetered,
            resumeState: nil,
            intakeComplete: request.mode != .move || copies, cancelRequested: false, createdAt: now, updatedAt: now)
        if copies {
            let copied = try FileFingerprint.of(path: job.file)
            job.inode = copied.inode
            job.device = copied.device
            job.modifiedNanoseconds = copied.modifiedNanoseconds
        }

        if let existing = try insertUnlessDuplicate(job) {
            if copies { unlink(blobs.path(for: id)) }
            return EnqueueResult(id: existing.id, deduplicated: true)
        }
        if request.mode == .move {
            if copies {
                // Several names share this file: the queue keeps its own copy and only drops the spool's name.
                guard unlink(path) == 0 else { throw .system("unlink", path: path, job: id) }
            } else {
                try completeMove(job, expected: before)
            }
        }
        return EnqueueResult(id: id, deduplicated: false)
    }

    private func completeMove(_ job: Job, expected: FileFingerprint) throws(UploadQueueError) {
        let adopted = try blobs.adopt(source: job.sourcePath, expected: expected, for: job.id)
        do {
            try store.writer.write { db in
                try db.execute(sql: "UPDATE job SET intake_complete = 1, inode = ?, device = ?, updated_at = ? WHERE id = ?",
                               arguments: [adopted.inode, adopted.device, Date(), job.id.rawValue])
            }
        } catch {
            throw UploadQueueError(.database, "cannot record the intake: \(error)", job: job.id)
        }
    }

    private func insertUnlessDuplicate(_ job: Job) throws(UploadQueueError) -> Job? {
        do {
            return try store.writer.write { db -> Job? in
                let existing = try Job
                    .filter(Job.Columns.destination == job.destination && Job.Columns.sha256 == job.sha256)
                    .filter(Job.Columns.size == job.size)
                    .filter(!(Job.Columns.state == JobState.failed.rawValue && Job.Columns.permanent == true))
                    .order(Job.Columns.id)
                    .fetchAll(db)
                    // The same photo for another record (another patch target) is a job of its own.
                    .first { $0.patch == job.patch }
                if let existing { return existing }
                try job.insert(db)
                return nil
            }
        } catch {
            throw UploadQueueError(.database, "cannot write the job: \(error)", job: job.id, path: job.sourcePath)
        }
    }

    /// Completes `move` intakes a crash interrupted: the row is there, the file is still at its source, or
    /// already in `blobs/`. A file that is in neither place fails the job permanently (it is reported, not lost
    /// silently).
    func finishIncompleteIntakes() throws(UploadQueueError) {
        let pending: [Job]
        do { pending = try store.incompleteIntakes() } catch {
            throw UploadQueueError(.database, "cannot read the queue: \(error)")
        }
        for job in pending {
            if let blob = try? FileFingerprint.of(path: job.file), blob.isRegularFile {
                try markComplete(job.id)
                continue
            }
            if let source = try? FileFingerprint.of(path: job.sourcePath), source.isRegularFile,
               source.inode == job.inode, source.device == job.device {
                try completeMove(job, expected: source)
                continue
            }
            do {
                try store.apply(.failPermanent(error: "the file vanished while it was taken into the queue "
                    + "(neither \(job.sourcePath) nor \(job.file) exists)"), to: job.id) { $0.intakeComplete = true }
            } catch {
                throw UploadQueueError(.database, "cannot record the lost intake: \(error)", job: job.id)
            }
        }
        blobs.removeStaleTemporaries()
    }

    private func markComplete(_ id: JobID) throws(UploadQueueError) {
        do { try store.markIntakeComplete(id) } catch {
            throw UploadQueueError(.database, "cannot record the intake: \(error)", job: id)
        }
    }

    /// The destination for a request: the given name, else the spool's, else `default`; it must exist.
    func destinationName(_ requested: String?) throws(UploadQueueError) -> String {
        let name = requested ?? configuration.spool?.destination ?? "default"
        guard configuration.destinations[name] != nil else {
            let known = configuration.destinations.keys.sorted().joined(separator: ", ")
            throw UploadQueueError(.unknownDestination, "no destination named \"\(name)\" (configured: \(known))")
        }
        return name
    }
}
