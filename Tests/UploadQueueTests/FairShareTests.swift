import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// Fair share of the slots between owners (`FairShare`): the turns, the claim order they make, the waiting reason
/// they give, and a claim that costs the same with many owners and many jobs.
struct FairShareTests {
    @Test("a turn is the later of the owner's next and the clock, the clock for an owner away; the clock never goes back",
          arguments: [(Int64(0), false, Int64(7), Int64(7), Int64(8)), (12, true, 7, 12, 13), (5, true, 7, 7, 8),
                      (9000, false, 7, 7, 8)])
    func turnTable(next: Int64, waiting: Bool, clock: Int64, turn: Int64, after: Int64) {
        let taken = FairShare.turn(ownerNext: next, waiting: waiting, clock: clock)
        #expect(taken.turn == turn && taken.ownerNext == after)
        #expect(FairShare.clock(9, afterClaiming: 4) == 9 && FairShare.clock(9, afterClaiming: 11) == 11)
        // A destination with nothing waiting starts from the priority's latest clock; one with a backlog keeps its own.
        #expect(FairShare.clock(own: 3, latest: 50, anyWaiting: false) == 50)
        #expect(FairShare.clock(own: 3, latest: 50, anyWaiting: true) == 3)
        #expect(FairShare.clock(own: nil, latest: 50, anyWaiting: false) == 50)
    }

    @Test("the queue's own user and root are one owner; each dropper is one")
    func owners() {
        #expect(FairShare.owner(nil) == FairShare.owner(0))
        #expect(FairShare.owner(1001) == 1001 && FairShare.owner(1001) != FairShare.owner(1002))
    }

    @Test("a job waits for its turn only when another owner surely has an earlier one runnable at its priority")
    func waitsForTurn() {
        // alice: 297 runnable, turns 3...299; bob: one runnable, turn 2; carol: nothing runnable.
        let turns = [FairShare.Turns(destination: "dav", priority: 0, owner: 1001, next: 300, runnable: 297),
                     FairShare.Turns(destination: "dav", priority: 0, owner: 1002, next: 3, runnable: 1),
                     FairShare.Turns(destination: "dav", priority: 0, owner: 1003, next: 900, runnable: 0)]
        func waits(_ turn: Int64, _ owner: Int64, priority: Int = 0, destination: String = "dav",
                   among: [FairShare.Turns] = turns) -> Bool {
            FairShare.waitsForTurn(turn: turn, owner: owner, destination: destination, priority: priority, among: among)
        }
        #expect(waits(3, 1001), "bob's turn 2 goes first")
        #expect(!waits(2, 1002), "bob's is next")
        #expect(!waits(3, 1001, priority: 5), "another priority")
        #expect(!waits(3, 1001, destination: "s3"), "another destination")
        #expect(!waits(3, 1001, among: [turns[0], turns[2]]), "alone")
        #expect(FairShare.waitingForTurns(among: turns) == 297)
        #expect(FairShare.waitingForTurns(among: [turns[0]]) == 0)
    }

    /// A job of `owner` (nil: the queue's own user) inserted with its turn, as the intake inserts it.
    static func enqueue(_ store: QueueStore, owner: UInt32?, serial: Int, priority: Int = 0,
                        destination: String = "dav") throws -> JobID {
        var job = QueueHoldsTests.job(destination, serial: serial)
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
        // Alice cancels her backlog and starts again: she is not held behind what she cancelled.
        for id in alice[5...] { _ = try store.removeCancelled(id) }
        let again = try Self.enqueue(store, owner: 1001, serial: 300)
        let bobs = try Self.enqueue(store, owner: 1002, serial: 301)
        let secondAgain = try Self.enqueue(store, owner: 1001, serial: 302)
        #expect(try store.claim(limit: 3).map(\.0.id) == [again, bobs, secondAgain])
    }

    @Test("turns are kept per destination: a backlog held at one destination holds up no one at another")
    func perDestination() throws {
        let store = QueueStore(database: try QueueDatabase.inMemory())
        // Alice's 20 wait for "held" (its door is shut); bob's 10 go to "dav", claimed one after another.
        let held = try (0..<20).map { try Self.enqueue(store, owner: 1001, serial: $0, destination: "held") }
        let bobs = try (0..<10).map { try Self.enqueue(store, owner: 1002, serial: 100 + $0) }
        let dav = ClaimGate(doors: ["dav": .open])
        #expect(try store.claim(limit: 10, gate: dav).map(\.0.id) == bobs)
        // Alice's first photo to "dav" goes at once, not behind her 20 held elsewhere; carol's first to "held", after
        // alice's first there, not behind all of them.
        let photo = try Self.enqueue(store, owner: 1001, serial: 200)
        let carol = try Self.enqueue(store, owner: 1003, serial: 201, destination: "held")
        #expect(try store.claim(limit: 1, gate: dav).map(\.0.id) == [photo])
        #expect(try store.claim(limit: 3, gate: ClaimGate(doors: ["held": .open])).map(\.0.id)
                == [held[0], carol, held[1]])
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
