import Foundation
import GRDB

extension QueueStore {
    /// Releases whose time has come, oldest first.
    func dueReleases(now: Date = Date(), limit: Int) throws -> [FileRelease] {
        try writer.read { db in
            try FileRelease.fetchAll(db.cachedStatement(sql: "SELECT * FROM file_release WHERE due_at <= ? ORDER BY due_at LIMIT ?"),
                                     arguments: [now, limit])
        }
    }

    /// When the next release is due, if any is owed.
    func nextReleaseDue() throws -> Date? {
        try writer.read { db in try Date.fetchOne(db.cachedStatement(sql: "SELECT MIN(due_at) FROM file_release")) }
    }

    /// Forgets releases that were carried out and made durable.
    func completeReleases(_ ids: [JobID]) throws {
        guard !ids.isEmpty else { return }
        try writer.write { db in
            _ = try FileRelease.filter(ids.map(\.rawValue).contains(FileRelease.Columns.jobID)).deleteAll(db)
        }
    }

    /// Records a release that could not be done now and when to try it again.
    func postponeRelease(_ id: JobID, error: String, until date: Date) throws {
        try writer.write { db in
            try db.execute(sql: "UPDATE file_release SET attempts = attempts + 1, last_error = ?, due_at = ? WHERE job_id = ?",
                           arguments: [error, date, id.rawValue])
        }
    }

    /// Another job, not uploaded yet, that reads the same file (a `reference` file enqueued to two destinations):
    /// the file must stay for it. Looks only among the jobs not uploaded (through `job_unfinished`), so the cost
    /// follows what is in flight, not the history kept.
    func otherJobReading(_ path: String, except id: JobID) throws -> JobID? {
        let open = JobState.allCases.filter { $0 != .uploaded }
        return try writer.read { db in
            try String.fetchOne(db, sql: """
                SELECT id FROM job WHERE state IN (\(open.map { _ in "?" }.joined(separator: ", ")))
                AND \(QueueDatabase.unfinishedCondition) AND file = ? AND id != ? LIMIT 1
                """, arguments: StatementArguments(open.map(\.rawValue) + [path, id.rawValue]))
                .map { JobID(trusted: $0) }
        }
    }

    /// Turns releases owed from before retention existed into what `policy` says, judged as of each job's
    /// upload; those whose job is gone are deleted.
    func resolvePolicyReleases(_ policy: RetentionPolicy) throws {
        let pending = try writer.read { db in
            try FileRelease.filter(FileRelease.Columns.action == FileRelease.Action.policy.rawValue).fetchCount(db)
        }
        guard pending > 0 else { return }
        try writer.write { db in
            let owed = try FileRelease.filter(FileRelease.Columns.action == FileRelease.Action.policy.rawValue).fetchAll(db)
            for release in owed {
                try release.delete(db)
                let job = try Job.fetchOne(db, key: release.jobID.rawValue)
                var resolved = job.flatMap { FileRelease.owed(for: $0, policy: policy, now: release.dueAt) }
                    ?? FileRelease(jobID: release.jobID, action: .delete, path: release.path, dueAt: release.dueAt,
                                   createdAt: release.createdAt)
                resolved.createdAt = release.createdAt
                try resolved.insert(db)
            }
        }
    }

