import Foundation
import GRDB
import GRDBSQLite
import Logging
import Synchronization
import Testing
@testable import UploadQueue

/// Why jobs wait, derived from a handful of holds: the precedence of the reasons and what makes each hold.
struct QueueHoldsTests {
    static let configuration = """
        state_dir = "/tmp/uploadq-holds"
        [destinations.dav]
        protocol = "http-put"
        url = "http://127.0.0.1:9/up/{name}"
        on_metered = "allow-below:1KiB"
        [destinations.local]
        protocol = "file"
        url = "file:///tmp/uploadq-holds-out"
        """

    static func destinations() throws -> [String: Destination] {
        try ConfigurationLoader.parse(configuration, file: "/etc/uploadq/test.toml", baseDirectory: "/tmp").destinations
    }

    static func job(_ destination: String = "dav", size: Int64 = 10, meteredBelow: Int64? = nil,
                    state: JobState = .pending, serial: Int = 0) -> Job {
        var job = QueueStoreTests.job(JobID.generate(at: Date(timeIntervalSince1970: 1_800_000_000 + Double(serial))),
                                      size: size)
        job.destination = destination
        job.meteredBelow = meteredBelow
        job.state = state
        return job
    }

    @Test("the strongest cause wins: offline, then the metered link, then an open circuit, then busy slots")
    func precedence() {
        let all = QueueHolds([
            .init(scope: "dav", reason: .offline), .init(scope: "dav", reason: .meteredLink, meteredBelow: 0),
            .init(scope: "dav", reason: .circuitOpen), .init(scope: QueueHolds.wholeQueue, reason: .concurrency),
        ])
        #expect(all.reason(for: Self.job()) == .offline)
        let metered = QueueHolds(all.entries.filter { $0.reason != .offline })
        #expect(metered.reason(for: Self.job()) == .meteredLink)
        #expect(metered.reason(for: Self.job(meteredBelow: .max)) == .circuitOpen, "its own policy lets it go")
        let circuit = QueueHolds(metered.entries.filter { $0.reason != .meteredLink })
        #expect(circuit.reason(for: Self.job()) == .circuitOpen)
        #expect(circuit.reason(for: Self.job("other")) == .concurrency, "a hold on one destination is its own")
        #expect(QueueHolds().reason(for: Self.job()) == nil)
        for state in [JobState.uploading, .uploaded, .failed] {
            #expect(all.reason(for: Self.job(state: state)) == nil, "only a pending job waits")
        }
    }

    @Test("holds a killed runner left behind are not shown while no runner is up")
    func staleHoldsIgnored() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 1000, seed: 90)
        let id = try await queue.enqueue(path)
        // What a runner killed with -9 leaves: every slot busy, for ever.
        try queue.store.recordHolds(QueueHolds([.init(scope: QueueHolds.wholeQueue, reason: .concurrency)]))
        #expect(try queue.store.job(id)?.waitingReason == .concurrency, "recorded")
        let shown = try await queue.job(id)
        let listed = try await queue.jobs()
        #expect(shown?.waitingReason == nil, "no runner: nothing waits for a slot")
        #expect(listed.first?.waitingReason == nil)
        let status = try await queue.status()
        #expect(status.runnerPID == nil && status.summary.waiting.isEmpty, "\(status.summary.waiting)")
    }

    @Test("a metered hold keeps back what the destination's limit or the job's own policy keeps back")
    func meteredLimit() {
        let holds = QueueHolds([.init(scope: "dav", reason: .meteredLink, meteredBelow: 1024)])
        #expect(holds.reason(for: Self.job(size: 1023)) == nil)
        #expect(holds.reason(for: Self.job(size: 1024)) == .meteredLink)
        #expect(holds.reason(for: Self.job(size: 10, meteredBelow: 0)) == .meteredLink, "its own defer")
        #expect(holds.reason(for: Self.job(size: 1 << 30, meteredBelow: .max)) == nil, "its own allow")
    }

    @Test("holds and the gate come from the links and circuits; a local directory is never held by the link")
    func madeFromTheView() throws {
        let destinations = try Self.destinations()
        let metered = LinkStatus(linkClass: .metered, source: .override)
        let offline = LinkStatus(linkClass: .offline, source: .override)
        func plan(_ links: [String: LinkStatus], concurrency: Int = 4, strays: Set<String> = [],
                  openCircuit: String? = nil) -> SchedulerState.ClaimPlan? {
            var configuration = Configuration(stateDirectory: "/nonexistent", destinations: destinations)
            configuration.limits.concurrency = concurrency
            var state = SchedulerState(settings: .init(configuration))
            if let openCircuit {
                // Five transient failures the destination is blamed for open its circuit.
                let job = Self.job(openCircuit, size: 1)
                for _ in 0..<5 {
                    _ = state.ended(job, attempt: 1, result: .failure(TransferFailure(.transient(retryAfter: nil), code: "http",
                                                                          "503", destinationFault: true)), now: Date())
                }
            }
            let actions = state.decide(now: Date(), inputs: .init(linkChanges: links, strays: strays))
            for case .claim(let plan) in actions { return plan }
            return nil
        }
        let both = try #require(plan(["dav": metered, "local": offline], strays: ["gone", "dav"]))
        #expect(both.holdsWhenFull.entries == [.init(scope: "dav", reason: .meteredLink, meteredBelow: 1024),
                                               .init(scope: QueueHolds.wholeQueue, reason: .concurrency)])
        #expect(both.gate.doors == ["dav": .metered(below: 1024), "local": .open, "gone": .open])
        let shut = try #require(plan(["dav": offline], openCircuit: "local"))
        #expect(shut.gate.doors.isEmpty)
        #expect(shut.holdsOtherwise.openCircuits == ["local"])
    }
}

