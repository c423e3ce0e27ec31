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
    /// The most spool files recorded as held for a reason of their owner's own (its quota), in all and of one
    /// owner, so that no dropper's holds crowd out another's: the watcher still holds more, and logs each. A
    /// foreign sidecar's hold is always recorded (a restart must not forget it: the file would go without its
    /// options): one row per file another user holds up, as many as the files of others in the spool.
    static let spoolHoldRows = 1000
    static let spoolHoldRowsPerOwner = 100

    /// Whether a held spool file could be recorded.
    enum HoldRecord: Sendable, Equatable {
        case recorded
        /// `spoolHoldRowsPerOwner` of its owner's are recorded already.
        case ownerFull
        /// `spoolHoldRows` are recorded already.
        case allFull
    }

    /// A held spool file as recorded: the hold, and the file it holds (by device and inode: a foreign sidecar's
    /// hold outlives a restart for that file alone, not for another put under its name since).
    struct RecordedSpoolHold: Sendable, Equatable {
        var hold: QueueStatus.SpoolHold
        var device: Int64
        var inode: Int64
    }

    /// Records (or updates) a held spool file; a hold for the owner's own reason only within the bounds
    /// (`spoolHoldRows`, `spoolHoldRowsPerOwner`), counted when it is new or was a foreign sidecar's.
    func holdSpoolFile(_ record: RecordedSpoolHold) throws -> HoldRecord {
        let hold = record.hold
        let foreign = QueueStatus.SpoolHold.Reason.foreignSidecar.rawValue
        return try writer.write { db in
            let previous = try DatabaseValue.fetchOne(db, sql: "SELECT reason FROM spool_hold WHERE name = ?",
                                                      arguments: [hold.name]).map(String.fromDatabaseValue)
            if hold.reason.rawValue != foreign, previous == nil || previous == foreign {
                // The literal condition lets SQLite count in the partial index alone.
                let capped = "SELECT COUNT(*) FROM spool_hold INDEXED BY spool_hold_capped WHERE reason != '\(foreign)'"
                let refused: HoldRecord? = if try Int.fetchOne(db, sql: capped) ?? 0 >= Self.spoolHoldRows {
                    .allFull
                } else if try Int.fetchOne(db, sql: capped + " AND owner_uid = ?",
                                           arguments: [Int64(hold.ownerUID)]) ?? 0 >= Self.spoolHoldRowsPerOwner {
                    .ownerFull
                } else {
                    nil
                }
                if let refused {
                    // A foreign sidecar's row of the name no longer says why the file waits.
                    try db.execute(sql: "DELETE FROM spool_hold WHERE name = ?", arguments: [hold.name])
                    return refused
                }
            }
            try db.execute(sql: """
                INSERT INTO spool_hold (name, owner_uid, reason, message, since, file_device, file_inode)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (name) DO UPDATE SET owner_uid = excluded.owner_uid, reason = excluded.reason,
                message = excluded.message, file_device = excluded.file_device, file_inode = excluded.file_inode
                """, arguments: [hold.name, Int64(hold.ownerUID), hold.reason.rawValue, hold.message,
                                 StoredDate(hold.since), record.device, record.inode])
            return .recorded
        }
    }

    /// Forgets a held spool file (taken, rejected, gone).
    func releaseSpoolFile(_ name: String) throws {
        try writer.write { db in
            try db.execute(sql: "DELETE FROM spool_hold WHERE name = ?", arguments: [name])
        }
    }

    /// A watcher starting: forgets every hold but a foreign sidecar's (and any row it cannot read), and returns
    /// those. Such a file waits until its owner writes its own sidecar, across restarts; the others are looked at
    /// afresh.
    func resumeSpoolHolds() throws -> [RecordedSpoolHold] {
        try writer.write { db in
            try db.execute(sql: """
                DELETE FROM spool_hold WHERE reason IS NOT ? OR typeof(name) != 'text' OR typeof(owner_uid) != 'integer'
                OR typeof(message) != 'text' OR typeof(file_device) != 'integer' OR typeof(file_inode) != 'integer'
                """, arguments: [QueueStatus.SpoolHold.Reason.foreignSidecar.rawValue])
            var resumed: [RecordedSpoolHold] = []
            for row in try Row.fetchAll(db, sql: "SELECT * FROM spool_hold") {
                guard let hold = Self.spoolHold(row) else {
                    try db.execute(sql: "DELETE FROM spool_hold WHERE name = ?", arguments: [row["name"] as DatabaseValue])
                    continue
                }
                resumed.append(RecordedSpoolHold(hold: hold, device: row["file_device"], inode: row["file_inode"]))
            }
            return resumed
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
