import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// The migrations are frozen (plain SQL, no application types), so a later change of the app cannot change what an
/// old one did. What the running code still names in them (index conditions, the names of states, consumers and
/// events) is checked here against what they wrote: a change on either side alone fails.
@Suite struct MigrationTests {
    /// SQL with its runs of white space made one space.
    static func normalized(_ sql: String) -> String {
        sql.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }

    @Test("the claim queries' index conditions are the ones the frozen migrations wrote")
    func claimIndexes() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let indexes = try store.writer.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
                .map { ($0["name"] as String, Self.normalized($0["sql"])) })
        }
        for index in QueueDatabase.ClaimIndex.allCases {
            let sql = try #require(indexes[index.rawValue], "\(index.rawValue) is missing")
            #expect(sql.hasSuffix("WHERE " + Self.normalized(index.condition)), "\(sql)")
        }
        let exempt = try #require(indexes[QueueDatabase.budgetExemptIndex])
        #expect(exempt.hasSuffix("WHERE " + Self.normalized(QueueDatabase.budgetExemptCondition)), "\(exempt)")
        #expect(indexes["outbox_due"]?.hasSuffix("WHERE state = '\(OutboxState.pending.rawValue)'") == true)
    }

    @Test("the names the frozen outbox and event-log triggers wrote are still the app's")
    func namesInTriggers() {
        #expect(OutboxState.pending.rawValue == "pending" && OutboxState.done.rawValue == "done")
        #expect(JobState.uploaded.rawValue == "uploaded" && JobState.failed.rawValue == "failed")
        #expect(JobState.uploading.rawValue == "uploading" && JobState.pending.rawValue == "pending")
        #expect(OutboxConsumer.patch.description == "patch" && OutboxConsumer.hook(.failed).description == "hook:failed")
        #expect(HookEvent.uploaded.rawValue == "uploaded" && HookEvent.failed.rawValue == "failed")
        #expect(PatchState.none.rawValue == "none")
        #expect(QueueDatabase.runnableCondition
                == "state = 'pending' AND intake_complete = 1 AND cancel_requested = 0 AND blocked_by IS NULL")
        #expect(PrerequisiteKind.lane.rawValue == "lane" && PrerequisiteKind.after.rawValue == "after")
    }

    @Test("v7's own reading of a job's on_metered agrees with the policy the app reads today")
    func meteredBelowAsV7ReadIt() {
        let texts = ["defer", "allow", "always", "allow-below:1MiB", "allow-below:1.5MB", "allow-below:512",
                     "allow-below: 2 GiB", "allow-below:10KB", "allow-below:3B", "allow-below:-1", "allow-below:", "later",
                     "allow-below:9223372036854775807", "allow-below:9007199254740993", "allow-below:1.5", "allow-below:1e6",
                     "allow-below:0x10", "allow-below:infMB", "allow-below:nanB"]
        for text in texts {
            #expect(QueueDatabase.v7MeteredBelow(text) == MeteredPolicy(text)?.sizeLimit, "\(text)")
        }
    }
}

/// Migration v18 (fewer writes per job): what it rebuilt reads as it did, and a claim no longer writes the tally.
struct FewerWritesMigrationTests {
    @Test("v18 keeps every count, attempt and trigger: the tally folds uploading into pending, attempts lose their rowid")
    func migratesAQueueInUse() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        let path = sandbox.state + "/queue.sqlite"
        let database = try DatabaseQueue(path: path)
        try QueueDatabase.migrator.migrate(database, upTo: "v17-claim-ahead")
        let states: [(JobState, WaitingReason?)] = [(.pending, nil), (.uploading, nil), (.uploading, .concurrency),
                                                    (.failed, nil), (.uploaded, nil), (.pending, nil)]
        let jobs = states.enumerated().map { serial, state in
            var job = QueueHoldsTests.job(size: Int64(100 << serial), state: state.0, serial: serial)
            job.waitingReason = state.1
            return job
        }
        let started = Date(timeIntervalSince1970: 1_800_000_000)
        try database.write { db in
            for job in jobs { try job.insert(intoEarlierSchemaOf: db) }
            for (index, outcome) in [(1, nil), (3, "failed"), (4, "uploaded")] as [(Int, String?)] {
                try Job.Attempt(jobID: jobs[index].id, number: 1, startedAt: started, endedAt: outcome.map { _ in started },
                                startOffset: 0, endOffset: outcome.map { _ in 7 }, outcome: outcome, error: nil).insert(db)
            }
            try db.execute(sql: "UPDATE queue_counter SET value = 5 WHERE name = 'failed_attempts'")
        }
        try database.close()

