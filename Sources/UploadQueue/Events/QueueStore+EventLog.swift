import Foundation
import GRDB

extension QueueStore {
    /// Events of the durable log after `seq`, oldest first, at most `limit`: every job's (`owner` nil), or one
    /// user's own, numbered in its own sequence (`owner_seq`). Each carries its sequence number; a URL is redacted
    /// as everywhere outside the library.
    ///
    /// At most `byteBudget` bytes of what the events hold (at least one event): a page is read in bounded memory,
    /// and the next read goes on after its last. `more`: the page was cut short (its limit, or the budget).
    func loggedEvents(after seq: Int64, owner: UInt32?, limit: Int,
                      byteBudget: Int = .max) throws -> (events: [FeedEvent], more: Bool) {
        try writer.read { db in
            let rows = if let owner {
                try Row.fetchCursor(db, sql: """
                    SELECT *, owner_seq AS number FROM event INDEXED BY event_owner_seq WHERE owner_uid = ? AND owner_seq > ?
                    ORDER BY owner_seq LIMIT ?
                    """, arguments: [Int64(owner), seq, limit])
            } else {
                try Row.fetchCursor(db, sql: "SELECT *, seq AS number FROM event WHERE seq > ? ORDER BY seq LIMIT ?",
                                    arguments: [seq, limit])
            }
            var events: [FeedEvent] = []
            var (bytes, read) = (0, 0)
            while let row = try rows.next() {
                bytes += 160 + ((row["fields"] as String?)?.utf8.count ?? 0)
                if bytes > byteBudget, !events.isEmpty { return (events, true) }
                read += 1
                if let event = Self.event(row) { events.append(event) }
            }
            return (events, read == limit)
        }
    }

    /// The first and the last sequence number in the log (nil, nil when it is empty); the last one ever given
    /// out, also once its row was pruned, as `last`: of every event (`owner` nil), or of one user's own.
    package func eventLogBounds(owner: UInt32? = nil) throws -> (first: Int64?, last: Int64) {
        try writer.read { db in
            guard let owner else {
                return (try Int64.fetchOne(db, sql: "SELECT MIN(seq) FROM event"), try Self.lastEventSeq(in: db))
            }
            return (try Int64.fetchOne(db, sql: """
                SELECT MIN(owner_seq) FROM event INDEXED BY event_owner_seq WHERE owner_uid = ?
                """, arguments: [Int64(owner)]), try Self.lastEventSeq(owner: owner, in: db))
        }
    }

    /// The last sequence number the log ever gave out (0: none yet), also once its row was pruned.
    static func lastEventSeq(in db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'event'") ?? 0
    }

    /// The last number of `owner`'s own sequence (where it starts, when it has none yet); of every event for nil.
    static func lastEventSeq(owner: UInt32?, in db: Database) throws -> Int64 {
        guard let owner else { return try lastEventSeq(in: db) }
        return try Int64.fetchOne(db.cachedStatement(sql: """
            SELECT COALESCE((SELECT last FROM owner_event_seq WHERE owner_uid = ?),
                            (SELECT last FROM owner_event_seq WHERE owner_uid = -1), 0)
            """), arguments: [Int64(owner)]) ?? 0
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
        event.sequence = row["number"]
        return event
    }
}
