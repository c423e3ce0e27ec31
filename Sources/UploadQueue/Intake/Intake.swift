import CUploadQueueSystem
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
    /// What the intakes under way hold of the disk and of each dropper's quota (shared by every intake of the queue).
    let reservations = IntakeReservations()

    /// A file read, hashed and (for copies) written to a temporary blob, with its job row ready to insert.
    private struct Prepared {
        var job: Job
        var copy: BlobStore.PendingCopy?
        var before: FileFingerprint
        var path: String
        var idempotencyKey: EnqueueRequest.IdempotencyKey?
        var order = QueueStore.OrderRequest()
        /// The dropper's quota, checked again in the insert's transaction (nil: the queue's own user, root).
        var quota: OwnerQuota?
        /// Its room and its place in the quota, held until it is recorded or given up.
        var reservation: IntakeReservations.Reservation?
    }

    /// Accepts one file. `noFollow` refuses symbolic links (always for the spool and for `move`); `stop` ends the
    /// reading of a large file early (`interrupted`, nothing taken).
    func enqueue(_ request: EnqueueRequest, noFollow: Bool = false, now: Date = Date(),
                 stop: IntakeStop? = nil) throws(UploadQueueError) -> EnqueueResult {
        // Until its row is committed, a copy in `blobs/` is known to be in flight by this hold alone.
        let writing = request.mode == .reference ? nil : try blobs.shareIntakeLock()
        defer { writing?.release() }
        let prepared = try prepare(request, noFollow: noFollow, now: now, stop: stop)
        let accepted = try commitAlone(prepared)
        if accepted.deduplicated { return accepted }
        let job = prepared.job
        guard request.mode == .move else { return accepted }
        do {
            if prepared.copy != nil {
                // The queue keeps its own copy (several names share the file, another user's file, another disk)
                // and only drops the given name. Its sidecar follows once the row is there (a crash before leaves
                // it beside the file, which is taken again with it), and leaves the spool with its file: a power
                // cut brings back both (the file set aside as a duplicate), or neither.
                let leftover = request.sidecar.flatMap {
                    blobs.adoptSidecar($0, expected: request.sidecarFile, for: job.id)
                }
                try blobs.unlinkIfUnchanged(prepared.path, expected: prepared.before, job: job.id)
                if let leftover { unlink(leftover) }
                // The copy is durable and committed: a sync that fails now costs at most a duplicate that the spool
                // sets aside after a power cut, never the file.
                try? syncMoved(from: prepared.path, sidecar: request.sidecar != nil)
            } else {
                try completeMove(job, expected: prepared.before, sidecar: request.sidecar, sidecarFile: request.sidecarFile)
            }
        } catch {
            // The intake must finish or be undone: a row left half-taken would hold the same file back as
            // "already queued" for ever.
            if undoMove(job, sidecar: request.sidecar) { throw error }
            try finishIntake(job)
        }
        return accepted
    }

    /// Undoes a `move` whose second step failed: the file goes back to its name (or the queue's copy goes, when
    /// the original is still there), then the row. Returns false when that cannot be done.
    private func undoMove(_ job: Job, sidecar: String?) -> Bool {
        let blob = try? FileFingerprint.of(path: job.file)
        let source = try? FileFingerprint.of(path: job.sourcePath)
        if let blob {
            let sourceIsTheOriginal = source.map { $0.inode == job.inode && $0.device == job.device } ?? false
            if source == nil {
                guard uploadq_rename_noreplace(AT_FDCWD, job.file, AT_FDCWD, job.sourcePath) == 0 else { return false }
            } else if sourceIsTheOriginal && blob.inode != job.inode {
                // The blob is a copy of ours and the original is still there: the copy goes.
                guard unlink(job.file) == 0 else { return false }
            } else {
                // The blob is the only copy (a new file took the original's name): it stays, and so does the job.
                return false
            }
        }
        // The sidecar goes back beside its file first, durably, so the next try takes both again: a power cut
        // after the row is gone must not leave it in `blobs/` and the file alone in the spool.
        if let sidecar {
            blobs.returnSidecar(sidecar, of: job.id)
            try? syncDirectory((sidecar as NSString).deletingLastPathComponent)
            try? syncDirectory(blobs.directory)
        }
        do {
            try store.removeUntaken(job.id)
        } catch {
            // The row stays incomplete: the next start finishes it (`finishIncompleteIntakes`).
            return false
        }
        return true
    }

    /// Accepts many files at once (the CLI's `enqueue A B C…`, a library batch): the same checks as one by one,
    /// but copies are made durable with one flush and the rows committed in one transaction per 256 files, so
    /// thousands of small files do not cost thousands of fsyncs. `move` requests go one by one. Each file gets
    /// its own result; one bad file does not stop the others. Once `stop` is stopped, the file being read and those
    /// after it fail as `interrupted`; those read whole before are taken.
    func enqueue(batch requests: [EnqueueRequest], noFollow: Bool = false,
                 stop: IntakeStop? = nil) -> [Result<EnqueueResult, UploadQueueError>] {
        var results = [Result<EnqueueResult, UploadQueueError>?](repeating: nil, count: requests.count)
        for chunkStart in stride(from: 0, to: requests.count, by: 256) {
            // Held for the chunk: its copies sit in `blobs/` with no row until the chunk's transaction commits.
            let chunk = chunkStart..<min(requests.count, chunkStart + 256)
            let writing: BlobStore.IntakeLock
            do {
                writing = try blobs.shareIntakeLock()
            } catch {
                for index in chunk { results[index] = .failure(error) }
                continue
            }
            defer { writing.release() }
            var prepared: [(index: Int, item: Prepared)] = []
            for index in chunk {
                let request = requests[index]
                if request.mode == .move {
                    results[index] = Result { () throws(UploadQueueError) in
                        try enqueue(request, noFollow: noFollow, stop: stop)
                    }
                    continue
                }
                do {
                    try stop?.check(path: request.path)
                    prepared.append((index, try prepare(request, noFollow: noFollow, now: Date(), stop: stop)))
                } catch {
                    results[index] = .failure(error)
                }
            }
            do {
                try blobs.commit(prepared.compactMap(\.item.copy))
                for position in prepared.indices { try adoptCopiedFingerprint(&prepared[position].item) }
                let outcomes = try insertUnlessDuplicate(prepared.map(\.item.job),
                                                         keys: prepared.map(\.item.idempotencyKey),
                                                         orders: prepared.map(\.item.order),
                                                         quotas: prepared.map(\.item.quota))
                for (position, existing) in outcomes.enumerated() {
                    let (index, item) = prepared[position]
                    item.reservation?.recorded()
                    if let existing {
                        if item.copy != nil { unlink(blobs.path(for: item.job.id)) }
                        results[index] = .success(EnqueueResult(id: existing.id, deduplicated: true))
                    } else {
                        results[index] = .success(EnqueueResult(id: item.job.id, deduplicated: false))
                    }
                }
            } catch {
                // Something in the chunk failed as a whole: each file goes on its own, so one bad file does not
                // take the others down with it.
                for (index, item) in prepared {
                    results[index] = Result { () throws(UploadQueueError) in try commitAlone(item) }
                }
            }
        }
        return results.map { $0 ?? .failure(UploadQueueError(.io, "not processed")) }
    }

    /// Makes one prepared file durable and records it (the fallback when its batch failed as a whole).
    private func commitAlone(_ item: Prepared) throws(UploadQueueError) -> EnqueueResult {
        var item = item
        do {
            if let copy = item.copy { try blobs.commit([copy]) }
            try adoptCopiedFingerprint(&item)
            let existing = try insertUnlessDuplicate([item.job], keys: [item.idempotencyKey], orders: [item.order],
                                                     quotas: [item.quota])[0]
            item.reservation?.recorded()
            if let existing {
                if item.copy != nil { unlink(blobs.path(for: item.job.id)) }
                return EnqueueResult(id: existing.id, deduplicated: true)
            }
            return EnqueueResult(id: item.job.id, deduplicated: false)
        } catch {
            // No row refers to the blob: it goes (the caller's own file is untouched in copy mode).
            if item.copy?.done == true { unlink(blobs.path(for: item.job.id)) }
            throw error
        }
    }

    /// Checks, reads and hashes one file; a copy is written to a temporary blob (not yet durable).
    private func prepare(_ request: EnqueueRequest, noFollow: Bool, now: Date,
                         stop: IntakeStop? = nil) throws(UploadQueueError) -> Prepared {
        let destination = try destinationName(request.destination)
        if let policy = request.onMetered, MeteredPolicy(policy) == nil {
            throw UploadQueueError(.invalidArgument, "on_metered \"\(policy)\" is not one of defer, allow, allow-below:SIZE")
        }
        if let patch = request.patch { try PatchAuthority.check(patch) }
        if let lane = request.lane, !OrderRule.isValidLaneName(lane) {
            throw UploadQueueError(.invalidArgument, "lane \"\(SafeText.escaped(lane))\" is not a lane's name: 1 to 128 "
                + "characters, none of them a control character")
        }
        if let group = request.group, !OrderRule.isValidGroupName(group) {
            throw UploadQueueError(.invalidArgument, "group \"\(SafeText.escaped(group))\" is not a group's name: 1 to "
                + "128 characters, none of them a control character or `/`")
        }
        try StoredValueLimits.check(meta: request.meta)
        try StoredValueLimits.check(after: request.after)
        guard request.path.utf8.count <= StoredValueLimits.pathBytes else {
            throw UploadQueueError(.invalidArgument, "the path is \(request.path.utf8.count) bytes; at most "
                + "\(StoredValueLimits.pathBytes)")
        }
        // Resolved now, for good: a destination switched to `delete` later never deletes a file enqueued before.
        var sourceAfterUpload = request.mode == .reference
            ? request.sourceAfterUpload ?? configuration.destinations[destination]?.sourceAfterUpload
            : request.sourceAfterUpload
        if let choice = request.sourceAfterUpload {
            guard request.mode == .reference else {
                throw UploadQueueError(.invalidArgument, """
                    what happens to the file after the upload (\(choice)) applies to --mode reference only: a copy \
                    leaves your file alone, and the queue's own copy follows [retention] uploaded_copies
                    """)
            }
            if case .move(let directory) = choice {
                sourceAfterUpload = .move(directory: ConfigurationLoader.absolutePath(
                    directory, base: FileManager.default.currentDirectoryPath))
            }
        }
        let path = ConfigurationLoader.absolutePath(request.path, base: FileManager.default.currentDirectoryPath)
        let refuseLinks = noFollow || request.mode == .move
        let descriptor: Int32
        if let dropper = request.dropper {
            // As the dropper would open it: the descriptor checked is the one read, whatever is swapped in after.
            descriptor = try DropperRules.open(path, as: dropper)
        } else {
            // O_NOCTTY: a terminal named by mistake never becomes the daemon's own.
            descriptor = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (refuseLinks ? O_NOFOLLOW : 0))
            guard descriptor >= 0 else {
                if errno == ELOOP {
                    throw UploadQueueError(.symbolicLink, "is a symbolic link; enqueue the file it points to, or use "
                        + "--mode copy", path: path)
                }
                throw .system("open", path: path)
            }
        }
        defer { close(descriptor) }
        let before = try FileFingerprint.of(descriptor: descriptor, path: path)
        guard before.isRegularFile else {
            throw UploadQueueError(.notRegularFile, "is a \(before.typeName), not a regular file", path: path)
        }
        // A "regular" file of /proc or /sys may say it is empty and read for ever, or hold what only its reader may
        // see (the daemon's, as root): refused before a byte is read.
        guard uploadq_is_pseudo_fs(descriptor) != 1 else {
            throw UploadQueueError(.notRegularFile, "lies on a pseudo file system (/proc, /sys and the like), whose "
                + "files are not data", path: path)
        }
        if request.ownedFileOnly, before.owner != request.owner {
            throw UploadQueueError(.forbidden, "is not your file (its owner is uid \(before.owner)): hand over your own "
                + "files only, or copy it into one of yours first", path: path)
        }
        if let dropper = request.dropper {
            // A file system of another machine's, or a user's FUSE mount, may hold a read for ever.
            guard uploadq_is_network_fs_fd(descriptor) != 1 else {
                throw UploadQueueError(.invalidArgument, "lies on a network or FUSE file system; copy it to a local "
                    + "disk and hand that over", path: path)
            }
            if let why = dropper.rules.refusal(of: before, name: SafeText.escaped(path)) {
                throw UploadQueueError(.invalidArgument, why, path: path)
            }
        }
        if let examined = request.examined {
            if examined.inode != before.inode || examined.device != before.device {
                // Replaced (a writer that renames a new version over it): looked at again, as one still being written.
                throw UploadQueueError(.sourceUnstable, "was replaced by another file while it was being taken", path: path)
            }
            // What the caller's checks (its size, sparse or not) looked at is what is read, and no more.
            if before.contentMayDiffer(from: examined) {
                throw UploadQueueError(.sourceUnstable, "changed after it was examined; it is looked at again once it "
                    + "stops changing", path: path)
            }
        }
        let quota = dropperQuota(request.owner)

        let id = JobID.generate(at: now)
        // A file of another user's is copied, never adopted: whoever owns an inode can reopen it for writing
        // (through a descriptor it kept, or /proc) and change the bytes after they were hashed. The copy is the
        // daemon's own (0600, in `blobs/`). So is a file with several names, which others may still write.
        let copies = request.mode == .copy
            || (request.mode == .move && (before.links > 1 || before.owner != geteuid()))
        // A copy (or a move across file systems, which is one) needs room, and every job its row: below
        // `min_free_space` it is refused before a byte is written.
        let crossesDisks = request.mode == .move && !copies
            && (try? FileFingerprint.of(path: blobs.directory)).map { $0.device != before.device } ?? false
        let rowBytes = StoredValueLimits.rowBytes(meta: request.meta, patch: request.patch, path: path,
                                                  after: request.after)
        // Counted with what the intakes under way admitted: together they stay within the room and the quota.
        let copyBytes = copies || crossesDisks ? before.size : 0
        let reservation = try reservations.admit(copyBytes: copyBytes, rowBytes: rowBytes, size: before.size,
                                                 owner: quota == nil ? nil : request.owner) {
            () throws(UploadQueueError) -> OwnerQuota.Holding in
            guard quota != nil, let owner = request.owner else { return OwnerQuota.Holding(jobs: 0, bytes: 0) }
            do {
                return try store.holding(of: owner)
            } catch {
                throw .database("cannot read what you hold in the queue", error, path: path,
                                databasePath: configuration.databasePath)
            }
        } refusal: { underWay, ownUnderWay, holding in
            if let quota, let why = quota.refusal(holding: OwnerQuota.Holding(jobs: holding.jobs + ownUnderWay.jobs,
                                                                               bytes: holding.bytes + ownUnderWay.bytes),
                                                  adding: before.size) {
                return UploadQueueError(.ownerQuota, why, path: path)
            }
            if let low = configuration.freeSpaceGuard.check(needing: copyBytes + rowBytes + underWay) {
                return UploadQueueError(.diskLow, "not taken: \(low); the queue takes files again once there is room "
                    + "(uploads free it), or lower [limits] min_free_space", path: path)
            }
            return nil
        }
        var copy: BlobStore.PendingCopy?
        let sha256: String
        if copies {
            let begun = try blobs.beginCopy(descriptor: descriptor, sourcePath: path, size: before.size, to: id, stop: stop)
            copy = begun.0
            sha256 = begun.1
            reservation.copied()
        } else if configuration.destinations[destination]?.hashTiming == .whileSending {
            // Hashed by the upload, from the bytes it sends: the file is read once. De-duplication hashes it here
            // after all when a job of the same size goes to the destination (`insertUnlessDuplicate`).
            sha256 = ""
        } else {
            sha256 = try SHA256Digest.ofFile(descriptor: descriptor, path: path, size: before.size, stop: stop)
        }
        let after = try FileFingerprint.of(descriptor: descriptor, path: path)
        if after.contentMayDiffer(from: before) {
            copy?.discard()
            throw UploadQueueError(.sourceUnstable, "the file changed while it was read; it is still being written",
                                   path: path)
        }

        let job = Job(
            id: id, state: .pending, waitingReason: nil, permanent: false, attempts: 0, failures: 0,
            nextAttemptAt: nil, lastError: nil,
            file: request.mode == .reference ? path : blobs.path(for: id),
            sourcePath: path, originalName: (path as NSString).lastPathComponent, mode: request.mode,
            size: before.size, sha256: sha256, contentType: contentTypes.contentType(descriptor: descriptor),
            modifiedNanoseconds: before.modifiedNanoseconds, inode: before.inode, device: before.device,
            destination: destination, priority: request.priority, remoteURL: nil, bytesConfirmed: 0,
            rateBytesPerSecond: 0, meta: request.meta, patch: request.patch, patchState: .none, onMetered: request.onMetered,
            meteredBelow: request.onMetered.flatMap(MeteredPolicy.init)?.sizeLimit,
            sourceAfterUpload: sourceAfterUpload?.description, resumeState: nil,
            intakeComplete: request.mode != .move || copies, cancelRequested: false, createdAt: now, updatedAt: now,
            ownerUID: request.owner, lane: request.lane, afterMode: request.after.isEmpty ? nil : request.afterMode,
            group: request.group, sourceMode: before.modeKept(inGroup: getegid()))
        let order = QueueStore.OrderRequest(
            lane: request.lane, lanePolicy: request.lane.map(configuration.lanes.policy(for:)) ?? .hold,
            after: request.after, afterMode: request.afterMode,
            keyOwner: request.keyOwner ?? request.idempotencyKey?.owner ?? request.owner ?? UInt32(geteuid()))
        return Prepared(job: job, copy: copy, before: before, path: path, idempotencyKey: request.idempotencyKey,
                        order: order, quota: quota, reservation: reservation)
    }

    /// A copied job records its blob's inode, device and mtime (what the uploaders check), once it is in place.
    private func adoptCopiedFingerprint(_ prepared: inout Prepared) throws(UploadQueueError) {
        guard prepared.copy != nil else { return }
        let copied = try FileFingerprint.of(path: prepared.job.file)
        prepared.job.inode = copied.inode
        prepared.job.device = copied.device
        prepared.job.modifiedNanoseconds = copied.modifiedNanoseconds
    }

    /// Takes the file (and its spool sidecar) into `blobs/`, then marks the intake complete: the job cannot run,
    /// and so cannot be released, before both are in place.
    private func completeMove(_ job: Job, expected: FileFingerprint, sidecar: String?,
                              sidecarFile: FileFingerprint?) throws(UploadQueueError) {
        // The sidecar leaves first, so the directory syncs of `adopt` cover its move too, and a power cut leaves
        // no sidecar without its file (one whose file is not taken after all goes back: `undoMove`).
        let leftover = sidecar.flatMap { blobs.adoptSidecar($0, expected: sidecarFile, for: job.id) }
        // Across file systems the sidecar's spool name goes with its file's, made durable by the same fsync.
        let adopted = try blobs.adopt(source: job.sourcePath, expected: expected, for: job.id,
                                      freeSpace: configuration.freeSpaceGuard, companion: leftover)
        try recordIntake(job.id, blob: adopted)
    }

    /// Makes durable what left the spool once its copy or its file was in `blobs/`: the original's name gone, and
    /// a sidecar's move (a rename, or a copy and an unlink). Before, a power cut could bring back an original
    /// already queued (which the spool then sets aside as a duplicate) or a sidecar without its file (which a
    /// later drop of the same name would have taken for its own). Power-cut site `spool-directory`.
    private func syncMoved(from source: String, sidecar: Bool) throws(UploadQueueError) {
        if sidecar { try syncDirectory(blobs.directory) }
        try syncDirectory((source as NSString).deletingLastPathComponent)
    }

    /// The sidecar of a spool file, when the job came from the spool and its sidecar is still there, belonging to
    /// `owner` (the file's): the path and the file found there. Nil when the owner is not known any more.
    private func spoolSidecar(of job: Job, owner: UInt32?) -> (path: String, file: FileFingerprint)? {
        guard let owner, let spool = configuration.spool?.directory,
              (job.sourcePath as NSString).deletingLastPathComponent == spool else { return nil }
        let path = job.sourcePath + Sidecar.suffix
        guard let file = try? FileFingerprint.of(path: path), file.isRegularFile, file.owner == owner else { return nil }
        return (path, file)
    }

    /// Marks the intake complete with the blob as it now is: across file systems it is a copy with an inode of
    /// its own, which the uploaders check against.
    private func recordIntake(_ id: JobID, blob: FileFingerprint) throws(UploadQueueError) {
        do {
            try store.markIntakeComplete(id, inode: blob.inode, device: blob.device,
                                         modifiedNanoseconds: blob.modifiedNanoseconds)
        } catch {
            throw .database("cannot record the intake", error, job: id, databasePath: configuration.databasePath)
        }
    }

    /// Inserts the jobs in one transaction; for each, the live job that already carries the same content (and
    /// patch target) to the same destination, or nil when it was inserted. The first try assumes no digest is
    /// missing (the common case: no job hashed while sending shares a size with another); when the transaction
    /// finds one that is (`ContentIdentity.QueueChanged`), the digests are taken outside it, where hashing a file
    /// holds no lock, and the whole is done again. Each job's idempotency key in `keys` (if any) is remembered in the
    /// same transaction, naming the job inserted or the duplicate found.
    private func insertUnlessDuplicate(_ jobs: [Job], keys: [EnqueueRequest.IdempotencyKey?] = [],
                                       orders: [QueueStore.OrderRequest] = [], quotas: [OwnerQuota?] = [])
        throws(UploadQueueError) -> [Job?]
    {
        guard !jobs.isEmpty else { return [] }
        // Digests taken by one attempt serve the next.
        var jobs = jobs
        for attempt in 0...ContentIdentity.attempts {
            let examined = attempt == 0 ? ContentIdentity.Examined()
                : try ContentIdentity.takeDigestsForComparison(&jobs, store: store,
                                                               databasePath: configuration.databasePath)
            do {
                return try store.writer.write { db -> [Job?] in
                    try jobs.indices.map { index in
                        let order = index < orders.count ? orders[index] : QueueStore.OrderRequest()
                        let quota = index < quotas.count ? quotas[index] : nil
                        let existing: Job?
                        if order.isEmpty, jobs[index].group == nil {
                            existing = try Self.insertUnlessDuplicate(jobs[index], quota: quota, examined: examined,
                                                                      in: db)
                        } else {
                            // A job with a place in an order or a group is its own: the same content elsewhere in
                            // the queue has another place, or none.
                            try QueueStore.insertJob(jobs[index], quota: quota, in: db)
                            try QueueStore.joinGroup(jobs[index], in: db, now: jobs[index].createdAt)
                            if !order.isEmpty {
                                try QueueStore.placeInOrder(jobs[index], order, in: db, now: jobs[index].createdAt)
                            }
                            existing = nil
                        }
                        if index < keys.count, let named = keys[index] {
                            try QueueStore.rememberIdempotencyKey(owner: named.owner, key: named.key,
                                                                  job: existing?.id ?? jobs[index].id, in: db)
                        }
                        return existing
                    }
                }
            } catch is ContentIdentity.QueueChanged {
                continue
            } catch let error as UploadQueueError {
                throw error
            } catch {
                throw .database("cannot write the jobs", error, job: jobs.first?.id, path: jobs.first?.sourcePath,
                                databasePath: configuration.databasePath)
            }
        }
        throw UploadQueueError(.io, """
            not taken: jobs of the same size kept arriving while its digest was compared (\(ContentIdentity.attempts) \
            times); enqueue it again
            """, path: jobs.first?.sourcePath)
    }

    private static func insertUnlessDuplicate(_ job: Job, quota: OwnerQuota?, examined: ContentIdentity.Examined,
                                              in db: Database) throws -> Job?
    {
        if job.sha256.isEmpty {
            // Hashed while sending: no live job of its size goes to the destination (unless one came since the
            // digests were taken), so none can be its duplicate.
            try ContentIdentity.checkNoneOfItsSize(job, in: db)
            try QueueStore.insertJob(job, quota: quota, in: db)
            return nil
        }
        // The jobs of its content, and those of its size without a digest yet, in one seek. A cached statement:
        // thousands of files in a batch would otherwise each compile the same query.
        let statement = try db.cachedStatement(sql: """
            SELECT * FROM job INDEXED BY job_identity WHERE destination = ? AND size = ? AND sha256 IN (?, '')
            AND NOT (state = 'failed' AND permanent = 1) ORDER BY id
            """)
        let candidates = try ContentIdentity.withDigests(
            try Job.fetchAll(statement, arguments: [job.destination, job.size, job.sha256]), examined: examined, in: db)
        let existing = candidates
            // The same photo for another record (another patch target) is a job of its own, and so is another
            // user's: a dropper's file never rides on a stranger's job (who could cancel it), nor learns of it.
            .first { $0.sha256 == job.sha256 && $0.patch == job.patch && $0.ownerUID == job.ownerUID }
        if let existing { return existing }
        try QueueStore.insertJob(job, quota: quota, in: db)
        return nil
    }

    /// Completes `move` intakes a crash interrupted: the row is there, the file is still at its source, or
    /// already in `blobs/`. A file that is in neither place fails the job permanently (it is reported, not lost
    /// silently). Each intake is finished on its own: one that cannot be is returned as a problem, and the others
    /// and the start go on. Then removes what crashed intakes left in `blobs/` (`BlobStore.removeLeftovers`).
    func finishIncompleteIntakes() -> [UploadQueueError] {
        var problems: [UploadQueueError] = []
        do {
            let incomplete = try store.incompleteIntakes()
            if !incomplete.isEmpty {
                // Finishing a move may copy into `blobs/` as an intake does.
                let writing = try blobs.shareIntakeLock()
                defer { writing.release() }
                for job in incomplete {
                    do { try finishIntake(job) } catch { problems.append(error) }
                }
            }
        } catch let error as UploadQueueError {
            problems.append(error)
        } catch {
            problems.append(.database("cannot read the queue", error))
        }
        // What crashed intakes left, once none is in flight (else at the next start). Each file in `blobs/` is
        // looked up by key: the queue's history is never read whole. A file whose lookup fails counts as
        // referenced (kept). The read begins after the lock is taken, so it holds every row an intake wrote.
        let blobs = self.blobs
        do {
            _ = try blobs.whileNoIntakeInFlight {
                try store.writer.read { db in
                    let lookup = try db.cachedStatement(sql: """
                        SELECT EXISTS (SELECT 1 FROM job WHERE id = ?) OR EXISTS (SELECT 1 FROM file_release WHERE job_id = ?)
                        """)
                    blobs.removeLeftovers(isReferenced: { id in (try? Bool.fetchOne(lookup, arguments: [id, id])) ?? true })
                }
            }
        } catch {
            problems.append(UploadQueueError(error.code, "what crashed intakes left in blobs/ stays for now: \(error.message)",
                                             path: error.path, cause: error.cause))
        }
        return problems
    }

    /// Finishes one interrupted `move` intake.
    private func finishIntake(_ job: Job) throws(UploadQueueError) {
        let source = try? FileFingerprint.of(path: job.sourcePath)
        // After a reboot the device may be numbered anew: the same inode with the same modification time is ours.
        let sourceIsOurs = source.map {
            $0.isRegularFile && $0.isRecordedFile(inode: job.inode, device: job.device,
                                                  modifiedNanoseconds: job.modifiedNanoseconds)
        } ?? false
        if let blob = try? FileFingerprint.of(path: job.file), blob.isRegularFile {
            // The file's owner: the original's (still there, or renamed into `blobs/`); unknown once only a copy is.
            let owner = sourceIsOurs ? source?.owner : blob.inode == job.inode ? blob.owner : nil
            // The sidecar first, as at intake: a cut between the two leaves no sidecar without its file.
            var leftover: String?
            if let sidecar = spoolSidecar(of: job, owner: owner) {
                leftover = blobs.adoptSidecar(sidecar.path, expected: sidecar.file, for: job.id)
            } else if source == nil {
                // The original is gone, its owner with it: a sidecar kept across file systems before the cut tells
                // whether the spool's one is that one, left behind.
                blobs.dropLeftoverSidecar(job.sourcePath + Sidecar.suffix, of: job.id)
            }
            // The file reached `blobs/`: renamed (the source name gone, or still there too when a power cut kept the
            // new name and not the removal of the old), or copied across file systems and the original not yet
            // unlinked. The original's name goes now, unless someone wrote a new version meanwhile.
            if let source, sourceIsOurs {
                var recorded = source
                recorded.size = job.size
                recorded.modifiedNanoseconds = job.modifiedNanoseconds
                try? blobs.unlinkIfUnchanged(job.sourcePath, expected: recorded, job: job.id)
            }
            if let leftover { unlink(leftover) }
            try? syncMoved(from: job.sourcePath, sidecar: true)
            try recordIntake(job.id, blob: blob)
            return
        }
        if let source, sourceIsOurs {
            let sidecar = spoolSidecar(of: job, owner: source.owner)
            try completeMove(job, expected: source, sidecar: sidecar?.path, sidecarFile: sidecar?.file)
            return
        }
        do {
            try store.apply(.failPermanent(error: "the file vanished while it was taken into the queue "
                + "(neither \(job.sourcePath) nor \(job.file) exists)"), to: job.id) { $0.intakeComplete = true }
        } catch {
            throw .database("cannot record the lost intake", error, job: job.id)
        }
    }

    /// The quota of a dropper's job (`owner`: not the queue's own user, nor root), on the state disk as it is now.
    private func dropperQuota(_ owner: UInt32?) -> OwnerQuota? {
        guard let owner, owner != 0 else { return nil }
        let quota = OwnerQuota(configuration.limits, diskBytes: DiskSpace.of(path: configuration.stateDirectory)?.total)
        return quota.jobs == nil && quota.bytes == nil && !quota.unmeasured ? nil : quota
    }

    /// The destination for a request: the given name, else the spool's, else `default` or the only one there is;
    /// it must exist.
    func destinationName(_ requested: String?) throws(UploadQueueError) -> String {
        let known = configuration.destinations.keys.sorted().joined(separator: ", ")
        guard let name = requested ?? configuration.spool?.destination ?? configuration.implicitDestination else {
            throw UploadQueueError(.unknownDestination, "no destination named: this config has several (\(known)) and "
                + "none is called \"default\"; name one of them")
        }
        guard configuration.destinations[name] != nil else {
            throw UploadQueueError(.unknownDestination, "no destination named \"\(name)\" (configured: \(known))")
        }
        return name
    }
}
