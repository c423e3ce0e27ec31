import CUploadQueueSystem
import Foundation
import Synchronization

/// The queue's own files under `state_dir/blobs/`: taking files over by rename, copying with a hash, syncing.
///
/// A file is only ever renamed, copied and fsynced here; nothing is deleted but what an intake of ours left
/// (`removeLeftovers`).
struct BlobStore: Sendable {
    let directory: String

    init(directory: String) throws(UploadQueueError) {
        self.directory = directory
        try Self.makeDirectory(directory)
    }

    /// Creates a directory (and parents) with mode 0700 if missing, each fsynced into its parent: the state
    /// directory, `blobs/`, `cancelled/`, the spool and its `.rejected/` survive a power cut once made.
    static func makeDirectory(_ path: String) throws(UploadQueueError) {
        let code = createDirectoryDurably(path, mode: 0o700)
        guard code == 0 else {
            throw UploadQueueError(.io, "cannot create directory: \(String(cString: strerror(code)))", path: path)
        }
    }

    func path(for id: JobID) -> String { (directory as NSString).appendingPathComponent(id.rawValue) }

    private func temporaryPath(for id: JobID) -> String {
        (directory as NSString).appendingPathComponent(".\(id.rawValue).tmp")
    }

    /// A copy written to its temporary name, not yet durable: `commit` makes a batch of them durable with one
    /// flush, then renames them into place. Its intake holds the intake lock meanwhile.
    final class PendingCopy: @unchecked Sendable {
        let id: JobID
        let temporary: String
        fileprivate var descriptor: Int32
        /// Renamed into place: the blob exists under its final name.
        fileprivate(set) var done = false

        fileprivate init(id: JobID, temporary: String, descriptor: Int32) {
            self.id = id
            self.temporary = temporary
            self.descriptor = descriptor
        }

        /// Drops a copy that will not be used (the temporary goes; a renamed blob stays where it is).
        func discard() {
            if descriptor >= 0 { close(descriptor) }
            descriptor = -1
            if !done { unlink(temporary) }
        }

        deinit { discard() }
    }

