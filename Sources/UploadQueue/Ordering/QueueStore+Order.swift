import Foundation
import GRDB

extension QueueStore {
    /// What an enqueue asks of the order: a lane, and the jobs to wait for.
    struct OrderRequest: Sendable, Equatable {
        var lane: String?
        /// The lane's `on_failure` in the config when the job was enqueued.
        var lanePolicy: LaneFailurePolicy = .hold
        /// Job ids, or the caller's idempotency keys (control API requests), of jobs of the same owner.
        var after: [String] = []
        var afterMode: Job.AfterMode?
        /// Whose idempotency keys `after` may name (the caller's uid).
        var keyOwner: UInt32?

        var isEmpty: Bool { lane == nil && after.isEmpty }
    }

    /// The owner key of a lane: a user's uid, or -1 for the queue's own user (jobs with no owner).
    private static func laneOwner(_ owner: UInt32?) -> Int64 { owner.map(Int64.init) ?? -1 }

    /// Places a job just inserted in order, in the enqueue's transaction: its lane's next sequence number and the
    /// lane's last job to wait for, and the jobs it names `after`. A prerequisite already uploaded is met; one that
    /// failed for good or was cancelled fails the job at once (unless `after_mode = "settled"`), visibly, never
    /// leaving it to wait for ever. A name that is no job of the same owner's (nor a tombstone of one) is refused:
    /// the transaction, and so the enqueue, is undone.
    static func placeInOrder(_ job: Job, _ order: OrderRequest, in db: Database, now: Date) throws {
        var edges: [(parent: String, kind: PrerequisiteKind)] = []
        var failure: String?
        if let lane = job.lane {
            let owner = laneOwner(job.ownerUID)
            let row = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT next_seq, last_job, on_failure FROM lane WHERE owner_uid = ? AND name = ?
                """), arguments: [owner, lane])
            let sequence: Int64 = row?["next_seq"] ?? 1
            try db.cachedStatement(sql: """
                INSERT INTO lane (owner_uid, name, next_seq, last_job, on_failure) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (owner_uid, name) DO UPDATE SET next_seq = excluded.next_seq, last_job = excluded.last_job,
                on_failure = excluded.on_failure
                """).execute(arguments: [owner, lane, sequence + 1, job.id.rawValue, order.lanePolicy.rawValue])
            try db.cachedStatement(sql: "UPDATE job SET lane_seq = ? WHERE id = ?").execute(arguments: [sequence, job.id.rawValue])
            if let last = row?["last_job"] as String?,
               let previous = try Row.fetchOne(db.cachedStatement(sql: "SELECT state, permanent FROM job WHERE id = ?"),
                                               arguments: [last]) {
                let policy = LaneFailurePolicy(rawValue: row?["on_failure"] ?? "") ?? .hold
                let failedForGood = previous["state"] == JobState.failed.rawValue && previous["permanent"] == true
                if previous["state"] != JobState.uploaded.rawValue, !(failedForGood && policy == .skip) {
                    edges.append((last, .lane))
                }
            }
        }
        for reference in order.after {
            let (id, found) = try resolvePrerequisite(reference, owner: job.ownerUID, keyOwner: order.keyOwner, in: db)
            guard id != job.id.rawValue else { continue }
            let verdict: OrderRule.Verdict
            switch found {
            case .live(let state, let permanent):
                if state == .uploaded { continue }
                verdict = state == .failed && permanent
                    ? OrderRule.verdict(kind: .after, change: .failedForGood, mode: order.afterMode, lanePolicy: .hold)
                    : .keep
            case .gone(let outcome):
                if outcome == JobState.uploaded.rawValue { continue }
                verdict = OrderRule.verdict(kind: .after, change: .cancelled, mode: order.afterMode, lanePolicy: .hold)
            }
            switch verdict {
            case .met, .passOn, .revive: continue
            case .keep: edges.append((id, .after))
            case .fail(let code, let keepEdge):
                if keepEdge { edges.append((id, .after)) }
                failure = failure ?? prerequisiteFailure(code, parent: id)
            }
        }
        let statement = try db.cachedStatement(sql: """
            INSERT OR IGNORE INTO job_prerequisite (job_id, parent_id, kind) VALUES (?, ?, ?)
            """)
        for edge in edges {
            try statement.execute(arguments: [job.id.rawValue, edge.parent, edge.kind.rawValue])
        }
        if !edges.isEmpty { try refreshBlockedBy(job.id.rawValue, in: db) }
        if let failure {
            _ = try apply(.failPermanent(error: failure), to: job.id, in: db, now: now, settlesOrder: false)
        }
    }

    /// What a job named `after` is: in the queue (its state), or gone (how it ended, from its tombstone).
    private enum Prerequisite {
        case live(JobState, permanent: Bool)
        case gone(outcome: String)
    }

    /// The job `reference` names (its id, or one of `keyOwner`'s idempotency keys) among `owner`'s, or an
    /// `unknownPrerequisite` error: another user's job is no more known to the caller than one that never was.
    private static func resolvePrerequisite(_ reference: String, owner: UInt32?, keyOwner: UInt32?,
                                            in db: Database) throws -> (String, Prerequisite) {
        var id = JobID(reference)?.rawValue
        if id == nil, let keyOwner {
            id = try String.fetchOne(db.cachedStatement(sql: """
                SELECT job_id FROM idempotency_key WHERE owner_uid = ? AND key = ?
                """), arguments: [Int64(keyOwner), reference])
        }
        if let id {
            if let row = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT state, permanent, owner_uid FROM job WHERE id = ?
                """), arguments: [id]), (row["owner_uid"] as Int64?) == owner.map({ Int64($0) }),
               let state = JobState(rawValue: row["state"]) {
                return (id, .live(state, permanent: row["permanent"]))
            }
            if let row = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT outcome, owner_uid FROM settled_job WHERE id = ?
                """), arguments: [id]), (row["owner_uid"] as Int64?) == owner.map({ Int64($0) }) {
                return (id, .gone(outcome: row["outcome"]))
            }
        }
        throw UploadQueueError(.unknownPrerequisite, """
            after "\(SafeText.escaped(reference))": no job of yours has this id\(keyOwner == nil ? "" : " or idempotency key") \
            (nor had, in the history kept); nothing was enqueued
            """)
    }

    /// The error a job fails with when a job it waits for failed for good or was cancelled.
    private static func prerequisiteFailure(_ code: String, parent: String) -> String {
        code == "prerequisite-cancelled"
            ? "prerequisite-cancelled: job \(parent), which this one waits for, was cancelled; enqueue this one again "
                + "without it, or `uploadq retry` to send it all the same"
            : "prerequisite-failed: job \(parent), which this one waits for, failed for good; `uploadq retry \(parent)` "
                + "brings this one back with it"
    }

    /// Sets `blocked_by` to one job the job still waits for (its lane's first), and `blocked_kind` to how it
    /// waits for it; both NULL when it waits for none.
    private static func refreshBlockedBy(_ id: String, in db: Database) throws {
        try db.cachedStatement(sql: """
            UPDATE job SET (blocked_by, blocked_kind) = (SELECT parent_id, kind FROM job_prerequisite WHERE job_id = ?
            ORDER BY kind = 'lane' DESC, parent_id LIMIT 1) WHERE id = ?
            """).execute(arguments: [id, id])
    }

    /// The jobs `id` waits for in its lane (at most one, in a lane kept in order).
    static func lanePrerequisites(of id: JobID, in db: Database) throws -> [String] {
        try String.fetchAll(db.cachedStatement(sql: """
            SELECT parent_id FROM job_prerequisite WHERE job_id = ? AND kind = 'lane'
            """), arguments: [id.rawValue])
    }

    /// A prerequisite of `id` (`after`, all uploaded) that failed for good, if any: what keeps it failed.
    private static func failingPrerequisite(of id: String, in db: Database) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: """
            SELECT p.parent_id FROM job_prerequisite p JOIN job j ON j.id = p.parent_id
            WHERE p.job_id = ? AND p.kind = 'after' AND j.state = 'failed' AND j.permanent = 1 LIMIT 1
            """), arguments: [id])
    }

    /// Applies what a change of `job` means to the jobs that wait for it, in the change's transaction, and to
    /// theirs in turn (a worklist: a chain of any length takes no stack). `laneParents` are the jobs a cancelled or
    /// skipped job waited for in its lane, read before it left: its lane waits for them instead.
    static func settleOrder(_ job: Job, _ change: OrderRule.Change, laneParents: [String] = [], in db: Database,
                            now: Date) throws {
        var work: [(id: String, change: OrderRule.Change, lane: String?, owner: UInt32?, laneParents: [String])] = []
        if change == .revived {
            // Its own prerequisites first: one still failed keeps it failed.
            if let parent = try failingPrerequisite(of: job.id.rawValue, in: db) {
                _ = try apply(.failPermanent(error: prerequisiteFailure("prerequisite-failed", parent: parent)),
                              to: job.id, in: db, now: now, settlesOrder: false)
                return
            }
            try refreshBlockedBy(job.id.rawValue, in: db)
        }
        if change == .cancelled || change == .skipped, job.lane != nil {
            // The lane's last job is now the one it waited for (or none): the next enqueue waits for that one.
            try db.cachedStatement(sql: "UPDATE lane SET last_job = ? WHERE owner_uid = ? AND name = ? AND last_job = ?")
                .execute(arguments: [laneParents.first, laneOwner(job.ownerUID), job.lane, job.id.rawValue])
        }
        work.append((job.id.rawValue, change, job.lane, job.ownerUID, laneParents))
        while let item = work.popLast() {
            let waiting = try Row.fetchAll(db.cachedStatement(sql: """
                SELECT p.job_id, p.kind, j.after_mode, j.state, j.permanent FROM job_prerequisite p
                JOIN job j ON j.id = p.job_id WHERE p.parent_id = ?
                """), arguments: [item.id])
            guard !waiting.isEmpty else { continue }
            var policy = LaneFailurePolicy.hold
            if let lane = item.lane {
                policy = LaneFailurePolicy(rawValue: try String.fetchOne(db.cachedStatement(sql: """
                    SELECT on_failure FROM lane WHERE owner_uid = ? AND name = ?
                    """), arguments: [laneOwner(item.owner), lane]) ?? "") ?? .hold
            }
            var parents = item.laneParents
            if parents.isEmpty, item.change == .failedForGood, policy == .skip {
                parents = try lanePrerequisites(of: JobID(trusted: item.id), in: db)
            }
            for row in waiting {
                let child: String = row["job_id"]
                guard let kind = PrerequisiteKind(rawValue: row["kind"]) else { continue }
                let mode = (row["after_mode"] as String?).flatMap(Job.AfterMode.init(rawValue:))
                let verdict = OrderRule.verdict(kind: kind, change: item.change, mode: mode, lanePolicy: policy)
                let edge = [child, item.id, kind.rawValue]
                switch verdict {
                case .keep:
                    continue
                case .met:
                    try deleteEdge(edge, in: db)
                    try refreshBlockedBy(child, in: db)
                case .passOn:
                    try deleteEdge(edge, in: db)
                    for parent in parents where parent != child {
                        try db.cachedStatement(sql: """
                            INSERT OR IGNORE INTO job_prerequisite (job_id, parent_id, kind) VALUES (?, ?, 'lane')
                            """).execute(arguments: [child, parent])
                    }
                    try refreshBlockedBy(child, in: db)
                case .fail(let code, let keepEdge):
                    if !keepEdge { try deleteEdge(edge, in: db) }
                    guard row["state"] == JobState.pending.rawValue else { continue }
                    let failed = try apply(.failPermanent(error: prerequisiteFailure(code, parent: item.id)),
                                           to: JobID(trusted: child), in: db, now: now, settlesOrder: false)
                    if let failed { work.append((child, .failedForGood, failed.lane, failed.ownerUID, [])) }
                case .revive:
                    guard row["state"] == JobState.failed.rawValue, row["permanent"] == true,
                          try failingPrerequisite(of: child, in: db) == nil else { continue }
                    let revived = try apply(.retryNow, to: JobID(trusted: child), in: db, now: now, settlesOrder: false)
                    try refreshBlockedBy(child, in: db)
                    if let revived { work.append((child, .revived, revived.lane, revived.ownerUID, [])) }
                }
            }
        }
    }

    /// Keeps what holds `job`'s lane (`lane.blocked_by`) true after the job changed, in the change's transaction:
    /// the lane's head when it failed (and, once it did, until it is no longer the head: uploaded, skipped,
    /// cancelled, or passed by a lane that skips); logs `lane.blocked` and `lane.unblocked` as that changes.
    /// `left`: the job left the queue (cancelled, or its intake undone).
    static func settleLane(_ job: Job, left: Bool = false, in db: Database, now: Date) throws {
        guard let lane = job.lane else { return }
        // A job still in the queue, claimed or waiting again, changes nothing unless it holds its lane: the head
        // is where it was, and no job failed (what every claim and interruption of a lane's job skips).
        let moved = left || job.state == .failed || job.state == .uploaded ? nil : job.id.rawValue
        try settleLane(owner: job.ownerUID, lane: lane, unlessHeldBy: moved, in: db, now: now)
    }

    /// `settleLane(_:in:now:)` for `owner`'s lane `lane`; nothing when `unlessHeldBy` names a job that is not the
    /// one holding it.
    static func settleLane(owner ownerUID: UInt32?, lane: String, unlessHeldBy moved: String? = nil, in db: Database,
                           now: Date) throws {
        let owner = laneOwner(ownerUID)
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT blocked_by, on_failure, last_job FROM lane WHERE owner_uid = ? AND name = ?
            """), arguments: [owner, lane]) else { return }
        let holder: String? = row["blocked_by"]
        if let moved, moved != holder { return }
        let head = try laneHead(owner: ownerUID, lane: lane, lastJob: row["last_job"],
                                policy: LaneFailurePolicy(rawValue: row["on_failure"] ?? "") ?? .hold, in: db)
        let headID: String? = head?["id"]
        let newHolder = headID != nil && (head?["state"] == JobState.failed.rawValue || headID == holder) ? headID : nil
        guard newHolder != holder else { return }
        try db.cachedStatement(sql: """
            UPDATE lane SET blocked_by = ?, blocked_since = ? WHERE owner_uid = ? AND name = ?
            """).execute(arguments: [newHolder, newHolder.map { _ in StoredDate(now) }, owner, lane])
        if let holder {
            try logOrderEvent("lane.unblocked", job: holder, owner: ownerUID, fields: ["lane": lane], in: db, now: now)
        }
        if let newHolder, let head {
            try logOrderEvent("lane.blocked", job: newHolder, owner: ownerUID, fields: [
                "lane": lane, "error": (head["last_error"] as String?) ?? "", "permanent": (head["permanent"] as Bool?) ?? false,
            ], in: db, now: now)
        }
    }

    /// The lane's head: the first job of its order not uploaded that waits for none of it, and is not a failure
    /// the lane went past (skipped, or failed for good in a lane that skips: a job failed for good holds its lane
    /// while a later job waits for it, or while it is the lane's last and the lane holds).
    static func laneHead(owner: UInt32?, lane: String, lastJob: String?, policy: LaneFailurePolicy,
                         in db: Database) throws -> Row? {
        try Row.fetchOne(db.cachedStatement(sql: """
            SELECT j.id, j.state, j.permanent, j.last_error, j.created_at FROM job j INDEXED BY job_lane_live
            WHERE j.owner_uid IS ? AND j.lane = ? AND j.state != 'uploaded'
            AND NOT EXISTS (SELECT 1 FROM job_prerequisite p WHERE p.job_id = j.id AND p.kind = 'lane')
            AND (j.state != 'failed' OR j.permanent = 0
                 OR EXISTS (SELECT 1 FROM job_prerequisite c WHERE c.parent_id = j.id AND c.kind = 'lane')
                 OR (j.id IS ? AND ? = 'hold'))
            ORDER BY j.lane_seq LIMIT 1
            """), arguments: [owner.map { Int64($0) }, lane, lastJob, policy.rawValue])
    }

    private static func deleteEdge(_ edge: [String], in db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM job_prerequisite WHERE job_id = ? AND parent_id = ? AND kind = ?")
            .execute(arguments: StatementArguments(edge))
    }

    /// Removes a job whose file was not taken after all (a `move` intake undone), in one transaction with what its
    /// leaving means to its group, its lane and the jobs that wait for it: as if it had never been enqueued.
    func removeUntaken(_ id: JobID, now: Date = Date()) throws {
        try writer.write { db in
            guard let job = try Job.fetchOne(db, key: id.rawValue) else { return }
            let laneParents = try Self.lanePrerequisites(of: id, in: db)
            _ = try Job.deleteOne(db, key: id.rawValue)
            if job.group != nil {
                try Self.settleGroup(job, .left(failedForGood: job.state == .failed && job.permanent), in: db, now: now)
            }
            try Self.settleOrder(job, .cancelled, laneParents: laneParents, in: db, now: now)
            if job.lane != nil { try Self.settleLane(job, left: true, in: db, now: now) }
        }
    }

    /// Records how a job that leaves the queue ended (`uploaded` when pruned, `cancelled`), for the jobs enqueued
    /// `after` it later.
    static func recordTombstone(_ id: String, owner: UInt32?, outcome: String, in db: Database, now: Date) throws {
        try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO settled_job (id, owner_uid, outcome, settled_at) VALUES (?, ?, ?, ?)
            """).execute(arguments: [id, owner.map { Int64($0) }, outcome, StoredDate(now)])
    }

    /// Skips a job that failed for good in its lane (`uploadq skip`): it stays failed and visible, and the lane
    /// goes on past it. Returns the job; an error when it is not such a job.
    package func skip(_ id: JobID, now: Date = Date()) throws -> Job {
        try writer.write { db in
            guard let job = try Job.fetchOne(db, key: id.rawValue) else {
                throw UploadQueueError(.jobNotFound, "no job with id \(id); `uploadq list` shows the queue", job: id)
            }
            guard job.lane != nil, job.state == .failed, job.permanent else {
                throw UploadQueueError(.invalidTransition, """
                    only a job that failed for good in a lane can be skipped; job \(id) is \
                    \(job.lane == nil ? "in no lane" : job.state == .failed ? "to be retried by itself" : job.state.rawValue)
                    """, job: id)
            }
            let parents = try Self.lanePrerequisites(of: id, in: db)
            try db.cachedStatement(sql: "DELETE FROM job_prerequisite WHERE job_id = ? AND kind = 'lane'")
                .execute(arguments: [id.rawValue])
            try Self.refreshBlockedBy(id.rawValue, in: db)
            try Self.settleOrder(job, .skipped, laneParents: parents, in: db, now: now)
            try Self.settleLane(job, in: db, now: now)
            return job
        }
    }
}
