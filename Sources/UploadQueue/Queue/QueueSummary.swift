import Foundation
import GRDB

/// Counts and bytes per state, the active transfers and the next retry: the data behind `uploadq status`.
public struct QueueSummary: Sendable, Equatable {
    /// A transfer in progress.
    public struct ActiveTransfer: Sendable, Equatable {
        public var id: JobID
        public var file: String
        public var originalName: String
        public var destination: String
        public var bytesConfirmed: Int64
        public var size: Int64
        public var rateBytesPerSecond: Int64
    }

    public var counts: [JobState: Int]
    public var bytes: [JobState: Int64]
    /// Pending jobs per waiting reason (jobs without a reason are not listed).
    public var waiting: [WaitingReason: Int]
    /// Failed jobs that need a person.
    public var permanentFailures: Int
    public var active: [ActiveTransfer]
    public var nextAttemptAt: Date?
    public var patches: [PatchState: Int]
    /// Attempts that ended in a failure (each one a retry or a permanent failure), since the queue was created.
    public var failedAttempts: Int = 0
    /// Destinations whose jobs wait because their circuit is open.
    public var openCircuits: Set<String> = []
    /// Uploaded copies whose release (delete or archive, by `[retention]`) is still owed.
    public var owedReleases: Int = 0
    /// The last error of an owed release that failed, if any (a full archive disk, a file in the way).
    public var releaseError: String?
}

extension QueueStore {
    /// The summary, read in one short read transaction (cheap on large queues: aggregates over indexes).
    public func summary() throws -> QueueSummary {
        try writer.read { db in
            var counts = Dictionary(uniqueKeysWithValues: JobState.allCases.map { ($0, 0) })
            var bytes = Dictionary(uniqueKeysWithValues: JobState.allCases.map { ($0, Int64(0)) })
            for row in try Row.fetchAll(db, sql: "SELECT state, COUNT(*), COALESCE(SUM(size), 0) FROM job GROUP BY state") {
                guard let state = JobState(rawValue: row[0]) else { continue }
                counts[state] = row[1]
                bytes[state] = row[2]
            }
            var waiting: [WaitingReason: Int] = [:]
            for row in try Row.fetchAll(db, sql: """
                SELECT waiting_reason, COUNT(*) FROM job WHERE state = ? AND waiting_reason IS NOT NULL
                GROUP BY waiting_reason
                """, arguments: [JobState.pending.rawValue]) {
                if let reason = WaitingReason(rawValue: row[0]) { waiting[reason] = row[1] }
            }
            let permanent = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM job WHERE state = ? AND permanent = 1",
                                             arguments: [JobState.failed.rawValue]) ?? 0
            let active = try Job.filter(Job.Columns.state == JobState.uploading.rawValue).order(Job.Columns.id).fetchAll(db)
                .map {
                    QueueSummary.ActiveTransfer(id: $0.id, file: $0.file, originalName: $0.originalName,
                                                destination: $0.destination, bytesConfirmed: $0.bytesConfirmed,
                                                size: $0.size, rateBytesPerSecond: $0.rateBytesPerSecond)
                }
            let next = try Date.fetchOne(db, sql: """
                SELECT MIN(next_attempt_at) FROM job WHERE state IN (?, ?) AND permanent = 0
                """, arguments: [JobState.failed.rawValue, JobState.pending.rawValue])
            var patches = Dictionary(uniqueKeysWithValues: PatchState.allCases.map { ($0, 0) })
            for row in try Row.fetchAll(db, sql: """
                SELECT patch_state, COUNT(*) FROM job WHERE patch_state != ? GROUP BY patch_state
                """, arguments: [PatchState.none.rawValue]) {
                if let state = PatchState(rawValue: row[0]) { patches[state] = row[1] }
            }
            var summary = QueueSummary(counts: counts, bytes: bytes, waiting: waiting, permanentFailures: permanent,
                                       active: active, nextAttemptAt: next, patches: patches)
            summary.failedAttempts = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM job_attempt WHERE outcome = 'failed'") ?? 0
            summary.openCircuits = Set(try String.fetchAll(db, sql: """
                SELECT DISTINCT destination FROM job WHERE state = ? AND waiting_reason = ?
                """, arguments: [JobState.pending.rawValue, WaitingReason.circuitOpen.rawValue]))
            summary.owedReleases = try FileRelease.fetchCount(db)
            summary.releaseError = try String.fetchOne(db, sql: """
                SELECT last_error FROM file_release WHERE last_error IS NOT NULL ORDER BY due_at LIMIT 1
                """)
            return summary
        }
    }
}