/// The claim: one indexed query through the gate, and the counts `status` derives without reading every job.
struct ClaimQueryTests {
    @Test("the claim query seeks the claim indexes by destination and never scans the jobs")
    func queryPlan() throws {
        let store = try QueueStoreTests.store(with: [])
        let gate = ClaimGate(doors: ["a": .open, "b": .metered(below: 0), "c": .metered(below: .max),
                                     "d": .metered(below: 1024)])
        let query = try #require(QueueStore.claimQuery(gate))
        let plan = try store.writer.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + query.sql, arguments: query.arguments).map { $0["detail"] as String }
        }
        let searches = plan.filter { $0.hasPrefix("SEARCH job USING") }
        // a: three indexes; b: its own allowed jobs; c: allowed and by policy; d: allowed and by policy (with size).
        #expect(searches.count == 3 + 1 + 2 + 2, "\(plan)")
        #expect(searches.allSatisfy { $0.contains("INDEX job_claim") && $0.contains("(destination=?)") }, "\(plan)")
        #expect(!plan.contains { $0.hasPrefix("SCAN job") }, "a scan of the job table: \(plan)")
        // Each pick is read in index order: no sort of a destination's jobs (only of the few picks, at the end).
        #expect(plan.filter { $0.contains("TEMP B-TREE") }.count <= 1, "\(plan)")
        #expect(QueueStore.claimQuery(ClaimGate(doors: [:])) == nil)
    }

    @Test("retries, the next due time, pruning and completions read the partial indexes of their rows, not every job")
    func historyQueryPlans() throws {
        // Many uploaded jobs and failures, no statistics (the daemon never runs ANALYZE): SQLite guesses, and a
        // guess that falls on an index over every job walks the whole history. The queries name their index.
        let jobs = (0..<300).map { index in
            var job = QueueHoldsTests.job(size: 10, state: [.uploaded, .failed, .pending][index % 3], serial: index)
            job.permanent = job.state == .failed && index % 2 == 0
            if job.state == .failed && !job.permanent { job.nextAttemptAt = Date().addingTimeInterval(3600) }
            return job
        }
        let store = try QueueStoreTests.store(with: jobs)
        func plans(of work: () throws -> Void) throws -> [(sql: String, plan: [String])] {
            // The statements the functions run, as they run them (one connection: reads and writes alike).
            let executed = Mutex<[String]>([])
            try store.writer.writeWithoutTransaction { db in
                db.trace(options: .statement) { event in
                    if case .statement(let statement) = event { executed.withLock { $0.append(statement.expandedSQL) } }
                }
            }
            try work()
            try store.writer.writeWithoutTransaction { db in db.trace(options: [], nil) }
            let reads = executed.withLock { $0 }.filter { $0.contains("FROM job ") }
            return try store.writer.read { db in
                try reads.map { sql in
                    (sql: sql, plan: try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql).map { $0["detail"] as String })
                }
            }
        }
        let traced = try plans {
            _ = try store.roundView()
            _ = try store.claim(limit: 1, gate: ClaimGate(doors: [:]))
            _ = try store.pruneHistory(before: Date(), dryRun: true)
            _ = try store.unacknowledgedCompletions()
        }
        // Each statement over failed or uploaded jobs, on its own: the index of exactly those rows, and no walk of
        // the job table or of an index over every job.
        for (state, index, least) in [("failed", "job_retry", 2), ("uploaded", "job_uploaded", 2)] {
            let statements = traced.filter { $0.sql.contains("state = '\(state)'") }
            #expect(statements.count >= least, "\(state): \(traced.map(\.sql))")
            for (sql, plan) in statements {
                let jobLines = plan.filter { $0.hasPrefix("SCAN job") || $0.hasPrefix("SEARCH job") }
                #expect(!jobLines.isEmpty && jobLines.allSatisfy { $0.contains("INDEX \(index)") }, "\(sql): \(plan)")
            }
        }
    }

    @Test("reads by an unfinished state go through job_unfinished, a list of uploaded jobs walks by id: no sort, no history")
    func unfinishedQueryPlans() throws {
        var jobs = (0..<400).map { QueueHoldsTests.job(size: 10, state: .uploaded, serial: $0) }
        for (serial, state) in [JobState.pending, .uploading, .failed, .pending].enumerated() {
            jobs.append(QueueHoldsTests.job(size: 10, state: state, serial: 400 + serial))
        }
        let store = try QueueStoreTests.store(with: jobs)
        let executed = Mutex<[String]>([])
        try store.writer.writeWithoutTransaction { db in
            db.trace(options: .statement) { event in
                if case .statement(let statement) = event { executed.withLock { $0.append(statement.expandedSQL) } }
            }
        }
        _ = try store.summary()
        for state in [JobState.pending, .uploading, .failed] { _ = try store.listing(state: state, limit: 10) }
        _ = try store.isIdle()
        _ = try store.otherJobReading("/tmp/f", except: jobs[0].id)
        try store.retryFailedNow(destinations: ["dav"])
        _ = try store.recoverInterrupted()
        _ = try store.retryAllFailed()
        let uploaded = try store.listing(state: .uploaded, limit: 10)
        try store.writer.writeWithoutTransaction { db in db.trace(options: [], nil) }
        #expect(uploaded.jobs.count == 10 && uploaded.jobs.allSatisfy { $0.state == .uploaded })
        #expect(uploaded.jobs.map(\.id) == jobs[390..<400].map(\.id).reversed(), "newest first")
        let statements = executed.withLock { $0 }.filter {
            $0.contains("FROM job") || $0.contains("FROM \"job\"") || $0.hasPrefix("UPDATE \"job\"")
        }
        let plans = try store.writer.read { db in
            try statements.map { sql in
                (sql, try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql).map { $0["detail"] as String })
            }
        }
        let unfinished = plans.filter { $0.0.contains(QueueDatabase.unfinishedCondition) }
        #expect(unfinished.count >= 9, "\(statements)")
        for (sql, plan) in unfinished {
            let jobLines = plan.filter { $0.hasPrefix("SCAN job") || $0.hasPrefix("SEARCH job") }
            #expect(!jobLines.isEmpty && jobLines.allSatisfy { $0.contains("INDEX job_unfinished") }, "\(sql): \(plan)")
        }
        let history = try #require(plans.first { $0.0.contains("+state = 'uploaded'") })
        #expect(!history.1.contains { $0.contains("TEMP B-TREE") }, "\(history)")
    }

    @Test("claims go through the gate: priority then age across destinations, and the metered terms per job")
    func gateDecides() throws {
        var jobs: [Job] = []
        func add(_ destination: String, size: Int64 = 10, meteredBelow: Int64? = nil, priority: Int = 0) -> JobID {
            var job = QueueHoldsTests.job(destination, size: size, meteredBelow: meteredBelow, serial: jobs.count)
            job.priority = priority
            jobs.append(job)
            return job.id
        }
        let oldA = add("a"), urgentB = add("b", priority: 5), newA = add("a")
        let smallM = add("m", size: 100), largeM = add("m", size: 5000), ownAllow = add("m", size: 1 << 30, meteredBelow: .max)
        let ownDefer = add("m", size: 1, meteredBelow: 0)
        _ = add("shut")
        let store = try QueueStoreTests.store(with: jobs)
        let gate = ClaimGate(doors: ["a": .open, "b": .open, "m": .metered(below: 1024)])
        let order = try store.claim(limit: 10, gate: gate).map(\.0.id)
        #expect(order == [urgentB, oldA, newA, smallM, ownAllow], "priority, then age; the metered terms per job")
        #expect(!order.contains(largeM) && !order.contains(ownDefer))
        #expect(try store.claim(limit: 10, gate: ClaimGate(doors: ["m": .metered(below: 0)])).isEmpty)
        #expect(try store.claim(limit: 10, gate: ClaimGate(doors: ["m": .metered(below: .max)])).map(\.0.id) == [largeM])
        #expect(try store.claim(limit: 10, gate: ClaimGate(doors: ["m": .open])).map(\.0.id) == [ownDefer])
        let attempts = try store.attempts(of: urgentB)
        #expect(attempts.count == 1 && attempts[0].number == 1, "each claim opens an attempt")
    }

    @Test("outside the windows only urgent jobs; a spent budget only `always` jobs, by index; status counts them so")
    func constraintDoors() throws {
        var jobs: [Job] = []
        func add(_ destination: String, priority: Int = 0, onMetered: String? = nil) -> JobID {
            var job = QueueHoldsTests.job(destination, size: 100, serial: jobs.count)
            job.priority = priority
            job.onMetered = onMetered
            jobs.append(job)
            return job.id
        }
        let low = add("w"), urgent = add("w", priority: 10), higher = add("w", priority: 20)
        let plain = add("m"), always = add("m", onMetered: "always"), allow = add("m", onMetered: "allow")
        let store = try QueueStoreTests.store(with: jobs)
        // What status says before any claim: each job under its strongest reason.
        let holds = QueueHolds([
            .init(scope: "w", reason: .outsideWindow, minimumPriority: 10),
            .init(scope: "m", reason: .meteredLink, meteredBelow: .max),
            .init(scope: "m", reason: .budgetSpent, meteredBelow: .max, detail: "1.0 MiB/day"),
        ])
        try store.recordHolds(holds)
        let summary = try store.summary(holdsInForce: true)
        #expect(summary.waiting[.outsideWindow] == 1 && summary.waiting[.budgetSpent] == 2, "\(summary.waiting)")
        #expect(holds.holds(for: try #require(try store.job(low))).map(\.reason) == [.outsideWindow])
        #expect(holds.holds(for: try #require(try store.job(always))).isEmpty)

        let windowed = ClaimGate(doors: ["w": ClaimGate.Door(minimumPriority: 10)])
        #expect(try store.claim(limit: 10, gate: windowed).map(\.0.id) == [higher, urgent])
        #expect(try store.claim(limit: 10, gate: ClaimGate(doors: ["m": ClaimGate.Door(budgetSpent: true)]))
            .map(\.0.id) == [always])
        // A destination whose own policy is `always`: its jobs without a policy go too, not those that say `allow`.
        let ignoring = ClaimGate.Door(budgetSpent: true, destinationIgnoresBudget: true)
        #expect(try store.claim(limit: 10, gate: ClaimGate(doors: ["m": ignoring])).map(\.0.id) == [plain])
        #expect(try store.claim(limit: 10, gate: ClaimGate(doors: ["m": .open, "w": .open])).map(\.0.id) == [low, allow])
        // What is left of the budget, for a destination of whole files: files larger wait, and one file takes it
        // (another waits for the next round, which counts what the first will send); `always` goes regardless.
        let small = add("f"), large = add("f"), second = add("f"), event = add("f", onMetered: "always")
        var sized = jobs
        sized[sized.count - 3].size = 5000
        sized[sized.count - 1].size = 9000
        let sizedStore = try QueueStoreTests.store(with: sized)
        let wholeFiles = ClaimGate.Door(meteredBelow: .max, maximumSize: 1000)
        #expect(try sizedStore.claim(limit: 10, gate: ClaimGate(doors: ["f": wholeFiles])).map(\.0.id) == [small, event])
        #expect(try sizedStore.claim(limit: 10, gate: ClaimGate(doors: ["f": .open])).map(\.0.id) == [large, second])
        // Each pick seeks its index.
        let query = try #require(QueueStore.claimQuery(ClaimGate(doors: ["m": ClaimGate.Door(budgetSpent: true)])))
        #expect(query.sql.contains("INDEXED BY \(QueueDatabase.budgetExemptIndex)"))
    }

    @Test("a row this version cannot read is set aside (failed, with why) instead of stopping every claim after it")
    func unreadableRowSetAside() throws {
        var first = QueueHoldsTests.job("a", serial: 0)
        first.priority = 9
        let good = QueueHoldsTests.job("a", serial: 1)
        var retry = QueueHoldsTests.job("a", state: .failed, serial: 2)
        retry.nextAttemptAt = Date(timeIntervalSince1970: 1_700_000_000)
        var patched = QueueHoldsTests.job("a", serial: 3)
        patched.patch = PatchTarget(url: "https://app.example/r/1", headers: ["Authorization": "Bearer s3cr3t"])
        let dated = QueueHoldsTests.job("a", serial: 4)
        let store = try QueueStoreTests.store(with: [first, good, retry, patched, dated])
        // A newer version's mode, a due retry damaged the same way, a newer patch state beside a token, a date
        // that is not one.
        try store.writer.write { db in
            try db.execute(sql: "UPDATE job SET mode = 'mirror' WHERE id IN (?, ?)",
                           arguments: [first.id.rawValue, retry.id.rawValue])
            try db.execute(sql: "UPDATE job SET patch_state = 'queued' WHERE id = ?", arguments: [patched.id.rawValue])
            try db.execute(sql: "UPDATE job SET created_at = 'yesterday' WHERE id = ?", arguments: [dated.id.rawValue])
        }
        let claimed = try store.claim(limit: 5, gate: ClaimGate(doors: ["a": .open])).map(\.0.id)
        #expect(claimed == [good.id], "the readable job is claimed although a damaged one comes first")
        for id in [first.id, retry.id, patched.id, dated.id] {
            let row = try #require(try store.writer.read { db in
                try Row.fetchOne(db, sql: "SELECT state, permanent, last_error FROM job WHERE id = ?",
                                 arguments: [id.rawValue])
            })
            let error = row["last_error"] as String? ?? ""
            #expect(row["state"] as String == "failed" && row["permanent"] as Bool == true, "\(id)")
            #expect(error.hasPrefix("set aside: this version of uploadq cannot read") && error.contains("retry \(id)"))
            #expect(!error.contains("s3cr3t"), "no value of the row is repeated")
        }
        #expect(try store.claim(limit: 4, gate: ClaimGate(doors: ["a": .open])).isEmpty)
    }

    @Test("status counts the waiting reasons each job shows, from the tally and the holds")
    func countsAgreeWithJobs() throws {
        var jobs: [Job] = []
        for (index, destination) in ["dav", "dav", "dav", "dav", "gone", "slow", "slow", "free"].enumerated() {
            jobs.append(QueueHoldsTests.job(destination, size: Int64(index) * 400,
                                            meteredBelow: index == 2 ? .max : index == 1 ? 0 : nil, serial: index))
        }
        jobs.append(QueueHoldsTests.job("dav", state: .uploaded, serial: 20))
        let store = try QueueStoreTests.store(with: jobs)
        let variants: [QueueHolds] = [
            QueueHolds(),
            QueueHolds([.init(scope: "dav", reason: .meteredLink, meteredBelow: 1000),
                        .init(scope: "gone", reason: .offline), .init(scope: "slow", reason: .circuitOpen),
                        .init(scope: QueueHolds.wholeQueue, reason: .concurrency)]),
            QueueHolds([.init(scope: "dav", reason: .meteredLink, meteredBelow: 0),
                        .init(scope: "dav", reason: .circuitOpen)]),
        ]
        for holds in variants {
            try store.recordHolds(holds)
            #expect(try store.holds() == holds)
            var expected: [WaitingReason: Int] = [:]
            for job in try store.jobs() {
                if let reason = job.waitingReason { expected[reason, default: 0] += 1 }
            }
            #expect(try store.summary().waiting == expected, "\(holds)")
            #expect(try store.summary().openCircuits == holds.openCircuits)
        }
        #expect(try store.jobs().contains { $0.waitingReason == .meteredLink })
    }

    @Test("the tally status reads stays equal to a count of the rows through claims, failures, retries and removals")
    func tallyStaysTrue() throws {
        let jobs = (0..<12).map { QueueHoldsTests.job($0 % 3 == 0 ? "a" : "b", size: Int64($0 + 1) * 100, serial: $0) }
        let store = try QueueStoreTests.store(with: jobs)
        func check(_ step: String) throws {
            let direct = try store.writer.read { db in
                try Row.fetchAll(db, sql: "SELECT state, COUNT(*) AS n, SUM(size) AS bytes FROM job GROUP BY state")
            }
            let summary = try store.summary()
            for row in direct {
                let state = try #require(JobState(rawValue: row["state"]))
                #expect(summary.counts[state] == row["n"], "\(step): \(state)")
                #expect(summary.bytes[state] == row["bytes"], "\(step): \(state) bytes")
            }
            #expect(summary.counts.values.reduce(0, +) == direct.reduce(0) { $0 + ($1["n"] as Int) }, "\(step)")
        }
        try check("enqueued")
        let claimed = try store.claim(limit: 6)
        try check("claimed")
        let base = Date()
        for (index, (job, attempt)) in claimed.enumerated() {
            let event: JobLifecycle.Event = switch index % 3 {
            case 0: .succeed
            case 1: .failTransient(error: "x", retryAt: base.addingTimeInterval(-1))
            default: .failPermanent(error: "y")
            }
            try store.finish(job.id, attempt: attempt.number, event: event, outcome: index % 3 == 0 ? "uploaded" : "failed",
                             error: nil)
        }
        try check("finished")
        #expect(try store.summary().permanentFailures == 2)
        #expect(try store.summary().failedAttempts == 4)
        _ = try store.claim(limit: 20)
        try check("retried and claimed")
        _ = try store.retryAllFailed()
        try check("retried by hand")
        for job in try store.jobs(state: .pending) { _ = try store.removeCancelled(job.id) }
        try check("cancelled")
        #expect(try store.summary().failedAttempts == 4, "a count since the queue began, not of the rows left")
    }
}

