import Foundation
import GRDB

extension QueueStore {
    /// What each destination's server taught with a 413 (`RequestBodyLimit`), by destination.
    func requestLimits() throws -> [String: RequestLimit] {
        try writer.read { db in
            var limits: [String: RequestLimit] = [:]
            for row in try Row.fetchAll(db, sql: """
                SELECT destination, chunk_cap, chunk_cap_learnt_at, refused_at, refusal_learnt_at FROM request_limit
                """) {
                let chunkCapLearntAt: StoredDate? = row["chunk_cap_learnt_at"]
                let refusalLearntAt: StoredDate? = row["refusal_learnt_at"]
                limits[row["destination"]] = RequestLimit(chunkCap: row["chunk_cap"],
                                                          chunkCapLearntAt: chunkCapLearntAt?.date,
                                                          refusedAt: row["refused_at"],
                                                          refusalLearntAt: refusalLearntAt?.date)
            }
            return limits
        }
    }

    /// Keeps what `destination`'s server taught.
    func recordRequestLimit(_ destination: String, _ learnt: RequestLimit) throws {
        try writer.write { db in
            try db.execute(sql: """
                INSERT INTO request_limit (destination, chunk_cap, chunk_cap_learnt_at, refused_at, refusal_learnt_at)
                VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (destination) DO UPDATE SET chunk_cap = excluded.chunk_cap,
                    chunk_cap_learnt_at = excluded.chunk_cap_learnt_at, refused_at = excluded.refused_at,
                    refusal_learnt_at = excluded.refusal_learnt_at
                """, arguments: [destination, learnt.chunkCap, learnt.chunkCapLearntAt.map(StoredDate.init),
                                 learnt.refusedAt, learnt.refusalLearntAt.map(StoredDate.init)])
        }
    }

    /// Forgets what was learnt of destinations no longer configured (a renamed one starts afresh).
    func forgetRequestLimits(except destinations: some Collection<String>) throws {
        try writer.write { db in
            let names = Array(destinations)
            let placeholders = names.isEmpty ? "NULL" : names.map { _ in "?" }.joined(separator: ",")
            try db.execute(sql: "DELETE FROM request_limit WHERE destination NOT IN (\(placeholders))",
                           arguments: StatementArguments(names))
        }
    }
}
