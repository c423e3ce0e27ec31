import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// Lanes and `after`: the order rules as pure verdicts, and the store that applies them in the transactions of
/// enqueues, claims, transfer ends, retries, skips, cancels and prunes.
@Suite struct OrderTests {
    /// A store, a clock, and a way to enqueue into it in order.
    struct Queue {
        let store = QueueStore(database: try! QueueDatabase.inMemory())
        var now = Date(timeIntervalSince1970: 1_800_000_000)

        /// Inserts a job with this order (priority to tell the jobs apart in a claim: a later one ranks higher, so
        /// nothing but the order keeps it back).
        mutating func enqueue(lane: String? = nil, policy: LaneFailurePolicy = .hold, after: [JobID] = [],
                              mode: Job.AfterMode? = nil, owner: UInt32? = nil, priority: Int = 0,
                              destination: String = "default") throws -> JobID {
            now += 1
            let id = JobID.generate(at: now)
            var job = QueueStoreTests.job(id, priority: priority)
            job.lane = lane
            job.afterMode = after.isEmpty ? nil : mode
            job.ownerUID = owner
            job.destination = destination
            let order = QueueStore.OrderRequest(lane: lane, lanePolicy: policy, after: after.map(\.rawValue),
                                                afterMode: mode, keyOwner: owner ?? 0)
            let at = now
            try store.writer.write { db in
                try job.insert(db)
                try QueueStore.placeInOrder(job, order, in: db, now: at)
            }
            return id
        }

        /// Claims everything runnable now; the ids claimed.
        func claimAll() throws -> [JobID] {
            try store.claim(limit: 100, now: now).map(\.0.id)
        }

        func succeed(_ id: JobID) throws {
            let job = try #require(try store.job(id))
            try store.finish(id, attempt: job.attempts, event: .succeed, outcome: "uploaded", error: nil, now: now)
        }

        func failForGood(_ id: JobID) throws {
            let job = try #require(try store.job(id))
            try store.finish(id, attempt: job.attempts, event: .failPermanent(error: "HTTP 403"), outcome: "failed",
                             error: "HTTP 403", now: now)
        }

        func failTransiently(_ id: JobID) throws {
            let job = try #require(try store.job(id))
            try store.finish(id, attempt: job.attempts, event: .failTransient(error: "reset", retryAt: now + 60),
                             outcome: "failed", error: "reset", now: now)
        }

        func job(_ id: JobID) throws -> Job { try #require(try store.job(id, holdsInForce: false)) }
    }

    @Test("a lane goes one job at a time in the order of enqueue, whatever the priorities; lanes never wait on each other")
    func laneOrder() throws {
        var queue = Queue()
        let a = try (0..<3).map { try queue.enqueue(lane: "events", priority: $0) }
        let b = try (0..<2).map { try queue.enqueue(lane: "photos", priority: 10 + $0) }
        let free = try queue.enqueue(priority: -5)
        #expect(Set(try queue.claimAll()) == [a[0], b[0], free])
        #expect(try queue.job(a[1]).blockedBy == a[0] && queue.job(a[2]).blockedBy == a[1])
        #expect(try queue.store.job(a[1])?.waitingReason == .lane)
        try queue.succeed(a[0])
        #expect(try queue.claimAll() == [a[1]])
        try queue.succeed(b[0])
        try queue.succeed(a[1])
        #expect(Set(try queue.claimAll()) == [a[2], b[1]])
        #expect(try queue.job(a[2]).laneSequence == 3)
    }

    @Test("a transient failure holds its lane while it retries; the next job never overtakes it")
    func transientHoldsLane() throws {
        var queue = Queue()
        let first = try queue.enqueue(lane: "events")
        let second = try queue.enqueue(lane: "events", priority: 9)
        #expect(try queue.claimAll() == [first])
        try queue.failTransiently(first)
        #expect(try queue.claimAll().isEmpty)
        queue.now += 61
        #expect(try queue.claimAll() == [first])
        try queue.succeed(first)
        #expect(try queue.claimAll() == [second])
    }

