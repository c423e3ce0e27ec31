import Foundation
import GRDB

extension QueueStore {
    /// The lanes that have work or are blocked, blocked ones first, then by name: `owner`'s, or every user's
    /// (`everyone`); at most `limit`. Each is read through `job_lane_live`: never a lane's history.
    package func lanes(owner: UInt32?, everyone: Bool = false, limit: Int = 1000) throws -> [LaneStatus] {
        try writer.read { db in
            let lanes = try Row.fetchAll(db, sql: """
                SELECT l.owner_uid, l.name, l.on_failure, l.blocked_by, l.blocked_since, l.last_job FROM lane l
                WHERE (? OR l.owner_uid = ?) AND (l.blocked_by IS NOT NULL OR EXISTS (
                    SELECT 1 FROM job j INDEXED BY job_lane_live
                    WHERE j.owner_uid IS (CASE l.owner_uid WHEN -1 THEN NULL ELSE l.owner_uid END) AND j.lane = l.name
                    AND j.state != 'uploaded' AND j.state IN ('pending', 'uploading')))
                ORDER BY l.blocked_by IS NULL, l.name, l.owner_uid LIMIT ?
                """, arguments: [everyone, owner.map { Int64($0) } ?? -1, limit])
            return try lanes.map { row in try Self.laneStatus(row, in: db) }
        }
    }

    private static func laneStatus(_ row: Row, in db: Database) throws -> LaneStatus {
        let stored: Int64 = row["owner_uid"]
        let owner = stored < 0 ? nil : UInt32(exactly: stored)
        let name: String = row["name"]
        let holder: String? = row["blocked_by"]
        let policy = LaneFailurePolicy(rawValue: row["on_failure"] ?? "") ?? .hold
        let queued = try Int.fetchOne(db.cachedStatement(sql: """
            SELECT COUNT(*) FROM job INDEXED BY job_lane_live WHERE owner_uid IS ? AND lane = ? AND state != 'uploaded'
            AND (state IN ('pending', 'uploading') OR id IS ?)
            """), arguments: [owner.map { Int64($0) }, name, holder]) ?? 0
        let head = try laneHead(owner: owner, lane: name, lastJob: row["last_job"], policy: policy, in: db)
        // At the front since its enqueue, or since the job before it in the lane ended, whichever came later.
        var since: Date? = head?["created_at"]
        if let id: String = head?["id"], let previous = try Date.fetchOne(db.cachedStatement(sql: """
            SELECT p.updated_at FROM job p JOIN job j ON j.id = ? WHERE p.owner_uid IS j.owner_uid AND p.lane = j.lane
            AND p.lane_seq < j.lane_seq ORDER BY p.lane_seq DESC LIMIT 1
            """), arguments: [id]), let enqueued = since, previous > enqueued {
            since = previous
        }
        return LaneStatus(
            name: name, ownerUID: owner, queued: queued,
            head: (head?["id"] as String?).map(JobID.init(trusted:)),
            headState: (head?["state"] as String?).flatMap(JobState.init(rawValue:)), headSince: since,
            blockedBy: holder.map(JobID.init(trusted:)), blockedSince: row["blocked_since"],
            reason: holder == nil ? nil : head?["last_error"], onFailure: policy)
    }

    /// How many lanes have work, how many a failed job holds, and how long the oldest head of a lane with work has
    /// been at its front: the status's and the metrics' view, from at most `limit` lanes.
    package func laneGauges(now: Date = Date(), limit: Int = 1000) throws -> QueueStatus.LaneReport {
        let lanes = try lanes(owner: nil, everyone: true, limit: limit)
        let oldest = lanes.compactMap(\.headSince).min().map { max(0, now.timeIntervalSince($0)) } ?? 0
        return QueueStatus.LaneReport(active: lanes.count, blocked: lanes.count { $0.blockedBy != nil },
                                      oldestHeadAge: oldest)
    }
}
