import Foundation
import GRDB

extension QueueStore {
    /// Events of the durable log after `seq`, oldest first, at most `limit`: every job's (`owner` nil), or one
    /// user's own. Each carries its sequence number; a URL is redacted as everywhere outside the library.
    func loggedEvents(after seq: Int64, owner: UInt32?, limit: Int) throws -> [FeedEvent] {
        try writer.read { db in
            let rows = if let owner {
                try Row.fetchAll(db, sql: """
                    SELECT * FROM event INDEXED BY event_owner WHERE owner_uid = ? AND seq > ? ORDER BY seq LIMIT ?
                    """, arguments: [Int64(owner), seq, limit])
            } else {
                try Row.fetchAll(db, sql: "SELECT * FROM event WHERE seq > ? ORDER BY seq LIMIT ?",
                                 arguments: [seq, limit])
            }
            return rows.compactMap(Self.event)
        }
    }

    /// The first and the last sequence number in the log (nil, nil when it is empty); the last one ever given
    /// out, also once its row was pruned, as `last`.
    package func eventLogBounds() throws -> (first: Int64?, last: Int64) {
        try writer.read { db in
            (try Int64.fetchOne(db, sql: "SELECT MIN(seq) FROM event"), try Self.lastEventSeq(in: db))
        }
    }

    /// The last sequence number the log ever gave out (0: none yet), also once its row was pruned.
    static func lastEventSeq(in db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'event'") ?? 0
    }

    /// Removes events from before `cutoff`, `batch` at a time; how many went. The old ones are read in `seq` order
    /// from the first (they are nearly in time order): no index on `at`, which every change of every job would
    /// write, for a look once an hour.
    func pruneEventLog(before cutoff: Date, batch: Int = 500) throws -> Int {
        var removed = 0
        while true {
            let count = try writer.write { db -> Int in
                try db.execute(sql: """
                    DELETE FROM event WHERE seq IN (SELECT seq FROM event WHERE at < ? ORDER BY seq LIMIT ?)
                    """, arguments: [cutoff, batch])
                return db.changesCount
            }
            removed += count
            if count < batch { return removed }
        }
    }

    /// A row of the log as a feed event; nil for a kind this version does not know (a newer one wrote it).
    private static func event(_ row: Row) -> FeedEvent? {
        guard let kind = FeedEvent.Kind(rawValue: row["kind"]), let at: Date = row["at"] else { return nil }
        var fields: [String: FeedEvent.Value] = [:]
        let text: String = row["fields"] ?? "{}"
        for (name, value) in (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:] {
            fields[name] = switch value {
            case let text as String: .string(name == "remote_url" ? URLRedaction.redact(text) : text)
            case _ where ContractJSON.isBoolean(value): .boolean(value as? Bool ?? false)
            case let number as NSNumber: .integer(number.int64Value)
            case let list as [Any]:
                .strings(list.compactMap { $0 as? String }.map { name == "remote_urls" ? URLRedaction.redact($0) : $0 })
            default: .null
            }
        }
        if case .string(let stored)? = fields["retry_at"], let date = Date.fromDatabaseValue(stored.databaseValue) {
            fields["retry_at"] = .string(FeedEvent.timeText(date))
        }
        var event = FeedEvent(kind, job: (row["job_id"] as String?).map(JobID.init(trusted:)), time: at, fields: fields)
        event.sequence = row["seq"]
        return event
    }
}
