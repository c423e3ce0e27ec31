import Foundation
import GRDB

extension QueueStatus {
    /// A spool file left where it is for a reason of its owner's, not taken and not rejected: it is taken once the
    /// reason is gone, and nothing is lost meanwhile.
    public struct SpoolHold: Sendable, Equatable {
        /// Why the file waits.
        public struct Reason: RawRepresentable, Hashable, Sendable {
            public let rawValue: String
            public init(rawValue: String) { self.rawValue = rawValue }

            /// Its owner holds as much of the queue as `[limits] owner_pending_jobs` or `owner_pending_bytes`
            /// lets one user hold (not the destination's `quota-full`, a server's 507).
            public static let ownerQuota = Reason(rawValue: "owner-quota")
            /// A sidecar beside it belongs to another user (or has several names): taken, the file would go
            /// without its own options, so it waits until that sidecar is gone.
            public static let foreignSidecar = Reason(rawValue: "foreign-sidecar")
        }

        /// The file's name in the spool.
        public var name: String
        /// The file's owner.
        public var ownerUID: UInt32
        public var reason: Reason
        /// What is wrong and what to do, in words.
        public var message: String
        /// When the spool first held it.
        public var since: Date
    }
}

extension QueueStore {
    /// The most spool files recorded as held, in all and of one owner (so one dropper's held files cannot hide
    /// another's): the watcher still holds more, and logs each.
    static let spoolHoldRows = 1000
    static let spoolHoldRowsPerOwner = 100

    /// Whether a held spool file could be recorded.
    enum HoldRecord: Sendable, Equatable {
        case recorded
        /// Its owner has `spoolHoldRowsPerOwner` recorded already.
        case ownerFull
        /// `spoolHoldRows` are recorded already.
        case allFull
    }

    /// Records (or updates) a spool file held for `reason`; `fileChanged` is the file's change time, kept for a
    /// foreign sidecar's hold (which outlives a restart).
    func holdSpoolFile(_ hold: QueueStatus.SpoolHold, fileChanged: Int64?) throws -> HoldRecord {
        try writer.write { db in
            let known = try Bool.fetchOne(db, sql: "SELECT 1 FROM spool_hold WHERE name = ?", arguments: [hold.name]) != nil
            if !known {
                let recorded = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM spool_hold") ?? 0
                guard recorded < Self.spoolHoldRows else { return .allFull }
                let owners = try Int.fetchOne(db, sql: """
                    SELECT COUNT(*) FROM spool_hold INDEXED BY spool_hold_owner WHERE owner_uid = ?
                    """, arguments: [Int64(hold.ownerUID)]) ?? 0
                guard owners < Self.spoolHoldRowsPerOwner else { return .ownerFull }
            }
            try db.execute(sql: """
                INSERT INTO spool_hold (name, owner_uid, reason, message, since, file_changed) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (name) DO UPDATE SET owner_uid = excluded.owner_uid, reason = excluded.reason,
                message = excluded.message, file_changed = excluded.file_changed
                """, arguments: [hold.name, Int64(hold.ownerUID), hold.reason.rawValue, hold.message,
                                 StoredDate(hold.since), fileChanged])
            return .recorded
        }
    }

    /// Forgets a held spool file (taken, rejected, gone).
    func releaseSpoolFile(_ name: String) throws {
        try writer.write { db in
            try db.execute(sql: "DELETE FROM spool_hold WHERE name = ?", arguments: [name])
        }
    }

    /// A watcher starting: forgets every hold but a foreign sidecar's, and returns those with the held file's
    /// change time then. Such a file waits until its owner changes it, across restarts; the others are looked at
    /// afresh.
    func resumeSpoolHolds() throws -> [(hold: QueueStatus.SpoolHold, fileChanged: Int64)] {
        try writer.write { db in
            try db.execute(sql: "DELETE FROM spool_hold WHERE reason != ? OR file_changed IS NULL",
                           arguments: [QueueStatus.SpoolHold.Reason.foreignSidecar.rawValue])
            return try Row.fetchAll(db, sql: "SELECT * FROM spool_hold").compactMap { row in
                guard let hold = Self.spoolHold(row),
                      let changed = Int64.fromDatabaseValue(row["file_changed"] as DatabaseValue) else { return nil }
                return (hold, changed)
            }
        }
    }

    /// How many spool files are recorded as held.
    func spoolHoldCount() throws -> Int {
        try writer.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM spool_hold") ?? 0 }
    }

    /// The held spool files, oldest first: every user's (`owner` nil), or one's own; at most `limit`.
    func spoolHolds(owner: UInt32?, limit: Int) throws -> [QueueStatus.SpoolHold] {
        try writer.read { db in
            let rows = if let owner {
                try Row.fetchAll(db, sql: """
                    SELECT * FROM spool_hold INDEXED BY spool_hold_owner WHERE owner_uid = ? ORDER BY since, name LIMIT ?
                    """, arguments: [Int64(owner), limit])
            } else {
                try Row.fetchAll(db, sql: "SELECT * FROM spool_hold ORDER BY since, name LIMIT ?", arguments: [limit])
            }
            return rows.compactMap(Self.spoolHold)
        }
    }

    /// A `spool_hold` row, or nil when damaged.
    private static func spoolHold(_ row: Row) -> QueueStatus.SpoolHold? {
        let value = { (column: String) in row[column] as DatabaseValue }
        guard let owner = Int64.fromDatabaseValue(value("owner_uid")).flatMap(UInt32.init(exactly:)),
              let since = StoredDate.fromDatabaseValue(value("since"))?.date,
              let name = String.fromDatabaseValue(value("name")),
              let reason = String.fromDatabaseValue(value("reason")),
              let message = String.fromDatabaseValue(value("message"))
        else { return nil }
        return QueueStatus.SpoolHold(name: name, ownerUID: owner, reason: .init(rawValue: reason), message: message,
                                     since: since)
    }
}