/// What a scheduler round costs does not grow with the number of jobs that wait: SQLite's own count of the
/// virtual-machine steps of every statement a round runs, with 200 and with 2,000 jobs pending.
struct SchedulerRoundCostTests {
    /// Adds up `SQLITE_STMTSTATUS_VM_STEP` of every statement the connection finishes.
    final class StepCounter: Sendable {
        let steps = Atomic<Int>(0)
        let fullScanSteps = Atomic<Int>(0)
    }

    static func count(_ store: QueueStore) throws -> StepCounter {
        let counter = StepCounter()
        try store.writer.writeWithoutTransaction { db in
            sqlite3_trace_v2(db.sqliteConnection, UInt32(SQLITE_TRACE_PROFILE), { _, context, statement, _ in
                guard let context, let statement else { return 0 }
                let counter = Unmanaged<StepCounter>.fromOpaque(context).takeUnretainedValue()
                let handle = OpaquePointer(statement)
                counter.steps.add(Int(sqlite3_stmt_status(handle, SQLITE_STMTSTATUS_VM_STEP, 0)), ordering: .relaxed)
                counter.fullScanSteps.add(Int(sqlite3_stmt_status(handle, SQLITE_STMTSTATUS_FULLSCAN_STEP, 0)),
                                          ordering: .relaxed)
                return 0
            }, Unmanaged.passUnretained(counter).toOpaque())
        }
        return counter
    }

