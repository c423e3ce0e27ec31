import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// Fair share of the slots between owners (`FairShare`): the turns, the claim order they make, the waiting reason
/// they give, and a claim that costs the same with many owners and many jobs.
struct FairShareTests {
    @Test("a turn is the later of the owner's next and the clock; the clock never goes back",
          arguments: [(Int64(0), Int64(7), Int64(7), Int64(8)), (12, 7, 12, 13), (5, 7, 7, 8)])
    func turnTable(next: Int64, clock: Int64, turn: Int64, after: Int64) {
        let taken = FairShare.turn(ownerNext: next, clock: clock)
        #expect(taken.turn == turn && taken.ownerNext == after)
        #expect(FairShare.clock(9, afterClaiming: 4) == 9 && FairShare.clock(9, afterClaiming: 11) == 11)
    }

    @Test("the queue's own user and root are one owner; each dropper is one")
    func owners() {
        #expect(FairShare.owner(nil) == FairShare.owner(0))
        #expect(FairShare.owner(1001) == 1001 && FairShare.owner(1001) != FairShare.owner(1002))
    }

    @Test("a job waits for its turn only when another owner surely has an earlier one runnable at its priority")
    func waitsForTurn() {
        // alice: 297 runnable, turns 3...299; bob: one runnable, turn 2; carol: nothing runnable.
        let turns = [FairShare.Turns(owner: 1001, priority: 0, next: 300, runnable: 297),
                     FairShare.Turns(owner: 1002, priority: 0, next: 3, runnable: 1),
                     FairShare.Turns(owner: 1003, priority: 0, next: 900, runnable: 0)]
        #expect(FairShare.waitsForTurn(turn: 3, owner: 1001, priority: 0, among: turns), "bob's turn 2 goes first")
        #expect(!FairShare.waitsForTurn(turn: 2, owner: 1002, priority: 0, among: turns), "bob's is next")
        #expect(!FairShare.waitsForTurn(turn: 3, owner: 1001, priority: 5, among: turns), "another priority")
        #expect(!FairShare.waitsForTurn(turn: 3, owner: 1001, priority: 0, among: [turns[0], turns[2]]), "alone")
        #expect(FairShare.waitingForTurns(among: turns) == 297)
        #expect(FairShare.waitingForTurns(among: [turns[0]]) == 0)
    }

    /// A job of `owner` (nil: the queue's own user) inserted with its turn, as the intake inserts it.
    static func enqueue(_ store: QueueStore, owner: UInt32?, serial: Int, priority: Int = 0) throws -> JobID {
        var job = QueueHoldsTests.job(serial: serial)
        job.ownerUID = owner
        job.priority = priority
        try store.writer.write { db in try QueueStore.insertJob(job, in: db) }
        return job.id
    }

    @Test("alice's 30 queued first, bob's one photo after three of hers started: his goes next, then hers in turn")
    func claimOrder() throws {
        let store = QueueStore(database: try QueueDatabase.inMemory())
        let alice = try (0..<30).map { try Self.enqueue(store, owner: 1001, serial: $0) }
        let started = try store.claim(limit: 3).map(\.0.id)
        #expect(started == Array(alice[0..<3]))
        let bob = try Self.enqueue(store, owner: 1002, serial: 100)
        let second = try Self.enqueue(store, owner: 1002, serial: 101)
        let next = try store.claim(limit: 4).map(\.0.id)
        // Bob's first takes the turn of the clock; then owners alternate, oldest first within a turn.
        #expect(next == [bob, alice[3], second, alice[4]], "claimed: \(next)")
        // Once bob has nothing left, alice's go one after another, and the queue's own user's new one takes its turn
        // at the clock, not behind her backlog.
        let own = try Self.enqueue(store, owner: nil, serial: 200)
        #expect(try store.claim(limit: 2).map(\.0.id) == [own, alice[5]])
    }

    @Test("priority first: a higher one goes before every turn; turns are kept per priority")
    func priorityFirst() throws {
        let store = QueueStore(database: try QueueDatabase.inMemory())
        let alice = try (0..<5).map { try Self.enqueue(store, owner: 1001, serial: $0) }
        let urgent = try Self.enqueue(store, owner: 1001, serial: 10, priority: 5)
        let bob = try Self.enqueue(store, owner: 1002, serial: 11)
        #expect(try store.claim(limit: 3).map(\.0.id) == [urgent, alice[0], bob])
    }