    @Test("a head failed for good holds only its own lane (hold), until it is retried or skipped; skip lanes go on")
    func failedHeadHoldsOnlyItsLane() throws {
        var queue = Queue()
        let head = try queue.enqueue(lane: "events")
        let next = try queue.enqueue(lane: "events")
        let other = try queue.enqueue(lane: "photos")
        let skipHead = try queue.enqueue(lane: "telemetry", policy: .skip)
        let skipNext = try queue.enqueue(lane: "telemetry", policy: .skip)
        #expect(Set(try queue.claimAll()) == [head, other, skipHead])
        try queue.failForGood(head)
        try queue.failForGood(skipHead)
        // `skip`: the failed job stays failed and visible, and the lane goes on.
        #expect(try queue.claimAll() == [skipNext])
        #expect(try queue.job(skipHead).state == .failed)
        // A job enqueued later never inherits the failure: it waits behind it (hold), or goes (skip).
        let later = try queue.enqueue(lane: "events")
        #expect(try queue.job(later).state == .pending && queue.job(later).blockedBy == next)
        // `hold`: retried, the head runs first; the lane follows.
        _ = try queue.store.retry([head])
        #expect(try queue.claimAll() == [head])
        try queue.failForGood(head)
        // Skipped by hand: the lane goes on, the head stays failed.
        _ = try queue.store.skip(head)
        #expect(try queue.claimAll() == [next])
        #expect(try queue.job(head).state == .failed && queue.job(head).permanent)
        try queue.succeed(next)
        #expect(try queue.claimAll() == [later])
        // Only a job failed for good in a lane can be skipped.
        #expect(throws: UploadQueueError.self) { try queue.store.skip(other) }
    }

    @Test("a cancel reaches the jobs after it (prerequisite-cancelled), not the later jobs of its lane, which keep their order")
    func cancelReachesAfterChildrenNotLane() throws {
        var queue = Queue()
        let first = try queue.enqueue(lane: "survey")
        let middle = try queue.enqueue(lane: "survey")
        let last = try queue.enqueue(lane: "survey")
        let manifest = try queue.enqueue(after: [middle])
        let settled = try queue.enqueue(after: [middle], mode: .settled)
        #expect(try queue.claimAll() == [first])
        _ = try queue.store.requestCancel(middle, workerRunning: false)
        _ = try queue.store.removeCancelled(middle)
        // The lane keeps its order past the job that left: the last one now waits for the first.
        #expect(try queue.job(last).blockedBy == first && queue.job(last).state == .pending)
        #expect(try queue.job(manifest).state == .failed)
        #expect(try queue.job(manifest).lastError?.hasPrefix("prerequisite-cancelled") == true)
        #expect(try queue.job(settled).blockedBy == nil)
        #expect(Set(try queue.claimAll()) == [settled])
        try queue.succeed(first)
        #expect(try queue.claimAll() == [last])
        // The next job of the lane waits for the lane's last job still there.
        let after = try queue.enqueue(lane: "survey")
        #expect(try queue.job(after).blockedBy == last)
    }

    @Test("a manifest starts only once all its parts are uploaded; a part failed for good fails it, a retry brings it back")
    func manifestAfterParts() throws {
        var queue = Queue()
        let parts = try (0..<3).map { _ in try queue.enqueue() }
        let manifest = try queue.enqueue(after: parts, priority: 100)
        let grandchild = try queue.enqueue(after: [manifest])
        #expect(Set(try queue.claimAll()) == Set(parts))
        try queue.succeed(parts[0])
        try queue.succeed(parts[1])
        #expect(try queue.claimAll().isEmpty)
        try queue.failForGood(parts[2])
        #expect(try queue.job(manifest).state == .failed)
        #expect(try queue.job(manifest).lastError?.hasPrefix("prerequisite-failed: job \(parts[2])") == true)
        // The failure reaches the jobs after the manifest too.
        #expect(try queue.job(grandchild).state == .failed)
        // Retrying the manifest alone: the part is still failed, so it fails again at once.
        _ = try queue.store.retry([manifest])
        #expect(try queue.job(manifest).state == .failed)
        // Retrying the part brings the manifest and its own follower back, still waiting.
        _ = try queue.store.retry([parts[2]])
        #expect(try queue.job(manifest).state == .pending && queue.job(manifest).blockedBy == parts[2])
        #expect(try queue.job(grandchild).state == .pending && queue.job(grandchild).blockedBy == manifest)
        #expect(try queue.claimAll() == [parts[2]])
        try queue.succeed(parts[2])
        #expect(try queue.claimAll() == [manifest])
        try queue.succeed(manifest)
        #expect(try queue.claimAll() == [grandchild])
    }