    /// Copies the open file to a temporary name in `blobs/`, hashing as it goes; returns the pending copy and the
    /// SHA-256 of what was written. Nothing is durable until `commit`; `stop` ends the copy between blocks.
    func beginCopy(descriptor: Int32, sourcePath: String, size: Int64, to id: JobID,
                   stop: IntakeStop? = nil) throws(UploadQueueError) -> (PendingCopy, String)
    {
        let temporary = temporaryPath(for: id)
        let output = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw .system("open", path: temporary, job: id) }
        let pending = PendingCopy(id: id, temporary: temporary, descriptor: output)
        let window = Self.writeBehindWindow
        let sha256 = try SHA256Digest.ofFile(descriptor: descriptor, path: sourcePath, size: size, job: id,
                                             stop: stop) { block, offset throws(UploadQueueError) in
            try Self.writeAll(output, block, at: offset, path: temporary)
            // A large copy goes to disk as it is written: its dirty pages would otherwise make every other
            // intake's fsync (another dropper's photo) wait until gigabytes of it are written.
            let end = offset + off_t(block.count)
            if end / window > offset / window {
                _ = uploadq_write_behind(output, Int64((end / window - 1) * window), Int64(window))
            }
        }
        return (pending, sha256)
    }

    /// How much of a copy may be written before it is sent to disk (`uploadq_write_behind`).
    /// 8 MiB: written in under a second even to a slow SD card (10 MB/s), so a SIGTERM mid-copy is not held up.
    static let writeBehindWindow: off_t = 8 << 20

    /// Makes pending copies durable and puts them in place: one fsync for a single copy, one `syncfs` for a batch
    /// (a flush of the file system instead of one per file), then the renames and one fsync of `blobs/`.
    func commit(_ copies: [PendingCopy]) throws(UploadQueueError) {
        let copies = copies.filter { !$0.done }
        guard let first = copies.first else { return }
        if copies.count == 1 {
            guard fsync(first.descriptor) == 0 else { throw .system("fsync", path: first.temporary, job: first.id) }
        } else {
            guard uploadq_syncfs(first.descriptor) == 0 else { throw .system("syncfs", path: directory) }
        }
        for copy in copies {
            let destination = path(for: copy.id)
            guard rename(copy.temporary, destination) == 0 else { throw .system("rename", path: destination, job: copy.id) }
            copy.done = true
            close(copy.descriptor)
            copy.descriptor = -1
        }
        try syncDirectory(directory)
    }

    /// Copies the open file into `blobs/` as the job's blob, hashing as it goes; returns the SHA-256 of what
    /// was written. The copy is fsynced and renamed into place only when complete.
    func copy(descriptor: Int32, sourcePath: String, size: Int64, to id: JobID) throws(UploadQueueError) -> String {
        let (pending, sha256) = try beginCopy(descriptor: descriptor, sourcePath: sourcePath, size: size, to: id)
        try commit([pending])
        return sha256
    }

    /// Moves `source` into `blobs/` as the job's blob without replacing anything; across file systems it
    /// copies, fsyncs and only then unlinks the original. Returns the fingerprint of the blob.
    /// Across file systems (also a bind mount of the same one) the copy needs room: `freeSpace` refuses it below
    /// `min_free_space`.
    /// `companion` (a sidecar's spool name, its bytes kept beside the blob across file systems) goes with the
    /// source, before their directory is fsynced: a power cut leaves both, or neither.
    func adopt(source: String, expected: FileFingerprint, for id: JobID,
               freeSpace: FreeSpaceGuard? = nil, companion: String? = nil) throws(UploadQueueError) -> FileFingerprint {
        let destination = path(for: id)
        if uploadq_rename_noreplace(AT_FDCWD, source, AT_FDCWD, destination) != 0 {
            let code = errno
            guard code == EXDEV else { throw .system("rename", path: source, errno: code, job: id) }
            if let low = freeSpace?.check(needing: expected.size) {
                throw UploadQueueError(.diskLow, "not taken: \(low); the queue takes files again once there is room",
                                       job: id, path: source)
            }
            // The file examined, and no other: a FIFO renamed in meanwhile must not block the intake, and a file
            // swapped in must not be copied in its place.
            let input = open(source, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard input >= 0 else { throw .system("open", path: source, job: id) }
            defer { close(input) }
            let opened = try FileFingerprint.of(descriptor: input, path: source)
            guard opened.inode == expected.inode, opened.device == expected.device,
                  !opened.contentMayDiffer(from: expected) else {
                throw UploadQueueError(.sourceUnstable, "the file was replaced or changed while it was taken into the "
                    + "queue; it is looked at again", job: id, path: source)
            }
            _ = try copy(descriptor: input, sourcePath: source, size: expected.size, to: id)
            if try FileFingerprint.of(descriptor: input, path: source).contentMayDiffer(from: expected) {
                unlink(destination)
                throw UploadQueueError(.sourceUnstable, "the file changed while it was copied into the queue; it is "
                    + "looked at again", job: id, path: source)
            }
            try unlinkIfUnchanged(source, expected: expected, job: id)
            if let companion { unlink(companion) }
            try syncDirectory((source as NSString).deletingLastPathComponent)
            return try FileFingerprint.of(path: destination)
        }
        let adopted = try FileFingerprint.of(path: destination)
        guard adopted.inode == expected.inode, adopted.device == expected.device else {
            throw UploadQueueError(.sourceChanged, "the file was replaced while it was taken into the queue",
                                   job: id, path: source)
        }
        try syncDirectory(directory)
        if let companion { unlink(companion) }
        try syncDirectory((source as NSString).deletingLastPathComponent)
        return adopted
    }

    /// Unlinks `path` only while the name still refers to the file that was read (same inode, size and times):
    /// a version written or renamed into place meanwhile survives, and the intake is tried again later.
    func unlinkIfUnchanged(_ path: String, expected: FileFingerprint, job: JobID) throws(UploadQueueError) {
        let now = try FileFingerprint.of(path: path)
        guard now.inode == expected.inode, now.device == expected.device, !now.contentMayDiffer(from: expected) else {
            throw UploadQueueError(.sourceUnstable, "the file changed while it was taken into the queue; the new "
                + "version is left where it is", job: job, path: path)
        }
        guard unlink(path) == 0 else { throw .system("unlink", path: path, job: job) }
    }

    /// Where a job's kept spool sidecar lives: beside its copy, `blobs/ID.uploadq.json`.
    func sidecarPath(for id: JobID) -> String { path(for: id) + Sidecar.suffix }

    /// Takes a spool sidecar into `blobs/` beside the job's copy (a rename, or across file systems a copy that
    /// is fsynced before the original goes). Best effort: the sidecar's content is already in the job's row, so
    /// one that cannot be taken stays in the spool, where the spool sweeps it aside later.
    ///
    /// Only the file that was read (`expected`) is taken: its name is in a directory droppers write, and a
    /// directory or a link swapped in after the read must not reach `blobs/` (nor the archive after it). One
    /// found there after the rename goes back to its name (or, were that taken meanwhile, stays beside as
    /// `ID.uploadq.json.unexpected`, which nothing reads).
    ///
    /// Across file systems the spool's name stays until its file has left the spool too: the caller unlinks the
    /// name returned once it has, before the spool is fsynced. A power cut then leaves both in the spool, or
    /// neither; and a failed intake only drops the copy kept here (`returnSidecar`), the dropper's own file staying.
    @discardableResult
    func adoptSidecar(_ source: String, expected: FileFingerprint?, for id: JobID) -> String? {
        let target = sidecarPath(for: id)
        if uploadq_rename_noreplace(AT_FDCWD, source, AT_FDCWD, target) == 0 {
            guard let expected, let taken = try? FileFingerprint.of(path: target),
                  taken.inode != expected.inode || taken.device != expected.device || !taken.isRegularFile else { return nil }
            if uploadq_rename_noreplace(AT_FDCWD, target, AT_FDCWD, source) != 0 {
                _ = uploadq_rename_noreplace(AT_FDCWD, target, AT_FDCWD, target + ".unexpected")
            }
            return nil
        }
        let code = errno
        // Read as the spool read it (no link followed, no FIFO waited on, 64 KiB at most): it may have been
        // swapped since.
        guard code == EXDEV || code == EEXIST, let (bytes, file) = try? Sidecar.readBytes(at: source),
              expected.map({ $0.inode == file.inode && $0.device == file.device }) ?? true else { return nil }
        if code == EEXIST {
            // A rename an earlier pass made, of which a power cut kept the new name and not the removal of the
            // old: two names of one file. The spool's goes (the same inode, not just the same bytes).
            if let kept = try? FileFingerprint.of(path: target), kept.inode == file.inode, kept.device == file.device {
                unlink(source)
            }
            return nil
        }
        // Kept already by an earlier pass (the same bytes), or kept now.
        if FileManager.default.contents(atPath: target) == Data(bytes) { return source }
        return Self.writeNew(Data(bytes), to: target, mode: 0o600) ? source : nil
    }

    /// The spool's copy of a sidecar kept across file systems by an earlier pass that a crash or a power cut cut
    /// short, after its file had left the spool: it goes when it holds the same bytes as the kept one (else it
    /// would stay without its file for good; a sidecar of a new drop would differ, or have its file beside it).
    func dropLeftoverSidecar(_ path: String, of id: JobID) {
        guard !FileManager.default.fileExists(atPath: String(path.dropLast(Sidecar.suffix.count))),
              let kept = FileManager.default.contents(atPath: sidecarPath(for: id)),
              let (bytes, _) = try? Sidecar.readBytes(at: path), Data(bytes) == kept else { return }
        unlink(path)
    }

    /// Writes `data` to a new file at `path` (never replacing one) and fsyncs it; false, with nothing left
    /// behind, when that cannot be done.
    private static func writeNew(_ data: Data, to path: String, mode: mode_t) -> Bool {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard descriptor >= 0 else { return false }
        let written = data.withUnsafeBytes { bytes -> Bool in
            do throws(UploadQueueError) {
                try writeAll(descriptor, bytes, at: 0, path: path)
                return fsync(descriptor) == 0
            } catch {
                return false
            }
        }
        close(descriptor)
        if !written { unlink(path) }
        return written
    }

    /// Puts a sidecar taken by `adoptSidecar` back where it came from (its file was not taken after all); never
    /// replaces anything there.
    func returnSidecar(_ original: String, of id: JobID) {
        let kept = sidecarPath(for: id)
        guard FileManager.default.fileExists(atPath: kept) else { return }
        // Copied across file systems, the dropper's own is still there: only the copy goes.
        if let (bytes, _) = try? Sidecar.readBytes(at: original), FileManager.default.contents(atPath: kept) == Data(bytes) {
            unlink(kept)
            return
        }
        if uploadq_rename_noreplace(AT_FDCWD, kept, AT_FDCWD, original) == 0 { return }
        // A new file of ours only: a sidecar the dropper wrote meanwhile is never replaced.
        guard errno == EXDEV, let data = FileManager.default.contents(atPath: kept),
              Self.writeNew(data, to: original, mode: 0o644) else { return }
        unlink(kept)
    }

    /// Where the intake lock lives: `intake.lock` in the state directory, beside `blobs/`; an empty file.
    var intakeLockPath: String {
        ((directory as NSString).deletingLastPathComponent as NSString).appendingPathComponent("intake.lock")
    }

    /// A hold on the intake lock: shared by every intake that writes into `blobs/`, from its first byte until its
    /// rows are committed; exclusive for the clean-up of what crashed intakes left. Released by `release()`, or
    /// when it goes (a crashed process's hold goes with it).
    final class IntakeLock: @unchecked Sendable {
        private var descriptor: Int32

        fileprivate init(descriptor: Int32) { self.descriptor = descriptor }

        func release() {
            if descriptor >= 0 { close(descriptor) }
            descriptor = -1
        }

        deinit { release() }
    }

    /// Holds the intake lock shared, waiting while a clean-up holds it (moments). An intake that cannot take it
    /// writes nothing: its copy would be unknown to a clean-up that starts meanwhile.
    func shareIntakeLock() throws(UploadQueueError) -> IntakeLock {
        guard let lock = try lockIntake(LOCK_SH) else {
            throw UploadQueueError(.io, "the intake lock was not granted", path: intakeLockPath)
        }
        return lock
    }

    /// Runs `body` while no intake is in flight, in this process or another (the intake lock held exclusively,
    /// not waited for); nil, without running it, while one is. Throws when the lock cannot be taken at all.
    func whileNoIntakeInFlight<T>(_ body: () throws -> T) throws(UploadQueueError) -> T? {
        guard let sweep = try lockIntake(LOCK_EX | LOCK_NB) else { return nil }
        defer { sweep.release() }
        do {
            return try body()
        } catch let error as UploadQueueError {
            throw error
        } catch {
            throw UploadQueueError(.io, "clean-up of blobs/ failed: \(error)", path: directory)
        }
    }

    /// The lock taken with `operation`, or nil when a non-blocking one is held by another.
    private func lockIntake(_ operation: Int32) throws(UploadQueueError) -> IntakeLock? {
        // Read and write, as the daemon lock: on NFS or CIFS flock becomes a byte-range lock, which needs both.
        let descriptor = open(intakeLockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            let code = errno
            throw UploadQueueError(UploadQueueError.system("open", path: intakeLockPath, errno: code).code, """
                cannot open the intake lock: \(String(cString: strerror(code))); the state directory and what is in it \
                must belong to the user the daemon runs as
                """, path: intakeLockPath, cause: String(cString: strerror(code)))
        }
        while flock(descriptor, operation) != 0 {
            let code = errno
            if code == EINTR { continue }
            close(descriptor)
            if code == EWOULDBLOCK { return nil }
            throw .system("flock", path: intakeLockPath, errno: code)
        }
        return IntakeLock(descriptor: descriptor)
    }

    /// Removes what crashed intakes left in `blobs/`: temporary copies, and copies (and kept spool sidecars) no
    /// job refers to (a crash between making a batch of copies durable and committing their rows). Only within
    /// `whileNoIntakeInFlight`, with `isReferenced` reading the rows after the lock was taken: a copy in flight is
    /// told by the lock its intake holds, not by its age, so no clock is read, and a stepped wall clock (or file
    /// times from another clock) cannot make it look abandoned. `move` blobs always have their row first.
    func removeLeftovers(isReferenced: (String) -> Bool) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names {
            let path = (directory as NSString).appendingPathComponent(name)
            if name.hasPrefix(".") {
                if name.hasSuffix(".tmp") { unlinkRegularFile(path) }
                continue
            }
            // A copy is named by its job id; a kept spool sidecar by the id and the sidecar suffix.
            let id = name.hasSuffix(Sidecar.suffix) ? String(name.dropLast(Sidecar.suffix.count)) : name
            guard !id.contains("."), JobID(id) != nil, !isReferenced(id) else { continue }
            unlinkRegularFile(path)
        }
    }

    /// `removeLeftovers(isReferenced:)` against a set of job ids, under the lock; false, leaving everything, while
    /// an intake is in flight.
    @discardableResult
    func removeLeftovers(referenced: Set<String>) throws(UploadQueueError) -> Bool {
        try whileNoIntakeInFlight { removeLeftovers(isReferenced: { referenced.contains($0) }) } != nil
    }

    private func unlinkRegularFile(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return }
        unlink(path)
    }

    static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at offset: off_t,
                         path: String) throws(UploadQueueError) {
        var written = 0
        while written < bytes.count {
            let count = pwrite(descriptor, bytes.baseAddress! + written, bytes.count - written, offset + off_t(written))
            if count < 0 {
                if errno == EINTR { continue }
                throw .system("write", path: path)
            }
            written += count
        }
    }
}