    /// The VM steps of five rounds (after one that claims and records the holds), with `pending` jobs queued.
    static func stepsOfRounds(link: String, pending: Int, ownAllowed: Int = 0, port: Int) async throws -> (Int, Int) {
        let configuration = try ConfigurationLoader.parse("""
            state_dir = "/tmp/uploadq-round-cost"
            [link]
            mode = "\(link)"
            [limits]
            concurrency = 4
            [destinations.dav]
            protocol = "http-put"
            url = "http://127.0.0.1:\(port)/up/{name}"
            on_metered = "defer"
            """, file: "/etc/uploadq/test.toml", baseDirectory: "/tmp")
        // One real file behind every job: the uploads that start really send it (and hang on the silent server).
        let sandbox = try Sandbox()
        let file = try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 4096, seed: 1)
        let fingerprint = try FileFingerprint.of(path: file)
        let jobs = (0..<pending).map { index in
            var job = QueueHoldsTests.job(size: 4096, meteredBelow: index < ownAllowed ? .max : nil, serial: index)
            job.file = file
            job.mode = .reference
            job.inode = fingerprint.inode
            job.device = fingerprint.device
            job.modifiedNanoseconds = fingerprint.modifiedNanoseconds
            return job
        }
        // As much history as work: uploaded jobs and permanent failures, which no round may walk.
        let history = (0..<pending).map { index in
            var job = QueueHoldsTests.job(size: 4096, state: index % 2 == 0 ? .uploaded : .failed,
                                          serial: pending + index)
            job.permanent = job.state == .failed
            return job
        }
        let store = try QueueStoreTests.store(with: jobs + history)
        let engine = TransferEngine()
        defer { engine.shutdown() }
        let uploaders = configuration.destinations.mapValues { UploadQueue.uploader(for: $0, engine: engine) }
        let scheduler = Scheduler(configuration: configuration, store: store, events: EventHub(), uploaders: uploaders,
                                  logger: Logger(label: "test"), engine: engine,
                                  monitor: LinkMonitor(configuration: configuration, networkManager: nil))
        try await scheduler.round()
        let counter = try count(store)
        for _ in 0..<5 { try await scheduler.round() }
        let steps = (counter.steps.load(ordering: .relaxed), counter.fullScanSteps.load(ordering: .relaxed))
        let uploading = try store.jobs(state: .uploading)
        let transferring = uploading.filter { $0.waitingReason == nil }.count
        #expect(transferring == (link == "offline" ? 0 : link == "metered" ? ownAllowed : 4),
                "\(link): \(transferring) transferring")
        // Through a gate open everywhere, twice as many wait claimed for the next free slots; never otherwise.
        #expect(uploading.count - transferring == (link == "unmetered" ? 8 : 0), "\(link): \(uploading.count) uploading")
        #expect(uploading.allSatisfy { $0.waitingReason == nil || $0.waitingReason == .concurrency })
        #expect(try store.jobs(state: .failed).count == pending / 2, "\(link): nothing else failed")
        // Stops the transfers the first round started (run() returns at once when cancelled, after stopping them).
        let stopper = Task { await scheduler.run() }
        stopper.cancel()
        await stopper.value
        // What was claimed ahead went back to the queue with the stop, no attempt counted.
        #expect(try store.jobs(state: .uploading).isEmpty, "\(link): a stopped runner leaves nothing uploading")
        #expect(try store.jobs(state: .pending).filter { $0.attempts > 0 }.count == transferring,
                "\(link): only the transfers that ran count an attempt")
        return steps
    }

    @Test("offline, metered with a few jobs allowed, every slot busy: a round reads as much with 2,000 jobs as with 200",
          arguments: [("offline", 0), ("metered", 2), ("unmetered", 0)])
    func roundCostIsFlat(link: String, ownAllowed: Int) async throws {
        // A listening socket that never accepts: uploads to it start and then hang, holding their slots.
        let server = try loopbackListener()
        defer { close(server.descriptor) }
        let small = try await Self.stepsOfRounds(link: link, pending: 200, ownAllowed: ownAllowed, port: Int(server.port))
        let large = try await Self.stepsOfRounds(link: link, pending: 2000, ownAllowed: ownAllowed, port: Int(server.port))
        #expect(small.0 > 0, "the rounds ran statements")
        #expect(large.0 <= small.0 + small.0 / 4 + 200, "\(link): \(small.0) steps with 200 jobs, \(large.0) with 2,000")
        #expect(large.1 <= small.1 + 50, "\(link): full-scan steps \(small.1) with 200 jobs, \(large.1) with 2,000")
    }
}

