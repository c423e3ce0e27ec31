import Foundation
import GRDB

/// A metadata patch owed for an uploaded job: how often it was tried, why it last failed, when it is due.
public struct PatchRecord: Sendable, Equatable {
    public var jobID: JobID
    public var attempts: Int
    public var lastError: String?
    public var nextAttemptAt: Date?
}

/// What became of one patch attempt.
enum PatchOutcome: Sendable, Equatable {
    case done
    case retry(error: String, at: Date)
    case failed(error: String)
}

extension QueueStore {
    /// Records that `id`'s patch is owed, in the transaction that marks the job uploaded (so a crash cannot lose
    /// it); due at once.
    static func owePatch(_ id: JobID, now: Date, in db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO patch_outbox (job_id, attempts, next_attempt_at, created_at, updated_at)
            VALUES (?, 0, ?, ?, ?) ON CONFLICT(job_id) DO NOTHING
            """).execute(arguments: [id.rawValue, now, now, now])
    }

    /// Uploaded jobs whose patch is pending and due, oldest first.
    func duePatches(now: Date = Date(), limit: Int) throws -> [Job] {
        try writer.read { db in
            let ids = try String.fetchAll(db.cachedStatement(sql: """
                SELECT o.job_id FROM patch_outbox o JOIN job j ON j.id = o.job_id
                WHERE j.patch_state = ? AND o.next_attempt_at <= ? ORDER BY o.next_attempt_at LIMIT ?
                """), arguments: [PatchState.pending.rawValue, now, limit])
            return try ids.compactMap { try Job.fetchOne(db, key: $0) }
        }
    }

    /// When the next pending patch is due, if any.
    func nextPatchDue() throws -> Date? {
        try writer.read { db in
            try Date.fetchOne(db.cachedStatement(sql: """
                SELECT MIN(o.next_attempt_at) FROM patch_outbox o JOIN job j ON j.id = o.job_id
                WHERE j.patch_state = ?
                """), arguments: [PatchState.pending.rawValue])
        }
    }

    /// Records an attempt's outcome on the outbox row and the job's patch state, in one transaction.
    func finishPatch(_ id: JobID, outcome: PatchOutcome, now: Date = Date()) throws {
        try writer.write { db in
            let state: PatchState
            let error: String?
            let next: Date
            switch outcome {
            case .done: (state, error, next) = (.done, nil, now)
            case .retry(let message, let at): (state, error, next) = (.pending, message, at)
            case .failed(let message): (state, error, next) = (.failed, message, now)
            }
            try db.execute(sql: """
                UPDATE patch_outbox SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?, updated_at = ?
                WHERE job_id = ?
                """, arguments: [error, next, now, id.rawValue])
            try db.execute(sql: "UPDATE job SET patch_state = ?, updated_at = ? WHERE id = ?",
                           arguments: [state.rawValue, now, id.rawValue])
        }
    }

    /// Moves a pending patch's next look to `date` without counting an attempt (its link does not allow it now).
    func postponePatch(_ id: JobID, until date: Date) throws {
        try writer.write { db in
            try db.execute(sql: "UPDATE patch_outbox SET next_attempt_at = ?, updated_at = ? WHERE job_id = ?",
                           arguments: [date, Date(), id.rawValue])
        }
    }

    /// The patch owed for a job, if it has one.
    public func patchRecord(_ id: JobID) throws -> PatchRecord? {
        try writer.read { db in
            guard let row = try Row.fetchOne(db, sql: """
                SELECT attempts, last_error, next_attempt_at FROM patch_outbox WHERE job_id = ?
                """, arguments: [id.rawValue]) else { return nil }
            return PatchRecord(jobID: id, attempts: row["attempts"], lastError: row["last_error"],
                               nextAttemptAt: row["next_attempt_at"])
        }
    }

    /// Makes a failed patch pending and due now (`uploadq retry` of an uploaded job).
    func retryPatch(_ id: JobID, now: Date = Date()) throws -> Bool {
        try writer.write { db in
            try db.execute(sql: "UPDATE patch_outbox SET next_attempt_at = ?, updated_at = ? WHERE job_id = ?",
                           arguments: [now, now, id.rawValue])
            try db.execute(sql: "UPDATE job SET patch_state = ? WHERE id = ? AND patch_state = ?",
                           arguments: [PatchState.pending.rawValue, id.rawValue, PatchState.failed.rawValue])
            return db.changesCount > 0
        }
    }

    /// Uploaded jobs whose completion the library host has not acknowledged, oldest first.
    func unacknowledgedCompletions() throws -> [Job] {
        try writer.read { db in
            try Job.fetchAll(db, sql: """
                SELECT * FROM job INDEXED BY job_uploaded WHERE state = 'uploaded'
                AND id NOT IN (SELECT job_id FROM completion_ack) ORDER BY updated_at, id
                """)
        }
    }

    func isAcknowledged(_ id: JobID) throws -> Bool {
        try writer.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM completion_ack WHERE job_id = ?", arguments: [id.rawValue]) ?? false
        }
    }

    /// Records that the host has handled a job's completion: it is not delivered again.
    func acknowledge(_ id: JobID, now: Date = Date()) throws {
        try writer.write { db in
            try db.execute(sql: "INSERT INTO completion_ack (job_id, acknowledged_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                           arguments: [id.rawValue, now])
        }
    }
}
