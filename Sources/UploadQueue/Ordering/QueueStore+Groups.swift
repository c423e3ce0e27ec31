import Foundation
import GRDB

extension QueueStore {
    /// The owner key of a group: a user's uid, or -1 for the queue's own user (jobs with no owner).
    private static func groupOwner(_ owner: UInt32?) -> Int64 { owner.map { Int64($0) } ?? -1 }

    /// A job's `owner_uid` as stored (NULL for the queue's own user).
    private static func jobOwner(_ owner: UInt32?) -> Int64? { owner.map { Int64($0) } }

    /// A group's tallies as stored, or nil when it has none (no member ever joined, or it was pruned).
    private static func tally(owner: UInt32?, name: String, in db: Database) throws -> GroupTally? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT members, remaining, failed, closed_at, state FROM job_group WHERE owner_uid = ? AND name = ?
            """), arguments: [groupOwner(owner), name]) else { return nil }
        return GroupTally(members: row["members"], remaining: row["remaining"], failed: row["failed"],
                          closed: (row["closed_at"] as DatabaseValue).isNull == false,
                          uploaded: row["state"] == JobGroup.State.uploaded.rawValue)
    }

    private static func store(_ tally: GroupTally, owner: UInt32?, name: String, in db: Database) throws {
        try db.cachedStatement(sql: """
            UPDATE job_group SET state = ?, members = ?, remaining = ?, failed = ? WHERE owner_uid = ? AND name = ?
            """).execute(arguments: [tally.state.rawValue, tally.members, tally.remaining, tally.failed,
                                     groupOwner(owner), name])
    }

    /// Makes a job just inserted a member of its group, in the enqueue's transaction: the group is made when its
    /// first member joins. A closed or uploaded group takes no member: the enqueue is refused (and undone).
    static func joinGroup(_ job: Job, in db: Database, now: Date) throws {
        guard let name = job.group else { return }
        var tally = try tally(owner: job.ownerUID, name: name, in: db)
        if let existing = tally, !existing.admitsMembers {
            throw UploadQueueError(.groupClosed, """
                group "\(SafeText.escaped(name))" is \(existing.state.rawValue): no member joins it after \
                `uploadq group close`; enqueue into another group; nothing was enqueued
                """, job: job.id)
        }
        if let existing = tally, existing.members >= StoredValueLimits.groupMembers {
            throw UploadQueueError(.invalidArgument, """
                group "\(SafeText.escaped(name))" has \(existing.members) members, the most a group may have (its \
                completion carries every member's URL); enqueue into another group; nothing was enqueued
                """, job: job.id)
        }
        if tally == nil {
            try db.cachedStatement(sql: """
                INSERT INTO job_group (owner_uid, name, state, created_at) VALUES (?, ?, ?, ?)
                """).execute(arguments: [groupOwner(job.ownerUID), name, JobGroup.State.open.rawValue, StoredDate(now)])
            tally = GroupTally()
        }
        _ = tally!.apply(.joined)
        try store(tally!, owner: job.ownerUID, name: name, in: db)
    }

    /// Applies what a member's change means to its group, in the change's transaction: its tallies, and the
    /// group's completion or `group.incomplete` when this change makes one.
    static func settleGroup(_ job: Job, _ change: GroupTally.Change, in db: Database, now: Date) throws {
        guard let name = job.group else { return }
        try settleGroup(member: job.id, owner: job.ownerUID, group: name, error: job.lastError, change, in: db, now: now)
    }

    /// `settleGroup(_:_:in:now:)` for the member `id` of `owner`'s group `name`, whose last error is `error`.
    static func settleGroup(member id: JobID, owner: UInt32?, group name: String, error: String?,
                            _ change: GroupTally.Change, in db: Database, now: Date) throws {
        guard var tally = try tally(owner: owner, name: name, in: db) else { return }
        let outcome = tally.apply(change)
        try store(tally, owner: owner, name: name, in: db)
        switch outcome {
        case .completed:
            // The member whose upload completed it; none when the last one left (a cancel): then the last uploaded.
            try complete(owner: owner, name: name, by: change == .uploaded ? id.rawValue : nil, in: db,
                         now: now)
        case .incomplete:
            try db.cachedStatement(sql: "UPDATE job_group SET failing_job = ? WHERE owner_uid = ? AND name = ?")
                .execute(arguments: [id.rawValue, groupOwner(owner), name])
            try logOrderEvent("group.incomplete", job: id.rawValue, owner: owner, fields: [
                "group": name, "failed": tally.failed, "error": error ?? "",
            ], in: db, now: now)
        case nil:
            if change == .revived || change == .left(failedForGood: true), try String.fetchOne(db.cachedStatement(sql: """
                SELECT failing_job FROM job_group WHERE owner_uid = ? AND name = ?
                """), arguments: [groupOwner(owner), name]) == id.rawValue {
                // The member it named is failed no more: name another still failed, if one is.
                let failing = tally.failed == 0 ? nil : try String.fetchOne(db.cachedStatement(sql: """
                    SELECT id FROM job WHERE owner_uid IS ? AND group_name = ? AND state = 'failed' AND permanent = 1
                    AND id != ? LIMIT 1
                    """), arguments: [jobOwner(owner), name, id.rawValue])
                try db.cachedStatement(sql: "UPDATE job_group SET failing_job = ? WHERE owner_uid = ? AND name = ?")
                    .execute(arguments: [failing, groupOwner(owner), name])
            }
        }
    }

    /// The group's completion, in the transaction of the change that made it: the members as they are now, the
    /// `group.uploaded` event, and the hook and patch owed on the completing member (the member whose upload
    /// completed it, or at a close, the last one uploaded; none for a group left with no member).
    private static func complete(owner: UInt32?, name: String, by completing: String?, in db: Database,
                                 now: Date) throws {
        let rows = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT id, original_name, size, sha256, remote_url, updated_at FROM job INDEXED BY job_group_member
            WHERE owner_uid IS ? AND group_name = ? AND state = 'uploaded' ORDER BY created_at, id
            """), arguments: [jobOwner(owner), name])
        var members: [JobGroup.Member] = []
        var last = completing
        var lastTime = Date.distantPast
        for row in rows {
            let id: String = row["id"]
            let remoteURL: String? = row["remote_url"]
            members.append(JobGroup.Member(jobID: JobID(trusted: id), originalName: row["original_name"], size: row["size"],
                                           sha256: row["sha256"], remoteURL: remoteURL ?? ""))
            let time: Date = row["updated_at"] ?? .distantPast
            if completing == nil, time >= lastTime { (last, lastTime) = (id, time) }
        }
        let urls: [String] = members.map { $0.remoteURL }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let completion = String(decoding: try encoder.encode(members), as: UTF8.self)
        try db.cachedStatement(sql: """
            UPDATE job_group SET completion = ?, completing_job = ?, settled_at = ?, failing_job = NULL
            WHERE owner_uid = ? AND name = ?
            """).execute(arguments: [completion, last, StoredDate(now), groupOwner(owner), name])
        try logOrderEvent("group.uploaded", job: last, owner: owner, fields: [
            "group": name, "members": members.count, "remote_urls": urls,
        ], in: db, now: now)
        guard let last else { return }
        try db.cachedStatement(sql: """
            INSERT OR IGNORE INTO outbox (job_id, consumer, state, next_attempt_at, created_at, updated_at)
            SELECT ?, name, 'pending', ?, ?, ? FROM outbox_consumer WHERE event = ?
            """).execute(arguments: [last, now, now, now, HookEvent.groupUploaded.rawValue])
        if try String.fetchOne(db.cachedStatement(sql: "SELECT patch FROM job_group WHERE owner_uid = ? AND name = ?"),
                               arguments: [groupOwner(owner), name]) != nil {
            try db.cachedStatement(sql: """
                INSERT OR IGNORE INTO outbox (job_id, consumer, state, next_attempt_at, created_at, updated_at)
                VALUES (?, ?, 'pending', ?, ?, ?)
                """).execute(arguments: [last, OutboxConsumer.groupPatch.description, now, now, now])
        }
    }

    /// A line of the durable event log written by the store itself (a group's or a lane's), in the transaction of
    /// the change it tells.
    static func logOrderEvent(_ kind: String, job: String?, owner: UInt32?, fields: [String: Any], in db: Database,
                              now: Date) throws {
        let text = String(decoding: try JSONSerialization.data(withJSONObject: fields,
                                                               options: [.sortedKeys, .withoutEscapingSlashes]),
                          as: UTF8.self)
        try db.cachedStatement(sql: """
            INSERT INTO event (at, kind, job_id, owner_uid, fields) VALUES (?, ?, ?, ?, ?)
            """).execute(arguments: [StoredDate(now), kind, job, jobOwner(owner), text])
    }

    /// Closes `owner`'s group `name`: no member joins it any more, and once every member is uploaded its
    /// completion goes out (at once when they already are). `patch`: the patch its completion owes, with the
    /// group's placeholders. Returns the group; an error when no such group is, or it is closed already.
    package func closeGroup(_ name: String, owner: UInt32?, patch: PatchTarget? = nil, now: Date = Date()) throws -> JobGroup {
        try writer.write { db in
            guard var tally = try Self.tally(owner: owner, name: name, in: db) else {
                throw UploadQueueError(.groupNotFound, """
                    no group "\(SafeText.escaped(name))" of yours: a group is made by its first member \
                    (`uploadq enqueue --group NAME`); `uploadq groups` lists them
                    """)
            }
            guard tally.admitsMembers else {
                throw UploadQueueError(.groupClosed, "group \"\(SafeText.escaped(name))\" is \(tally.state.rawValue) already")
            }
            let encoded = try patch.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
            try db.cachedStatement(sql: "UPDATE job_group SET closed_at = ?, patch = ? WHERE owner_uid = ? AND name = ?")
                .execute(arguments: [StoredDate(now), encoded, Self.groupOwner(owner), name])
            let outcome = tally.apply(.closed)
            try Self.store(tally, owner: owner, name: name, in: db)
            if outcome == .completed {
                try Self.complete(owner: owner, name: name, by: nil, in: db, now: now)
            }
            return try Self.group(owner: owner, name: name, in: db)!
        }
    }

    /// `owner`'s group `name`, with its completion when it is uploaded; nil when there is none. `byOwner`: as its
    /// owner reads it through the control API (its own acknowledgement).
    package func group(_ name: String, owner: UInt32?, byOwner: Bool = false) throws -> JobGroup? {
        try writer.read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM job_group WHERE owner_uid = ? AND name = ?"),
                             arguments: [Self.groupOwner(owner), name]).flatMap { Self.group($0, withMembers: true, byOwner: byOwner) }
        }
    }

    /// Groups, newest first, at most `limit`: `owner`'s, or every user's (`everyone`). Without their members.
    package func groups(owner: UInt32?, everyone: Bool = false, byOwner: Bool = false, limit: Int = 1000) throws -> [JobGroup] {
        try writer.read { db in
            // Every column but the completion (its members' URLs): a listing's size does not grow with them.
            let columns = """
                owner_uid, name, state, members, remaining, failed, failing_job, created_at, closed_at, settled_at,
                acknowledged_at, owner_acknowledged_at
                """
            let rows = everyone
                ? try Row.fetchAll(db, sql: "SELECT \(columns) FROM job_group ORDER BY created_at DESC, name LIMIT ?",
                                   arguments: [limit])
                : try Row.fetchAll(db, sql: """
                    SELECT \(columns) FROM job_group WHERE owner_uid = ? ORDER BY created_at DESC, name LIMIT ?
                    """, arguments: [Self.groupOwner(owner), limit])
            return rows.compactMap { Self.group($0, withMembers: false, byOwner: byOwner) }
        }
    }

    private static func group(owner: UInt32?, name: String, in db: Database) throws -> JobGroup? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM job_group WHERE owner_uid = ? AND name = ?"),
                         arguments: [groupOwner(owner), name]).flatMap { group($0, withMembers: true) }
    }

    private static func group(_ row: Row, withMembers: Bool, byOwner: Bool = false) -> JobGroup? {
        guard let state = JobGroup.State(rawValue: row["state"]) else { return nil }
        let owner: Int64 = row["owner_uid"]
        var members: [JobGroup.Member] = []
        if withMembers, let text = row["completion"] as String? {
            members = (try? JSONDecoder().decode([JobGroup.Member].self, from: Data(text.utf8))) ?? []
        }
        return JobGroup(name: row["name"], ownerUID: owner < 0 ? nil : UInt32(exactly: owner), state: state,
                        members: row["members"], remaining: row["remaining"], failed: row["failed"],
                        failingJob: (row["failing_job"] as String?).map(JobID.init(trusted:)),
                        createdAt: row["created_at"], closedAt: row["closed_at"], completedAt: row["settled_at"],
                        acknowledgedAt: byOwner ? row["owner_acknowledged_at"] : row["acknowledged_at"],
                        completion: members)
    }

    /// The group `job`'s upload completed just now, if it did (in the upload's transaction).
    static func groupCompleted(by job: Job, in db: Database) throws -> String? {
        guard let name = job.group else { return nil }
        return try Bool.fetchOne(db.cachedStatement(sql: """
            SELECT 1 FROM job_group WHERE owner_uid = ? AND name = ? AND state = 'uploaded' AND completing_job = ?
            """), arguments: [groupOwner(job.ownerUID), name, job.id.rawValue]) == true ? name : nil
    }

    /// The patch a group's close asked for, and the group, for the completing member's `group-patch` entry.
    func groupPatch(of job: Job) throws -> (PatchTarget, JobGroup)? {
        guard let name = job.group else { return nil }
        return try writer.read { db in
            guard let text = try String.fetchOne(db, sql: "SELECT patch FROM job_group WHERE owner_uid = ? AND name = ?",
                                                 arguments: [Self.groupOwner(job.ownerUID), name]),
                  let patch = try? JSONDecoder().decode(PatchTarget.self, from: Data(text.utf8)),
                  let group = try Self.group(owner: job.ownerUID, name: name, in: db) else { return nil }
            return (patch, group)
        }
    }

    /// Uploaded groups whose completion the library host has not acknowledged, oldest first (every user's).
    func unacknowledgedGroups() throws -> [JobGroup] {
        try writer.read { db in
            try Row.fetchAll(db, sql: """
                SELECT * FROM job_group INDEXED BY job_group_unacknowledged WHERE state = 'uploaded'
                AND acknowledged_at IS NULL ORDER BY settled_at
                """).compactMap { Self.group($0, withMembers: true) }
        }
    }

    /// Records that a group's completion was handled: by the library host (`byOwner` false: it is not delivered
    /// again, and pruning may take it), or by its owner through the control API (`byOwner`: a mark of the owner's
    /// own, which changes nothing the host relies on). An error when there is no such group.
    func acknowledgeGroup(_ name: String, owner: UInt32?, byOwner: Bool = false, now: Date = Date()) throws {
        try writer.write { db in
            guard try Self.tally(owner: owner, name: name, in: db) != nil else {
                throw UploadQueueError(.groupNotFound, "no group \"\(SafeText.escaped(name))\" of yours")
            }
            let column = byOwner ? "owner_acknowledged_at" : "acknowledged_at"
            try db.execute(sql: """
                UPDATE job_group SET \(column) = ? WHERE owner_uid = ? AND name = ? AND state = 'uploaded'
                AND \(column) IS NULL
                """, arguments: [StoredDate(now), Self.groupOwner(owner), name])
        }
    }

    /// The group of `job`, when it is uploaded: what a cancel that completed it tells the library's followers.
    func uploadedGroup(of job: Job) -> String? {
        guard let name = job.group, (try? group(name, owner: job.ownerUID))??.state == .uploaded else { return nil }
        return name
    }
}