    @Test("a job waits for fair-share while other owners' turns come first; its owner's first waits for a slot")
    func waitingReason() throws {
        let store = QueueStore(database: try QueueDatabase.inMemory())
        let alice = try (0..<6).map { try Self.enqueue(store, owner: 1001, serial: $0) }
        _ = try store.claim(limit: 2)
        let bob = try Self.enqueue(store, owner: 1002, serial: 50)
        try store.recordHolds(QueueHolds([.init(scope: QueueHolds.wholeQueue, reason: .concurrency)]))
        #expect(try store.job(bob)?.waitingReason == .concurrency)
        #expect(try store.job(alice[2])?.waitingReason == .fairShare)
        #expect(try store.job(alice[5])?.waitingHolds.first?.text() == "every transfer slot busy; other owners' "
            + "files take their turn first")
        let summary = try store.summary()
        #expect(summary.waiting[.fairShare] == 4 && summary.waiting[.concurrency] == 1, "\(summary.waiting)")
        // With free slots nothing waits; bob's started, nothing waits for another owner's turn.
        _ = try store.claim(limit: 1)
        #expect(try store.job(alice[2])?.waitingReason == .concurrency)
        try store.recordHolds(QueueHolds())
        #expect(try store.job(alice[2])?.waitingReason == nil)
    }

    @Test("the runnable counts the reason reads stay true through claims, retries, cancels, blocking and removal")
    func runnableCountsStayTrue() throws {
        let store = QueueStore(database: try QueueDatabase.inMemory())
        for serial in 0..<12 { _ = try Self.enqueue(store, owner: serial % 3 == 0 ? nil : UInt32(1000 + serial % 3), serial: serial) }
        func check(_ step: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let (counted, kept) = try store.writer.read { db in
                (try Row.fetchAll(db, sql: """
                    SELECT CASE WHEN owner_uid IS NULL OR owner_uid = 0 THEN -1 ELSE owner_uid END AS owner, priority,
                    COUNT(*) AS n FROM job WHERE \(QueueDatabase.runnableCondition) GROUP BY 1, 2
                    """).map { "\($0["owner"] as Int64)/\($0["priority"] as Int)=\($0["n"] as Int)" }.sorted(),
                 try QueueStore.fairTurns(db).map { "\($0.owner)/\($0.priority)=\($0.runnable)" }.sorted())
            }
            #expect(counted == kept, "\(step)", sourceLocation: sourceLocation)
        }
        try check("enqueued")
        let claimed = try store.claim(limit: 5)
        try check("claimed")
        for (index, (job, attempt)) in claimed.enumerated() {
            let event: JobLifecycle.Event = index % 2 == 0 ? .succeed
                : .failTransient(error: "x", retryAt: Date().addingTimeInterval(-1))
            try store.finish(job.id, attempt: attempt.number, event: event, outcome: index % 2 == 0 ? "uploaded" : "failed",
                             error: nil)
        }
        try check("finished")
        _ = try store.claim(limit: 2)
        try check("retried and claimed")
        let pending = try store.jobs(state: .pending)
        _ = try store.removeCancelled(pending[0].id)
        try check("cancelled")
        try store.writer.write { db in
            try db.execute(sql: "UPDATE job SET blocked_by = ? WHERE id = ?", arguments: [pending[1].id.rawValue,
                                                                                           pending[2].id.rawValue])
        }
        try check("blocked")
    }

    @Test("a claim reads as much with 40,000 jobs of 40 owners pending as with 400 of 2")
    func claimCostIsFlat() throws {
        func steps(pending: Int, owners: Int) throws -> Int {
            let store = QueueStore(database: try QueueDatabase.inMemory())
            try store.writer.write { db in
                for serial in 0..<pending {
                    var job = QueueHoldsTests.job(serial: serial)
                    job.ownerUID = UInt32(2000 + serial % owners)
                    try QueueStore.insertJob(job, in: db)
                }
            }
            // The gate a scheduler's round passes (without one, a claim first lists the destinations).
            let gate = ClaimGate(doors: ["dav": .open])
            _ = try store.claim(limit: 4, gate: gate)
            let counter = try SchedulerRoundCostTests.count(store)
            _ = try store.claim(limit: 4, gate: gate)
            return counter.steps.load(ordering: .relaxed)
        }
        let small = try steps(pending: 400, owners: 2)
        let large = try steps(pending: 40_000, owners: 40)
        #expect(small > 0)
        #expect(large <= small + small / 10, "\(small) steps with 400 jobs of 2 owners, \(large) with 40,000 of 40")
    }
}