    @Test("after names jobs of the same owner only; unknown ones are refused and nothing is enqueued")
    func unknownPrerequisite() throws {
        var queue = Queue()
        let alices = try queue.enqueue(owner: 1001)
        #expect(throws: UploadQueueError.self) { try queue.enqueue(after: [alices], owner: 1002) }
        #expect(throws: UploadQueueError.self) { try queue.enqueue(after: [JobID.generate()]) }
        let count = try queue.store.writer.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM job") }
        #expect(count == 1)
        let bobs = try queue.enqueue(after: [alices], owner: 1001)
        #expect(try queue.job(bobs).blockedBy == alices)
    }

    @Test("a prerequisite uploaded and since pruned counts as done; one cancelled fails the new job at once")
    func tombstones() throws {
        var queue = Queue()
        let parent = try queue.enqueue()
        let cancelled = try queue.enqueue()
        _ = try queue.claimAll()
        try queue.succeed(parent)
        _ = try queue.store.requestCancel(cancelled, workerRunning: false)
        _ = try queue.store.removeCancelled(cancelled)
        let orphan = try queue.enqueue(after: [cancelled])
        #expect(try queue.job(orphan).state == .failed)
        let settled = try queue.enqueue(after: [cancelled], mode: .settled)
        #expect(try queue.job(settled).state == .pending && queue.job(settled).blockedBy == nil)
        let report = try queue.store.pruneHistory(before: queue.now + 3600, dryRun: false)
        #expect(report.jobs == 1)
        #expect(try queue.store.job(parent) == nil)
        let child = try queue.enqueue(after: [parent])
        #expect(try queue.job(child).blockedBy == nil && queue.job(child).state == .pending)
    }

    @Test("the verdicts: lanes hold or pass on, after fails or is met, settled is met by any end")
    func verdicts() {
        #expect(OrderRule.verdict(kind: .lane, change: .uploaded, mode: nil, lanePolicy: .hold) == .met)
        #expect(OrderRule.verdict(kind: .lane, change: .failedForGood, mode: nil, lanePolicy: .hold) == .keep)
        #expect(OrderRule.verdict(kind: .lane, change: .failedForGood, mode: nil, lanePolicy: .skip) == .passOn)
        #expect(OrderRule.verdict(kind: .lane, change: .cancelled, mode: nil, lanePolicy: .hold) == .passOn)
        #expect(OrderRule.verdict(kind: .after, change: .failedForGood, mode: nil, lanePolicy: .hold)
                == .fail(code: "prerequisite-failed", keepEdge: true))
        #expect(OrderRule.verdict(kind: .after, change: .cancelled, mode: .uploaded, lanePolicy: .hold)
                == .fail(code: "prerequisite-cancelled", keepEdge: false))
        #expect(OrderRule.verdict(kind: .after, change: .revived, mode: nil, lanePolicy: .hold) == .revive)
        for change in [OrderRule.Change.uploaded, .failedForGood, .cancelled] {
            #expect(OrderRule.verdict(kind: .after, change: change, mode: .settled, lanePolicy: .hold) == .met)
        }
        #expect(OrderRule.isValidLaneName("survey-42") && !OrderRule.isValidLaneName("") && !OrderRule.isValidLaneName("a\nb"))
    }

    @Test("10,000 jobs in 100 lanes: a claim reads as many rows as without lanes (the claim indexes hold only lane heads)")
    func lanesCostNoMoreToClaim() throws {
        var queue = Queue()
        try queue.store.writer.write { _ in }
        for index in 0..<2_000 { _ = try queue.enqueue(lane: "lane-\(index % 100)") }
        let blocked = try queue.store.writer.read { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM job WHERE blocked_by IS NOT NULL")
        }
        #expect(blocked == 1_900)
        let plan = try queue.store.writer.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + QueueStore.claimQuery(ClaimGate(doors: ["default": .open]))!.sql,
                             arguments: QueueStore.claimQuery(ClaimGate(doors: ["default": .open]))!.arguments)
                .map { $0["detail"] as String }
        }
        #expect(plan.allSatisfy { !$0.hasPrefix("SCAN job") }, "\(plan)")
        #expect(try queue.claimAll().count == 100)
    }
}
