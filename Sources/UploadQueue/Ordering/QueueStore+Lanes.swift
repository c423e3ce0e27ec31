import Foundation
import GRDB

extension QueueStore {
    /// The lanes that have work or are blocked, blocked ones first, then by name: `owner`'s, or every user's
    /// (`everyone`); at most `limit`.
    package func lanes(owner: UInt32?, everyone: Bool = false, limit: Int = 1000) throws -> [LaneStatus] {
        try writer.read { db in
            let lanes = try Row.fetchAll(db, sql: """
                SELECT l.owner_uid, l.name, l.on_failure, l.blocked_by, l.blocked_since FROM lane l
                WHERE (? OR l.owner_uid = ?) AND (l.blocked_by IS NOT NULL OR EXISTS (
                    SELECT 1 FROM job j INDEXED BY job_lane
                    WHERE j.owner_uid IS (CASE l.owner_uid WHEN -1 THEN NULL ELSE l.owner_uid END) AND j.lane = l.name
                    AND j.state IN ('pending', 'uploading')))
                ORDER BY l.blocked_by IS NULL, l.name, l.owner_uid LIMIT ?
                """, arguments: [everyone, owner.map { Int64($0) } ?? -1, limit])
            return try lanes.map { row in try Self.laneStatus(row, in: db) }
        }
    }

    private static func laneStatus(_ row: Row, in db: Database) throws -> LaneStatus {
        let stored: Int64 = row["owner_uid"]
        let owner: Int64? = stored < 0 ? nil : stored
        let name: String = row["name"]
        let holder: String? = row["blocked_by"]
        let queued = try Int.fetchOne(db.cachedStatement(sql: """
            SELECT COUNT(*) FROM job INDEXED BY job_lane WHERE owner_uid IS ? AND lane = ?
            AND (state IN ('pending', 'uploading') OR id IS ?)
            """), arguments: [owner, name, holder]) ?? 0
        // The head: the first job of the lane's order that waits for none of it, and is not a failure the lane
        // went past (skipped, or failed in a lane that skips).
        let head = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT j.id, j.state, j.created_at, j.last_error,
                (SELECT MAX(p.updated_at) FROM job p WHERE p.owner_uid IS j.owner_uid AND p.lane = j.lane
                 AND p.lane_seq < j.lane_seq) AS previous_end
            FROM job j INDEXED BY job_lane WHERE j.owner_uid IS ? AND j.lane = ?
            AND (j.state IN ('pending', 'uploading') OR j.id IS ?)
            AND NOT EXISTS (SELECT 1 FROM job_prerequisite p WHERE p.job_id = j.id AND p.kind = 'lane')
            ORDER BY j.lane_seq LIMIT 1
            """), arguments: [owner, name, holder])
        var since: Date? = head?["created_at"]
        if let previous: Date = head?["previous_end"], let enqueued = since, previous > enqueued { since = previous }
        return LaneStatus(
            name: name, ownerUID: owner.flatMap { UInt32(exactly: $0) }, queued: queued,
            head: (head?["id"] as String?).map(JobID.init(trusted:)),
            headState: (head?["state"] as String?).flatMap(JobState.init(rawValue:)), headSince: since,
            blockedBy: holder.map(JobID.init(trusted:)), blockedSince: row["blocked_since"],
            reason: holder == nil ? nil : head?["last_error"],
            onFailure: LaneFailurePolicy(rawValue: row["on_failure"] ?? "") ?? .hold)
    }

    /// How many lanes a failed job holds, and how long the oldest head of a lane with work has been at its front
    /// (seconds; 0 when no lane has work): the metrics' view, from at most `limit` lanes.
    package func laneGauges(now: Date = Date(), limit: Int = 1000) throws -> QueueStatus.LaneReport {
        let lanes = try lanes(owner: nil, everyone: true, limit: limit)
        let oldest = lanes.compactMap(\.headSince).min().map { max(0, now.timeIntervalSince($0)) } ?? 0
        return QueueStatus.LaneReport(active: lanes.count, blocked: lanes.count { $0.blockedBy != nil },
                                      oldestHeadAge: oldest)
    }
}
