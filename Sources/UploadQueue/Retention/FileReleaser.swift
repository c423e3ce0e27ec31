import CUploadQueueSystem
import Foundation

/// Carries out owed releases on the file system: unlinks the queue's copies, or moves them into the archive.
///
/// Blocking file work; the caller runs it off the cooperative threads. A batch ends with one fsync per directory
/// touched, and only then may the caller forget the releases, so a power cut cannot bring back a file whose
/// release is no longer recorded.
struct FileReleaser: Sendable {
    /// What became of one release.
    enum Outcome: Sendable, Equatable {
        /// The copy is gone from `blobs/` (deleted, archived, or already gone).
        case done
        /// It could not be done now (full disk, a target in the way): tried again later, with this reason.
        case failed(String)
        /// A source release found another file under the name (a newer version): it is left alone, and the
        /// release is over.
        case left(String)
    }

    /// Performs the releases and syncs the directories they touched; returns each one's outcome.
    func perform(_ releases: [FileRelease]) -> [JobID: Outcome] {
        var outcomes: [JobID: Outcome] = [:]
        var touched: Set<String> = []
        for release in releases {
            let outcome: Outcome
            do {
                switch release.action {
                case .policy:
                    // Not judged by the configured policy yet (that failed): an archive must not lose it to a delete.
                    throw UploadQueueError(.io, "waiting for the retention policy to be applied to it")
                case .delete:
                    try Self.remove(release.path)
                    try Self.remove(release.sidecarPath)
                case .archive:
                    guard let target = release.target else { throw UploadQueueError(.io, "no archive target recorded") }
                    try Self.archive(release.path, to: target)
                    if FileManager.default.fileExists(atPath: release.sidecarPath) {
                        try Self.archive(release.sidecarPath, to: target + Sidecar.suffix)
                    }
                    touched.insert((target as NSString).deletingLastPathComponent)
                case .deleteSource, .moveSource:
                    if let changed = Self.sourceChanged(release) {
                        outcomes[release.jobID] = .left(changed)
                        continue
                    }
                    if release.action == .deleteSource {
                        try Self.remove(release.path)
                    } else {
                        guard let target = release.target else { throw UploadQueueError(.io, "no target recorded") }
                        try Self.archive(release.path, to: target)
                        touched.insert((target as NSString).deletingLastPathComponent)
                    }
                }
                outcome = .done
            } catch {
                outcome = .failed("\(error)")
            }
            touched.insert((release.path as NSString).deletingLastPathComponent)
            outcomes[release.jobID] = outcome
        }
        for directory in touched where (try? syncDirectory(directory)) == nil {
            // Not durable yet: nothing of this batch may be forgotten.
            for (id, outcome) in outcomes where outcome == .done {
                outcomes[id] = .failed("cannot sync \(directory); tried again later")
            }
        }
        return outcomes
    }

    /// Why a source release must leave the file under its path alone (it is not the one enqueued: another inode,
    /// size or modification time), or nil when it may act (also when the file is already gone).
    static func sourceChanged(_ release: FileRelease) -> String? {
        guard let expected = release.source else { return "no record of the file that was enqueued" }
        var info = stat()
        guard lstat(release.path, &info) == 0 else { return nil }
        let now = FileFingerprint(info)
        guard now.isRegularFile, now.inode == expected.inode, now.device == expected.device,
              now.size == expected.size, now.modifiedNanoseconds == expected.modifiedNanoseconds else {
            return "\(release.path) changed after it was uploaded; left where it is"
        }
        return nil
    }

    /// Unlinks `path`; a file that is already gone counts as removed.
    private static func remove(_ path: String) throws(UploadQueueError) {
        guard unlink(path) == 0 || errno == ENOENT else { throw .system("unlink", path: path) }
    }

    /// Moves `source` to `target` without replacing anything: a rename on the same file system, else a copy that
    /// is fsynced and renamed into place before the source goes. A target that already holds the same bytes (a
    /// crash between the copy and the unlink) only lets the source go.
    private static func archive(_ source: String, to target: String) throws(UploadQueueError) {
        let directory = (target as NSString).deletingLastPathComponent
        try makeDirectoryDurably(directory)
        if uploadq_rename_noreplace(AT_FDCWD, source, AT_FDCWD, target) == 0 { return }
        let code = errno
        switch code {
        case ENOENT where !FileManager.default.fileExists(atPath: source):
            // Moved by an earlier pass whose bookkeeping was cut short, or removed by a person.
            return
        case EEXIST:
            guard try sameContent(source, target) else {
                throw UploadQueueError(.io, "the archive already has a different file of this name; move it away",
                                       path: target)
            }
            try remove(source)
        case EXDEV:
            try copyDurably(source, to: target)
            // The copy's name must be on disk before the only other copy goes.
            try syncDirectory(directory)
            try remove(source)
        default:
            throw .system("rename", path: target, errno: code)
        }
    }

    /// Creates `path` and any missing parents, fsyncing each parent a folder was created in, so that a power cut
    /// cannot take a new `{date}/` folder (and what was moved into it) away after the release was forgotten.
    private static func makeDirectoryDurably(_ path: String) throws(UploadQueueError) {
        var info = stat()
        if stat(path, &info) == 0 { return }
        let parent = (path as NSString).deletingLastPathComponent
        if parent != path, !parent.isEmpty { try makeDirectoryDurably(parent) }
        guard mkdir(path, 0o700) == 0 || errno == EEXIST else { throw .system("mkdir", path: path) }
        try syncDirectory(parent)
    }

    private static func sameContent(_ first: String, _ second: String) throws(UploadQueueError) -> Bool {
        func digest(_ path: String) throws(UploadQueueError) -> (Int64, String) {
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else { throw .system("open", path: path) }
            defer { close(descriptor) }
            return (try FileFingerprint.of(descriptor: descriptor, path: path).size,
                    try SHA256Digest.ofFile(descriptor: descriptor, path: path))
        }
        return try digest(first) == digest(second)
    }

    /// Copies `source` to a temporary name beside `target`, fsyncs it and renames it into place.
    private static func copyDurably(_ source: String, to target: String) throws(UploadQueueError) {
        let input = open(source, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard input >= 0 else { throw .system("open", path: source) }
        defer { close(input) }
        let temporary = ((target as NSString).deletingLastPathComponent as NSString)
            .appendingPathComponent(".uploadq-archive-\(UUID().uuidString.lowercased()).tmp")
        let output = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw .system("open", path: temporary) }
        var keep = false
        defer {
            close(output)
            if !keep { unlink(temporary) }
        }
        _ = try SHA256Digest.ofFile(descriptor: input, path: source) { block, offset throws(UploadQueueError) in
            try BlobStore.writeAll(output, block, at: offset, path: temporary)
        }
        guard fsync(output) == 0 else { throw .system("fsync", path: temporary) }
        guard uploadq_rename_noreplace(AT_FDCWD, temporary, AT_FDCWD, target) == 0 else {
            throw .system("rename", path: target)
        }
        keep = true
    }
}
