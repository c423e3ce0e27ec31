import Foundation
import GRDB

extension QueueStore {
    /// The job an earlier request of `owner` with this `Idempotency-Key` made, whether or not it is still in the
    /// queue (a cancelled or pruned job's key still names it, until the history's pruning forgets the key).
    func idempotentJob(owner: UInt32, key: String) throws -> JobID? {
        try writer.read { db in
            try String.fetchOne(db, sql: """
                SELECT job_id FROM idempotency_key WHERE owner_uid = ? AND key = ?
                """, arguments: [Int64(owner), key]).map(JobID.init(trusted:))
        }
    }

    /// Remembers that `owner`'s request with this key made (or found) `job`; a key already remembered keeps its job.
    func recordIdempotencyKey(owner: UInt32, key: String, job: JobID, now: Date = Date()) throws {
        try writer.write { db in try Self.rememberIdempotencyKey(owner: owner, key: key, job: job, now: now, in: db) }
    }

    /// `recordIdempotencyKey` inside a transaction of the caller's: the intake's, which makes the job.
    static func rememberIdempotencyKey(owner: UInt32, key: String, job: JobID, now: Date = Date(),
                                       in db: Database) throws {
        try db.execute(sql: """
            INSERT INTO idempotency_key (owner_uid, key, job_id, created_at) VALUES (?, ?, ?, ?)
            ON CONFLICT DO NOTHING
            """, arguments: [Int64(owner), key, job.rawValue, now])
    }

    /// Uploaded jobs whose completion was not acknowledged, oldest first, at most `limit`: the queue's own
    /// consumer's (`owner` nil: every job, acknowledged in `completion_ack`), or one user's of its own jobs
    /// (acknowledged in `owner_ack`, so that neither takes news from the other).
    ///
    /// `after` (a completion returned before) continues from it in that order, so that a client that holds
    /// completions it has not acknowledged yet is not sent them again and again; a job no longer uploaded there
    /// (pruned) continues from the first.
    func unacknowledgedCompletions(owner: UInt32?, after: JobID? = nil, limit: Int) throws -> [Job] {
        try writer.read { db in
            var from = ""
            var arguments: StatementArguments = []
            // The cursor only from a job this reader may see: another user's job tells a dropper nothing.
            if let after, let updated = try Date.fetchOne(db, sql: """
                SELECT updated_at FROM job WHERE id = ? AND state = 'uploaded' AND (? IS NULL OR owner_uid = ?)
                """, arguments: [after.rawValue, owner.map { Int64($0) }, owner.map { Int64($0) }]) {
                from = "AND (updated_at, id) > (?, ?)"
                arguments = [updated, after.rawValue]
            }
            guard let owner else {
                return try Job.fetchAll(db, sql: """
                    SELECT * FROM job INDEXED BY job_uploaded WHERE state = 'uploaded' \(from)
                    AND id NOT IN (SELECT job_id FROM completion_ack) ORDER BY updated_at, id LIMIT ?
                    """, arguments: arguments + [limit])
            }
            return try Job.fetchAll(db, sql: """
                SELECT * FROM job INDEXED BY job_owner WHERE owner_uid = ? AND state = 'uploaded' \(from)
                AND id NOT IN (SELECT job_id FROM owner_ack) ORDER BY updated_at, id LIMIT ?
                """, arguments: [Int64(owner)] + arguments + [limit])
        }
    }

    /// Records that `owner` handled the completion of its own job `id`: not delivered to it again.
    func acknowledge(_ id: JobID, owner: UInt32, now: Date = Date()) throws {
        try writer.write { db in
            try db.execute(sql: """
                INSERT INTO owner_ack (job_id, owner_uid, acknowledged_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING
                """, arguments: [id.rawValue, Int64(owner), now])
        }
    }
}
