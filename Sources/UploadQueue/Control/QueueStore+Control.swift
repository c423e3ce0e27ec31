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
            try Self.unacknowledgedCompletions(owner: owner, after: after, limit: limit, byteBudget: .max, in: db).jobs
        }
    }

    /// `unacknowledgedCompletions`, and the event log's last sequence number in the same read: a reader that goes
    /// on with `completions(since:)` from it misses no completion committed after this read. At most `byteBudget`
    /// bytes of what the jobs carry, at least one.
    /// `more`: the page was cut short (its limit, or the budget): another read after its last goes on.
    func unacknowledgedCompletionsAndSeq(owner: UInt32?, after: JobID? = nil, limit: Int,
                                         byteBudget: Int = .max) throws -> (jobs: [Job], seq: Int64, more: Bool) {
        try writer.read { db in
            let seq = try Self.lastEventSeq(owner: owner, in: db)
            let page = try Self.unacknowledgedCompletions(owner: owner, after: after, limit: limit, byteBudget: byteBudget,
                                                          in: db)
            return (page.jobs, seq, page.more)
        }
    }

    /// Unacknowledged completions whose upload was logged after `since` (an event sequence number), in the order
    /// the uploads were committed, at most `limit`, each with its event's number; and where the next read goes on
    /// from. Commit order, not time order: an upload committed later with an earlier time is never passed over.
    /// At most `byteBudget` bytes of what the jobs carry (`listedBytes`), at least one: a page is built in bounded
    /// memory, and one cut short goes on from its last.
    func completions(since: Int64, owner: UInt32?, limit: Int,
                     byteBudget: Int = .max) throws -> (jobs: [(job: Job, seq: Int64)], seq: Int64, more: Bool) {
        try writer.read { db in
            let last = try Self.lastEventSeq(owner: owner, in: db)
            let rows = if let owner {
                try Row.fetchCursor(db, sql: """
                    SELECT job.*, event.owner_seq AS completion_seq FROM event INDEXED BY event_owner_seq
                    JOIN job ON job.id = event.job_id
                    WHERE event.owner_uid = ? AND event.owner_seq > ? AND event.kind = 'uploaded' AND job.state = 'uploaded'
                    AND job.id NOT IN (SELECT job_id FROM owner_ack) ORDER BY event.owner_seq LIMIT ?
                    """, arguments: [Int64(owner), since, limit])
            } else {
                try Row.fetchCursor(db, sql: """
                    SELECT job.*, event.seq AS completion_seq FROM event JOIN job ON job.id = event.job_id
                    WHERE event.seq > ? AND event.kind = 'uploaded' AND job.state = 'uploaded'
                    AND job.id NOT IN (SELECT job_id FROM completion_ack) ORDER BY event.seq LIMIT ?
                    """, arguments: [since, limit])
            }
            var jobs: [(job: Job, seq: Int64)] = []
            var (bytes, cut) = (0, false)
            while let row = try rows.next() {
                bytes += Self.listedBytes(row)
                if bytes > byteBudget, !jobs.isEmpty {
                    cut = true
                    break
                }
                jobs.append((job: try Job(row: row), seq: row["completion_seq"] as Int64))
            }
            // A full page goes on from its last; otherwise from the last number given out (nothing after it yet).
            let more = cut || jobs.count == limit
            return (jobs, more ? jobs.last?.seq ?? since : max(since, last), more)
        }
    }

    private static func unacknowledgedCompletions(owner: UInt32?, after: JobID?, limit: Int, byteBudget: Int,
                                                  in db: Database) throws -> (jobs: [Job], more: Bool) {
        var from = ""
        var arguments: StatementArguments = []
        // The cursor only from a job this reader may see: another user's job tells a dropper nothing.
        if let after, let updated = try Date.fetchOne(db, sql: """
            SELECT updated_at FROM job WHERE id = ? AND state = 'uploaded' AND (? IS NULL OR owner_uid = ?)
            """, arguments: [after.rawValue, owner.map { Int64($0) }, owner.map { Int64($0) }]) {
            from = "AND (updated_at, id) > (?, ?)"
            arguments = [updated, after.rawValue]
        }
        let rows = if let owner {
            try Row.fetchCursor(db, sql: """
                SELECT * FROM job INDEXED BY job_owner WHERE owner_uid = ? AND state = 'uploaded' \(from)
                AND id NOT IN (SELECT job_id FROM owner_ack) ORDER BY updated_at, id LIMIT ?
                """, arguments: [Int64(owner)] + arguments + [limit])
        } else {
            try Row.fetchCursor(db, sql: """
                SELECT * FROM job INDEXED BY job_uploaded WHERE state = 'uploaded' \(from)
                AND id NOT IN (SELECT job_id FROM completion_ack) ORDER BY updated_at, id LIMIT ?
                """, arguments: arguments + [limit])
        }
        var jobs: [Job] = []
        var bytes = 0
        while let row = try rows.next() {
            bytes += listedBytes(row)
            if bytes > byteBudget, !jobs.isEmpty { return (jobs, true) }
            jobs.append(try Job(row: row))
        }
        return (jobs, jobs.count == limit)
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
