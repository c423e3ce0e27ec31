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
        // Where files arrived, and where they left: the arrivals are fsynced first, so that a power cut between
        // the two leaves a file in both places, never in neither.
        var arrived: Set<String> = []
        var touched: Set<String> = []
        // Names that leave once the folders their files arrived in are durable: a move is a link, then an unlink,
        // never a rename, so no fsync of the folder left (ours, or a dropper's writing beside it) can make the
        // departure durable before the arrival.
        var departing: [(job: JobID, path: String)] = []
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
                    // Whatever arrived there is fsynced, even when the release fails half-way.
                    arrived.insert((target as NSString).deletingLastPathComponent)
                    // The sidecar first, as in the spool: whoever finds the file in the archive finds its sidecar.
                    // Both leave only once both arrived: a sidecar never goes while its file stays.
                    var leaving: [String] = []
                    if FileManager.default.fileExists(atPath: release.sidecarPath),
                       let sidecar = try Self.archive(release.sidecarPath, to: target + Sidecar.suffix) {
                        leaving.append(sidecar)
                    }
                    if let file = try Self.archive(release.path, to: target) { leaving.append(file) }
                    departing += leaving.map { (release.jobID, $0) }
                case .deleteSource, .moveSource:
                    let aside: String
                    switch Self.takeAside(release) {
                    case .gone:
                        outcomes[release.jobID] = .done
                        continue
                    case .changed(let reason):
                        // A file put back under its name: that name made durable with the others.
                        touched.insert((release.path as NSString).deletingLastPathComponent)
                        outcomes[release.jobID] = .left(reason)
                        continue
                    case .retry(let reason):
                        outcomes[release.jobID] = .failed(reason)
                        continue
                    case .aside(let path):
                        aside = path
                    }
                    if release.action == .deleteSource {
                        try Self.remove(aside)
                    } else {
                        guard let target = release.target else { throw UploadQueueError(.io, "no target recorded") }
                        let destination = Self.freeName(for: aside, at: target, jobID: release.jobID)
                        do {
                            if let leaving = try Self.archive(aside, to: destination) {
                                departing.append((release.jobID, leaving))
                            }
                        } catch {
                            // The file goes back under its name; the move is tried again later.
                            _ = uploadq_rename_noreplace(AT_FDCWD, aside, AT_FDCWD, release.path)
                            throw error
                        }
                        arrived.insert((destination as NSString).deletingLastPathComponent)
                    }
                }
                outcome = .done
            } catch {
                outcome = .failed("\(error)")
            }
            touched.insert((release.path as NSString).deletingLastPathComponent)
            outcomes[release.jobID] = outcome
        }
        func failAll(_ reason: String) {
            // Not durable yet: nothing of this batch may be forgotten.
            for (id, outcome) in outcomes where outcome == .done { outcomes[id] = .failed(reason) }
        }
        // A folder that could not even be made holds nothing that arrived: it holds up no one else's release.
        for directory in arrived.sorted()
        where FileManager.default.fileExists(atPath: directory) && (try? syncDirectory(directory)) == nil {
            // The arrivals are not durable: every source stays (the next pass finds both, and lets the source go).
            failAll("cannot sync \(directory); tried again later")
            return outcomes
        }
        var departed: Set<String> = []
        for (job, path) in departing {
            do {
                try Self.remove(path)
                departed.insert((path as NSString).deletingLastPathComponent)
            } catch {
                outcomes[job] = .failed("\(error)")
            }
        }
        // The folders left, after the unlinks (one that is also an arrival folder too: its fsync above came before
        // them).
        for directory in departed.union(touched.subtracting(arrived)).sorted()
        where (try? syncDirectory(directory)) == nil {
            failAll("cannot sync \(directory); tried again later")
        }
        return outcomes
    }

    /// Where a source release stands once it looked at the file.
    enum Aside: Equatable {
        /// Nothing is under the name any more (removed by a person, or an earlier pass finished).
        case gone
        /// Another file is under the name (a newer version, a link): it is left alone, with the reason.
        case changed(String)
        /// It cannot be looked at or set aside now (permissions, a full disk, a name in the way): tried again
        /// later, and the file stays where it is.
        case retry(String)
        /// The file that was enqueued, renamed to a hidden name beside it: nothing can open it by its old name
        /// while it is deleted or moved.
        case aside(String)
    }

    /// The hidden name a source file takes while it is released.
    static func asidePath(of release: FileRelease) -> String {
        let directory = (release.path as NSString).deletingLastPathComponent
        return (directory as NSString).appendingPathComponent(".uploadq-release-\(release.jobID.rawValue)")
    }

    /// Renames the source file aside, then checks that what was renamed is the file that was enqueued (same inode,
    /// device, size, modification time): a newer version written or renamed in meanwhile is put back and left
    /// alone. A file left aside by a crash is taken up again.
    static func takeAside(_ release: FileRelease) -> Aside {
        let aside = asidePath(of: release)
        guard let expected = release.source else { return .changed("no record of the file that was enqueued") }
        func matches(_ path: String) -> Bool {
            guard let now = try? FileFingerprint.of(path: path) else { return false }
            return now.isRegularFile && now.size == expected.size && now.modifiedNanoseconds == expected.modifiedNanoseconds
                && now.isRecordedFile(inode: expected.inode, device: expected.device,
                                      modifiedNanoseconds: expected.modifiedNanoseconds)
        }
        /// Another file found under the hidden name goes back under the file's name; only then is it left.
        func putBack(_ reason: String) -> Aside {
            if uploadq_rename_noreplace(AT_FDCWD, aside, AT_FDCWD, release.path) == 0 { return .changed(reason) }
            return .retry("\(reason), and it cannot go back to \(release.path) yet (\(String(cString: strerror(errno))))")
        }
        if FileManager.default.fileExists(atPath: aside) {
            return matches(aside) ? .aside(aside) : putBack("\(release.path) changed after it was uploaded; left where it is")
        }
        let seen: FileFingerprint
        do {
            seen = try FileFingerprint.of(path: release.path)
        } catch {
            return error.code == .fileNotFound ? .gone : .retry("cannot look at \(release.path): \(error)")
        }
        guard seen.isRegularFile else {
            return .changed("\(release.path) is now a \(seen.typeName); left where it is")
        }
        guard matches(release.path) else { return .changed("\(release.path) changed after it was uploaded; left where it is") }
        guard uploadq_rename_noreplace(AT_FDCWD, release.path, AT_FDCWD, aside) == 0 else {
            let code = errno
            return code == ENOENT ? .gone : .retry("cannot set \(release.path) aside: \(String(cString: strerror(code)))")
        }
        guard matches(aside) else {
            // Replaced between the look and the rename: the newer file goes back under its name.
            return putBack("\(release.path) changed after it was uploaded; left where it is")
        }
        return .aside(aside)
    }

    /// `target`, or when a different file already has that name, the same name with `~<job id>` before its
    /// extension (cameras reuse names such as IMG_0001.JPG).
    static func freeName(for source: String, at target: String, jobID: JobID) -> String {
        guard FileManager.default.fileExists(atPath: target), (try? sameContent(source, target)) != true else { return target }
        let name = (target as NSString).lastPathComponent
        let ext = FileName.extensionPart(of: name)
        let stem = String(name.dropLast(ext.count))
        let marked = FileName.fitting(stem + "~" + jobID.rawValue + ext, jobID: jobID)
        return ((target as NSString).deletingLastPathComponent as NSString).appendingPathComponent(marked)
    }

    /// Unlinks `path`; a file that is already gone counts as removed.
    private static func remove(_ path: String) throws(UploadQueueError) {
        guard unlink(path) == 0 || errno == ENOENT else { throw .system("unlink", path: path) }
    }

    /// Moves `source` to `target` without replacing anything. On the same file system `target` becomes a second
    /// link of the file, and `source` is returned: the caller unlinks it once `target`'s folder is durable. (A
    /// rename is two names in two folders: fsynced one folder at a time, as a power cut may catch it, the file can
    /// end in neither. Found by the power-cut run.) Across file systems the file is copied, fsynced and renamed
    /// into place, its folder fsynced, and the source removed here (nil). A target that already holds the same
    /// bytes (an earlier pass cut short) only lets the source go.
    private static func archive(_ source: String, to target: String) throws(UploadQueueError) -> String? {
        let directory = (target as NSString).deletingLastPathComponent
        try makeDirectoryDurably(directory)
        if linkat(AT_FDCWD, source, AT_FDCWD, target, 0) == 0 { return source }
        let code = errno
        switch code {
        case ENOENT where !FileManager.default.fileExists(atPath: source):
            // Moved by an earlier pass whose bookkeeping was cut short, or removed by a person.
            return nil
        case EEXIST:
            guard try sameContent(source, target) else {
                throw UploadQueueError(.io, "the archive already has a different file of this name; move it away",
                                       path: target)
            }
            // The copy's name durable before the only other copy goes (an earlier pass may have been cut short
            // before its fsync): the caller syncs the folder first.
            return source
        case EXDEV:
            // Across file systems a rename fails before it looks at the names, so what an earlier pass cut short
            // shows only here: the source gone (its copy was made, and the unlink was durable), or the copy in
            // place with the source still there (the unlink was not). Found by the power-cut run.
            guard FileManager.default.fileExists(atPath: source) else { return nil }
            if FileManager.default.fileExists(atPath: target) {
                guard try sameContent(source, target) else {
                    throw UploadQueueError(.io, "the archive already has a different file of this name; move it away",
                                           path: target)
                }
                try syncDirectory(directory)
                try remove(source)
                return nil
            }
            try copyDurably(source, to: target)
            // The copy's name must be on disk before the only other copy goes.
            try syncDirectory(directory)
            try remove(source)
            return nil
        default:
            // No second link (another user's file under protected_hardlinks, a file system without hard links such
            // as vfat or many FUSE mounts, a file at its link limit): a rename, which keeps the file's owner; its two
            // folders are fsynced arrival first, which holds unless another process fsyncs the folder left between
            // the two.
            guard uploadq_rename_noreplace(AT_FDCWD, source, AT_FDCWD, target) == 0 else {
                throw .system("rename", path: target)
            }
            return nil
        }
    }

    /// Creates `path` and any missing parents, fsyncing each parent a folder was created in, so that a power cut
    /// cannot take a new `{date}/` folder (and what was moved into it) away after the release was forgotten.
    private static func makeDirectoryDurably(_ path: String) throws(UploadQueueError) {
        let code = createDirectoryDurably(path, mode: 0o700)
        guard code == 0 else { throw .system("mkdir", path: path, errno: code) }
    }

    private static func sameContent(_ first: String, _ second: String) throws(UploadQueueError) -> Bool {
        func digest(_ path: String) throws(UploadQueueError) -> (Int64, String) {
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else { throw .system("open", path: path) }
            defer { close(descriptor) }
            let size = try FileFingerprint.of(descriptor: descriptor, path: path).size
            return (size, try SHA256Digest.ofFile(descriptor: descriptor, path: path, size: size))
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
        let size = try FileFingerprint.of(descriptor: input, path: source).size
        _ = try SHA256Digest.ofFile(descriptor: input, path: source, size: size) { block, offset throws(UploadQueueError) in
            try BlobStore.writeAll(output, block, at: offset, path: temporary)
        }
        guard fsync(output) == 0 else { throw .system("fsync", path: temporary) }
        guard uploadq_rename_noreplace(AT_FDCWD, temporary, AT_FDCWD, target) == 0 else {
            throw .system("rename", path: target)
        }
        keep = true
    }
}
