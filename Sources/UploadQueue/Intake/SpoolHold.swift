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

    /// Records (or updates) a spool file held for `reason`; false when `spoolHoldRows` are recorded already, or
    /// `spoolHoldRowsPerOwner` of its owner's.
    @discardableResult
    func holdSpoolFile(_ hold: QueueStatus.SpoolHold) throws -> Bool {
        try writer.write { db in
            let recorded = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM spool_hold") ?? 0
            let owners = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM spool_hold INDEXED BY spool_hold_owner WHERE owner_uid = ?",
                                          arguments: [Int64(hold.ownerUID)]) ?? 0
            let known = try Bool.fetchOne(db, sql: "SELECT 1 FROM spool_hold WHERE name = ?", arguments: [hold.name]) != nil
            guard known || (recorded < Self.spoolHoldRows && owners < Self.spoolHoldRowsPerOwner) else { return false }
            try db.execute(sql: """
                INSERT INTO spool_hold (name, owner_uid, reason, message, since) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (name) DO UPDATE SET owner_uid = excluded.owner_uid, reason = excluded.reason,
                message = excluded.message
                """, arguments: [hold.name, Int64(hold.ownerUID), hold.reason.rawValue, hold.message,
                                 StoredDate(hold.since)])
            return true
        }
    }

    /// Forgets a held spool file (taken, rejected, gone); all of them when `name` is nil (a watcher starting).
    func releaseSpoolFile(_ name: String?) throws {
        try writer.write { db in
            if let name {
                try db.execute(sql: "DELETE FROM spool_hold WHERE name = ?", arguments: [name])
            } else {
                try db.execute(sql: "DELETE FROM spool_hold")
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
            return rows.compactMap { row in
                guard let owner = UInt32(exactly: row["owner_uid"] as Int64), let since = (row["since"] as StoredDate?)?.date
                else { return nil }
                return QueueStatus.SpoolHold(name: row["name"], ownerUID: owner,
                                             reason: .init(rawValue: row["reason"]), message: row["message"], since: since)
            }
        }
    }
}
