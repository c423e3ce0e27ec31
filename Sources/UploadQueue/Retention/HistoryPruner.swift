import Foundation

/// Prunes what a queue keeps of the past: uploaded jobs with their history, and kept files of cancelled jobs;
/// then gives the database's free pages back to the file system in small steps.
struct HistoryPruner: Sendable {
    let store: QueueStore
    let cancelled: CancelledFiles
    let databasePath: String

    /// Prunes everything finished before `cutoff`. Each step is a short write, with a pause between the vacuum
    /// steps, so the daemon's own writes never wait long.
    /// The database and file work runs on `BlockingWork`'s threads, never on the cooperative ones.
    func prune(before cutoff: Date, dryRun: Bool, truncateLog: Bool = false) async throws -> PruneReport {
        let store = self.store
        let cancelled = self.cancelled
        let before = databaseBytes()
        var report = try await BlockingWork.run { try store.pruneHistory(before: cutoff, dryRun: dryRun) }
        report.cancelledFiles = await BlockingWork.runResult { () throws(Never) in
            cancelled.prune(before: cutoff, dryRun: dryRun)
        }.get()
        report.databaseBytesBefore = before
        if !dryRun, report.jobs > 0 {
            while try await BlockingWork.run({ try store.vacuumStep() }) {
                try await Task.sleep(for: .milliseconds(5))
            }
            try await BlockingWork.run { try store.checkpoint(truncate: truncateLog) }
        }
        report.databaseBytesAfter = dryRun ? before : databaseBytes()
        return report
    }

    /// The database and its write-ahead log, in bytes.
    func databaseBytes() -> Int64 {
        [databasePath, databasePath + "-wal"].reduce(0) { total, path in
            total + ((try? FileFingerprint.of(path: path).size) ?? 0)
        }
    }
}
