import CUploadQueueSystem
import Foundation

/// The files of cancelled jobs, kept under `state_dir/cancelled/` rather than deleted.
///
/// A cancelled job leaves the queue only once its file is safe here: the file is moved first (checked), the row
/// is removed after. A crash in between leaves a row flagged for cancelling whose file is already here, and the
/// next pass finds it and finishes.
struct CancelledFiles: Sendable {
    let directory: String

    /// Where a job's file is kept: `ID-NAME`, shortened to fit a file name (`FileName.fitting`).
    func path(for job: Job) -> String {
        let name = FileName.fitting("\(job.id.rawValue)-\(PathTemplate.escape(job.originalName))",
                                    limit: FileName.componentLimit - Sidecar.suffix.utf8.count, jobID: job.id)
        return (directory as NSString).appendingPathComponent(name)
    }

    /// Moves the queue's copy of `job`'s file (and its spool sidecar) here; a file already moved by an earlier,
    /// interrupted pass counts. `reference` files are the caller's and stay where they are.
    ///
    /// The move is a second link, this folder's fsync, then the unlink from `blobs/` and its fsync: a rename is two
    /// names in two folders, and a power cut after another intake fsynced `blobs/` (but before this folder's fsync)
    /// would keep the file in neither (as the power-cut run found for a release's move).
    func keep(_ job: Job) throws(UploadQueueError) {
        guard job.mode != .reference else { return }
        try BlobStore.makeDirectory(directory)
        let target = path(for: job)
        var linked: [String] = []
        for (source, destination) in [(job.file, target), (job.file + Sidecar.suffix, target + Sidecar.suffix)] {
            if linkat(AT_FDCWD, source, AT_FDCWD, destination, 0) == 0 {
                linked.append(source)
                continue
            }
            let code = errno
            switch code {
            case ENOENT where !FileManager.default.fileExists(atPath: source):
                // Gone from the queue already: moved here by an interrupted pass, or never there (a sidecar).
                continue
            case EEXIST:
                // Linked here by an interrupted pass (the name carries the job's id): the source goes once this
                // folder is durable.
                linked.append(source)
                continue
            default:
                // No second link (a file system without hard links): a rename, arrival fsynced first below.
                guard uploadq_rename_noreplace(AT_FDCWD, source, AT_FDCWD, destination) != 0 else { continue }
            }
            throw UploadQueueError(.io, "cannot keep the file of cancelled job \(job.id) under \(directory): "
                + "\(String(cString: strerror(errno))); the job stays in the queue until it can be kept",
                job: job.id, path: source, cause: String(cString: strerror(errno)))
        }
        try syncDirectory(directory)
        for source in linked where unlink(source) != 0 && errno != ENOENT {
            throw .system("unlink", path: source, job: job.id)
        }
        try syncDirectory((job.file as NSString).deletingLastPathComponent)
    }

    /// Keeps the job's file, then removes the job: nil when there was no such job.
    func remove(_ id: JobID, from store: QueueStore) throws -> Job? {
        guard let job = try store.job(id) else { return nil }
        var lifecycle = job.lifecycle
        do throws(JobTransitionError) { _ = try lifecycle.apply(.cancel) } catch {
            throw UploadQueueError(.invalidTransition, error.description, job: id)
        }
        try keep(job)
        return try store.removeCancelled(id)
    }

    /// Removes kept files older than `cutoff` (by the time they were moved here); returns how many.
    func prune(before cutoff: Date, dryRun: Bool) -> Int {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return 0 }
        var removed = 0
        for name in names {
            let path = (directory as NSString).appendingPathComponent(name)
            var info = stat()
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
                  Double(info.st_ctim.tv_sec) < cutoff.timeIntervalSince1970 else { continue }
            if dryRun || unlink(path) == 0 { removed += 1 }
        }
        return removed
    }
}