/// Creates `path` and any missing parents, fsyncing the directory each one is in, so that a power cut cannot take a
/// new folder away (and with it what was later put in it and fsynced there); 0 when it is there, or the errno of
/// what failed. A folder found already there is fsynced into its parent too, once per process: another transfer
/// may have made it a moment ago and not fsynced it yet, or a crash may have come between its mkdir and fsync.
/// A symbolic link the admin made to a folder (a state directory or a spool elsewhere) counts as that folder.
func createDirectoryDurably(_ path: String, mode: mode_t) -> Int32 {
    BlockingCheck.check("making a folder durably (an fsync)")
    let parent = (path as NSString).deletingLastPathComponent
    var info = stat()
    if stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR,
       DurableDirectories.known.withLock({ $0.contains(path) }) {
        return 0
    }
    if stat(path, &info) != 0 {
        if parent != path, !parent.isEmpty {
            let code = createDirectoryDurably(parent, mode: mode)
            guard code == 0 else { return code }
        }
        guard mkdir(path, mode) == 0 || errno == EEXIST else { return errno }
        guard stat(path, &info) == 0 else { return errno }
    }
    guard (info.st_mode & S_IFMT) == S_IFDIR else { return ENOTDIR }
    let descriptor = open(parent.isEmpty ? "." : parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard descriptor >= 0 else { return errno }
    defer { close(descriptor) }
    guard fsync(descriptor) == 0 else { return errno }
    DurableDirectories.known.withLock { _ = $0.insert(path) }
    return 0
}

/// The folders `createDirectoryDurably` made durable in this process.
private enum DurableDirectories {
    static let known = Mutex<Set<String>>([])
}

/// fsyncs a directory so a rename or a new name in it survives power loss.
func syncDirectory(_ path: String) throws(UploadQueueError) {
    BlockingCheck.check("an fsync of a folder")
    let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard descriptor >= 0 else { throw .system("open", path: path) }
    defer { close(descriptor) }
    guard fsync(descriptor) == 0 else { throw .system("fsync", path: path) }
}