    /// Removes uploaded jobs last changed before `cutoff`, with their attempts, delivered patches and acknowledged
    /// completions, in transactions of `batch` jobs so that no write waits long. Jobs whose patch is still owed
    /// (pending or failed), or a hook run still pending, stay; so do those whose completion a library host has not acknowledged yet, once the
    /// queue has had such a host. Failed and live jobs are never touched.
    func pruneHistory(before cutoff: Date, dryRun: Bool, batch: Int = 500) throws -> PruneReport {
        var report = PruneReport()
        let consumer = try setting(Self.completionConsumerSetting) != nil
        let selection = """
            SELECT id FROM job INDEXED BY job_uploaded WHERE state = 'uploaded' AND updated_at < ?
            AND patch_state IN (?, ?)
            AND id NOT IN (SELECT job_id FROM file_release WHERE action = ?)
            AND id NOT IN (SELECT job_id FROM outbox INDEXED BY outbox_due WHERE state = '\(OutboxState.pending.rawValue)')
            AND (group_name IS NULL OR NOT EXISTS (SELECT 1 FROM job_group g WHERE g.owner_uid = IFNULL(job.owner_uid, -1)
                 AND g.name = job.group_name AND g.state != 'uploaded'))
            \(consumer ? "AND id IN (SELECT job_id FROM completion_ack)" : "") ORDER BY updated_at LIMIT ?
            """
        // The state is a literal: the `job_uploaded` index holds only those rows, and SQLite uses a partial index
        // only when the query's own text implies its condition.
        let arguments: StatementArguments = [cutoff, PatchState.none.rawValue,
                                             PatchState.done.rawValue, FileRelease.Action.policy.rawValue]
        if dryRun {
            return try writer.read { db in
                let ids = try String.fetchAll(db, sql: selection, arguments: arguments + [Int.max])
                try Self.count(ids, into: &report, db)
                report.jobs = ids.count
                return report
            }
        }
        // Tombstones, as long as the history (counted from when their job left); before this pruning makes
        // new ones, which then last until the next.
        while try writer.write({ db -> Int in
            try db.execute(sql: """
                DELETE FROM settled_job WHERE id IN (SELECT id FROM settled_job WHERE settled_at < ? LIMIT ?)
                """, arguments: [StoredDate(cutoff), batch])
            return db.changesCount
        }) == batch {}
        while true {
            let removed = try writer.write { db -> Int in
                let ids = try String.fetchAll(db, sql: selection, arguments: arguments + [batch])
                try Self.count(ids, into: &report, db)
                guard !ids.isEmpty else { return 0 }
                let list = "(" + Array(repeating: "?", count: ids.count).joined(separator: ",") + ")"
                // A job enqueued `after` one of these later finds it uploaded.
                try db.execute(sql: """
                    INSERT OR REPLACE INTO settled_job (id, owner_uid, outcome, settled_at)
                    SELECT id, owner_uid, 'uploaded', ? FROM job WHERE id IN \(list)
                    """, arguments: [StoredDate(Date())] + StatementArguments(ids))
                try db.execute(sql: "DELETE FROM job WHERE id IN \(list)", arguments: StatementArguments(ids))
                return ids.count
            }
            report.jobs += removed
            if removed < batch { break }
        }
        // Groups uploaded before the cutoff (once acknowledged, where completions are consumed): the name may
        // make a new group after that, once no member of it is left (a new group of the name is then its own
        // alone). Lanes with no job left to send: the next job of the name starts it anew (the uploaded jobs left
        // of it wait for none).
        while try writer.write({ db -> Int in
            try db.execute(sql: """
                DELETE FROM job_group WHERE (owner_uid, name) IN (SELECT owner_uid, name FROM job_group
                WHERE state = 'uploaded' AND settled_at < ? \(consumer ? "AND acknowledged_at IS NOT NULL" : "")
                AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = job_group.completing_job AND o.state = 'pending')
                AND NOT EXISTS (SELECT 1 FROM job INDEXED BY job_group_member
                    WHERE job.owner_uid IS (CASE job_group.owner_uid WHEN -1 THEN NULL ELSE job_group.owner_uid END)
                    AND job.group_name = job_group.name)
                LIMIT ?)
                """, arguments: [StoredDate(cutoff), batch])
            return db.changesCount
        }) == batch {}
        try writer.write { db in
            try db.execute(sql: """
                DELETE FROM lane WHERE blocked_by IS NULL AND NOT EXISTS (SELECT 1 FROM job INDEXED BY job_lane_live
                WHERE job.owner_uid IS (CASE lane.owner_uid WHEN -1 THEN NULL ELSE lane.owner_uid END)
                AND job.lane = lane.name AND job.state != 'uploaded')
                """)
        }
        // Idempotency keys outlive their job (the same key names it after a cancel or this very pruning) until
        // they are as old as the history kept.
        while try writer.write({ db -> Int in
            try db.execute(sql: """
                DELETE FROM idempotency_key WHERE (owner_uid, key) IN (SELECT owner_uid, key FROM idempotency_key
                WHERE created_at < ? AND job_id NOT IN (SELECT id FROM job) LIMIT ?)
                """, arguments: [cutoff, batch])
            return db.changesCount
        }) == batch {}
        // The event log keeps what the history keeps: its sequence numbers are never given out again.
        _ = try pruneEventLog(before: cutoff, batch: batch)
        return report
    }

    private static func count(_ ids: [String], into report: inout PruneReport, _ db: Database) throws {
        guard !ids.isEmpty else { return }
        let list = "(" + Array(repeating: "?", count: ids.count).joined(separator: ",") + ")"
        let arguments = StatementArguments(ids)
        report.attempts += try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM job_attempt WHERE job_id IN \(list)",
                                            arguments: arguments) ?? 0
        report.patches += try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox WHERE job_id IN \(list)",
                                           arguments: arguments) ?? 0
        report.completions += try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM completion_ack WHERE job_id IN \(list)",
                                               arguments: arguments) ?? 0
    }

    /// Gives free pages back to the file system, `pages` at a time per write; returns whether more remain and
    /// the step made progress (a database not in incremental mode keeps its free pages: no endless loop then).
    func vacuumStep(pages: Int = 256) throws -> Bool {
        try writer.writeWithoutTransaction { db in
            let before = try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0
            guard before > 0 else { return false }
            try db.execute(sql: "PRAGMA incremental_vacuum(\(max(1, pages)))")
            let after = try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0
            return after > 0 && after < before
        }
    }

    /// Copies the write-ahead log into the database file so freed pages leave the file; `truncate` also empties
    /// the log (it waits for readers, so only a command run by a person asks for it).
    func checkpoint(truncate: Bool) throws {
        try writer.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA wal_checkpoint(\(truncate ? "TRUNCATE" : "PASSIVE"))")
        }
    }

    /// Marks that a library host consumes completions: from then on, prune keeps unacknowledged ones.
    func noteCompletionConsumer() throws {
        if try setting(Self.completionConsumerSetting) == nil { try setSetting(Self.completionConsumerSetting, "1") }
    }

    static let completionConsumerSetting = "completions.consumer"
}