/// How the round's one transaction behaves when part of it fails: the transfer ends are what must not be lost.
struct SettlementRecorderTests {
    static func recorder(_ store: QueueStore) throws -> SettlementRecorder {
        let configuration = try ConfigurationLoader.parse(QueueHoldsTests.configuration, file: "/etc/uploadq/test.toml",
                                                          baseDirectory: "/tmp")
        return SettlementRecorder(configuration: configuration, store: store, events: EventHub(), uploaders: [:],
                                  cancelled: CancelledFiles(directory: configuration.cancelledDirectory),
                                  logger: Logger(label: "test"))
    }

    /// Two claimed jobs and their successful ends.
    static func ended(_ store: QueueStore) throws -> [Settlement] {
        try store.claim(limit: 2).map { job, attempt in
            Settlement(job: job, attempt: attempt.number, result: .success(UploadOutcome(remoteURL: "http://x/\(job.id)")),
                       stop: nil, at: Date())
        }
    }

    @Test("a claim that fails costs the ends nothing: they are committed, and the claim's error is returned")
    func failingClaim() throws {
        let store = try QueueStoreTests.store(with: (0..<3).map { QueueHoldsTests.job(serial: $0) })
        let ends = try Self.ended(store)
        let (leftovers, claims) = try Self.recorder(store).record(together: ends, links: [:]) { db -> Int in
            _ = try QueueStore.claim(limit: 1, gate: nil, now: Date(), in: db)
            throw UploadQueueError(.invalidTransition, "a claim that cannot go on")
        }
        #expect(leftovers.dropped.isEmpty && leftovers.kept.isEmpty)
        #expect(throws: UploadQueueError.self) { try claims.get() }
        #expect(try store.jobs(state: .uploaded).count == 2)
        #expect(try store.jobs(state: .pending).count == 1, "the failed claim was rolled back")
        #expect(try store.attempts(of: ends[0].job.id).first?.outcome == "uploaded")
    }