        let store = QueueStore(database: try QueueDatabase.open(path: path))
        let (tally, attemptTable, indexes) = try store.writer.read { db in
            (try Row.fetchAll(db, sql: "SELECT state, jobs, bytes FROM job_tally WHERE jobs > 0 ORDER BY state")
                .map { "\($0["state"] as String) \($0["jobs"] as Int) \($0["bytes"] as Int64)" },
             try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'job_attempt'") ?? "",
             Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'job'")))
        }
        // Pending 100 + 3200, uploading 200 + 400: one tally row; failed 800; uploaded 1600.
        #expect(tally == ["failed 1 800", "pending 4 3900", "uploaded 1 1600"])
        #expect(attemptTable.contains("WITHOUT ROWID"), "\(attemptTable)")
        #expect(indexes.contains("job_unfinished") && !indexes.contains("job_state_id"), "\(indexes)")
        #expect(try store.attempts(of: jobs[3].id).map(\.outcome) == ["failed"])
        #expect(try store.attempts(of: jobs[1].id).first?.startedAt == started)

        // Status tells the transferring job from the one claimed ahead and from those pending.
        let summary = try store.summary(holdsInForce: false)
        #expect(summary.counts[.pending] == 3 && summary.counts[.uploading] == 1, "\(summary.counts)")
        #expect(summary.bytes[.pending] == 100 + 400 + 3200 && summary.bytes[.uploading] == 200, "\(summary.bytes)")
        #expect(summary.active.map(\.id) == [jobs[1].id])
        #expect(summary.waiting[.concurrency] == 1, "\(summary.waiting)")

        // A claim and a start write no tally row; an end moves the job out of `pending`.
        let before = try store.writer.read { db in try Row.fetchAll(db, sql: "SELECT * FROM job_tally ORDER BY state") }
        let claimed = try #require(try store.claimNext())
        #expect(claimed.0.id == jobs[0].id)
        #expect(try store.writer.read { db in try Row.fetchAll(db, sql: "SELECT * FROM job_tally ORDER BY state") } == before)
        #expect(try store.summary(holdsInForce: false).counts[.uploading] == 2)
        try store.writer.write { db in
            _ = try QueueStore.finish(claimed.0.id, attempt: claimed.1.number, event: .failTransient(error: "x", retryAt: started),
                                      outcome: "failed", error: "x", now: started, in: db)
        }
        let after = try store.summary(holdsInForce: false)
        #expect(after.counts[.pending] == 2 && after.counts[.uploading] == 1 && after.counts[.failed] == 2,
                "\(after.counts)")
        // The rebuilt table's trigger still counts failed attempts; its foreign key still takes attempts with the job.
        #expect(after.failedAttempts == 6)
        try store.writer.write { db in _ = try Job.deleteOne(db, key: jobs[3].id.rawValue) }
        #expect(try store.attempts(of: jobs[3].id).isEmpty)
    }
}

extension Job {
    /// Inserts the job into a database migrated up to an earlier version: the columns its table had then.
    func insert(intoEarlierSchemaOf db: Database) throws {
        let columns = Set(try db.columns(in: "job").map(\.name))
        let values = try databaseDictionary.filter { columns.contains($0.key) }
        try db.execute(sql: """
            INSERT INTO job (\(values.keys.map { "\"\($0)\"" }.joined(separator: ", "))) \
            VALUES (\(values.keys.map { _ in "?" }.joined(separator: ", ")))
            """, arguments: StatementArguments(Array(values.values)))
    }
}

/// Migrations v19–v21 (fair share, what droppers hold, their own event numbers) on a queue in use.
struct SharedBoundsMigrationTests {
    @Test("v19–v21 number a backlog in turn per owner, tally what droppers hold, and keep a dropper's numbers valid")
    func migratesAQueueInUse() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        let path = sandbox.state + "/queue.sqlite"
        let database = try DatabaseQueue(path: path)
        try QueueDatabase.migrator.migrate(database, upTo: "v18-fewer-writes")
        let owners: [UInt32?] = [1001, 1001, 1002, 1001, nil, 1002]
        let jobs = owners.enumerated().map { serial, owner in
            var job = QueueHoldsTests.job(size: 1000, state: serial == 5 ? .uploaded : .pending, serial: serial)
            job.ownerUID = owner
            return job
        }
        try database.write { db in for job in jobs { try job.insert(intoEarlierSchemaOf: db) } }
        // Bob reads his events by the global numbers, as before: he has the last one given out.
        let globalLast = try database.read { db in try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'event'") } ?? 0
        try database.close()

        let store = QueueStore(database: try QueueDatabase.open(path: path))
        let turns = try store.writer.read { db in
            Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, fair_key FROM job").map {
                ($0["id"] as String, $0["fair_key"] as Int64)
            })
        }
        #expect([0, 1, 2].map { turns[jobs[[0, 1, 3][$0]].id.rawValue] } == [0, 1, 2], "alice's, in turn: \(turns)")
        #expect(turns[jobs[2].id.rawValue] == 0 && turns[jobs[4].id.rawValue] == 0, "bob's and the queue's own first")
        let fair = try store.writer.read { db in try QueueStore.fairTurns(db) }
        #expect(fair.first { $0.owner == 1001 }.map { ($0.next, $0.runnable) } ?? (0, 0) == (3, 3), "\(fair)")
        // A new photo of bob's goes before alice's backlog, not after it.
        let newer = try FairShareTests.enqueue(store, owner: 1002, serial: 50, destination: "dav")
        #expect(try store.claim(limit: 3, gate: ClaimGate(doors: ["dav": .open])).map(\.0.id).prefix(3)
                == [jobs[0].id, jobs[2].id, jobs[4].id], "by turn 0, oldest first")
        #expect(try store.claim(limit: 2, gate: ClaimGate(doors: ["dav": .open])).map(\.0.id) == [jobs[1].id, newer])
        #expect(try store.holding(of: 1001) == OwnerQuota.Holding(jobs: 3, bytes: 3000))
        // Bob's from before (1,000 bytes) and his new one (10), not his uploaded one.
        #expect(try store.holding(of: 1002) == OwnerQuota.Holding(jobs: 2, bytes: 1010))
        // Bob's own numbers go on after the last global one: what he kept still lies within his sequence.
        let bobs = try store.loggedEvents(after: globalLast, owner: 1002, limit: 100).events
        #expect(!bobs.isEmpty && bobs.allSatisfy { ($0.sequence ?? 0) > globalLast }, "\(bobs.map(\.sequence))")
        let numbers = bobs.compactMap(\.sequence)
        #expect(numbers == Array((globalLast + 1)...(globalLast + Int64(numbers.count))), "no gaps: \(numbers)")
        #expect(try store.eventLogBounds(owner: 1002).last == numbers.last)
        #expect(try store.eventLogBounds(owner: 1003).last == globalLast, "a new dropper starts at the floor")
    }
}