    @Test("an end whose job changed meanwhile is dropped alone; the others and the claims go in")
    func oneBadEnd() throws {
        let store = try QueueStoreTests.store(with: (0..<3).map { QueueHoldsTests.job(serial: $0) })
        var ends = try Self.ended(store)
        // Its row is gone (removed meanwhile): its end cannot be recorded.
        try store.writer.write { db in try db.execute(sql: "DELETE FROM job WHERE id = ?", arguments: [ends[1].job.id.rawValue]) }
        ends[1].at = Date()
        let (leftovers, claims) = try Self.recorder(store).record(together: ends, links: [:]) { db in
            try QueueStore.claim(limit: 1, gate: nil, now: Date(), in: db).count
        }
        #expect(Set(leftovers.dropped.keys) == [ends[1].job.id] && leftovers.kept.isEmpty)
        #expect(try claims.get() == 1)
        #expect(try store.jobs(state: .uploaded).map(\.id) == [ends[0].job.id])
    }

    @Test("a database that refuses writes as a whole (busy) records nothing and is not tried again in pieces")
    func refusal() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        let database = try QueueDatabase.open(path: sandbox.state + "/queue.sqlite")
        let store = QueueStore(database: database)
        try store.writer.write { db in for serial in 0..<2 { try QueueHoldsTests.job(serial: serial).insert(db) } }
        let ends = try Self.ended(store)
        // Another process holds the write lock for longer than the busy timeout.
        var holder: OpaquePointer?
        #expect(sqlite3_open(sandbox.state + "/queue.sqlite", &holder) == SQLITE_OK)
        defer { sqlite3_close(holder) }
        #expect(sqlite3_exec(holder, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK)
        var calls = 0
        let started = ContinuousClock.now
        let error = #expect(throws: (any Error).self) {
            _ = try Self.recorder(store).record(together: ends, links: [:]) { _ in calls += 1 }
        }
        #expect(error.map(SettlementRecorder.refusesAnyWrite) == true, "\(String(describing: error))")
        let waited = ContinuousClock.now - started
        sqlite3_exec(holder, "ROLLBACK", nil, nil, nil)
        #expect(calls == 0)
        #expect(try store.jobs(state: .uploading).count == 2, "nothing recorded")
        #expect(waited < .seconds(9), "one busy timeout, not two: \(waited)")
    }
}

/// A queue written by the version before the scale work (migrations up to v6), with jobs in it, upgrades in place.
struct ScaleUpgradeTests {
    @Test("a v6 queue with jobs upgrades: tally, metered limits and indexes made from its rows, reasons cleared, jobs claimable")
    func upgradeFromV6() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        let path = sandbox.state + "/queue.sqlite"
        let database = try DatabaseQueue(path: path)
        try QueueDatabase.migrator.migrate(database, upTo: "v6-source-after-upload")
        let base = Date(timeIntervalSince1970: 1_800_000_000)
        let rows: [(state: String, reason: String?, onMetered: String?, size: Int64, permanent: Bool)] = [
            ("pending", "metered-link", "allow-below:1MiB", 1000, false),
            ("pending", "concurrency", nil, 2000, false),
            ("failed", nil, nil, 4000, true),
            ("uploaded", nil, "defer", 8000, false),
        ]
        var ids: [JobID] = []
        try database.write { db in
            for (index, row) in rows.enumerated() {
                let id = JobID.generate(at: base.addingTimeInterval(Double(index)))
                ids.append(id)
                try db.execute(sql: """
                    INSERT INTO job (id, state, waiting_reason, permanent, file, source_path, original_name, mode, size,
                    sha256, content_type, mtime_ns, inode, device, destination, meta, on_metered, intake_complete,
                    created_at, updated_at)
                    VALUES (?, ?, ?, ?, '/tmp/f', '/tmp/f', 'f.jpg', 'copy', ?, ?, 'image/jpeg', 0, 1, 1, 'dav', '{}', ?, 1,
                    ?, ?)
                    """, arguments: [id.rawValue, row.state, row.reason, row.permanent, row.size, "sha-\(index)",
                                     row.onMetered, base, base])
            }
        }
        try database.close()

        let store = QueueStore(database: try QueueDatabase.open(path: path))
        let (tally, indexes, reasons) = try store.writer.read { db in
            (try Row.fetchAll(db, sql: "SELECT state, jobs, bytes FROM job_tally WHERE jobs > 0 ORDER BY state")
                .map { "\($0["state"] as String) \($0["jobs"] as Int) \($0["bytes"] as Int64)" },
             Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'job'")),
             try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM job WHERE waiting_reason IS NOT NULL"))
        }
        #expect(tally == ["failed 1 4000", "pending 2 3000", "uploaded 1 8000"])
        #expect(reasons == 0, "reasons are derived from holds now")
        #expect(indexes.isSuperset(of: ["job_claim", "job_claim_metered_allowed", "job_claim_metered_deferred",
                                        "job_cancel", "job_intake", "job_unfinished", "job_retry", "job_uploaded"]),
                "\(indexes)")
        #expect(indexes.isDisjoint(with: ["job_runnable", "job_finished", "job_summary", "job_state_id"]), "\(indexes)")
        let jobs = try store.jobs(ids)
        #expect(jobs[ids[0]]?.meteredBelow == Int64(1 << 20))
        #expect(jobs[ids[1]]?.meteredBelow == nil)
        #expect(jobs[ids[3]]?.meteredBelow == Int64(0))
        // Both pending jobs are claimable through the new indexes (one by its own metered limit, one by policy).
        #expect(Set(try store.claim(limit: 4).map(\.0.id)) == [ids[0], ids[1]])
    }
}
