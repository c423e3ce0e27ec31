import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// The store: claim order, crash recovery, retries, cancel and the summary.
struct QueueStoreTests {
    static func job(_ id: JobID, priority: Int = 0, size: Int64 = 10, sha: String = "x") -> Job {
        let now = Date()
        return Job(id: id, state: .pending, waitingReason: nil, permanent: false, attempts: 0, failures: 0,
                   nextAttemptAt: nil, lastError: nil, file: "/tmp/\(id)", sourcePath: "/tmp/\(id)", originalName: "f",
                   mode: .copy, size: size, sha256: sha + id.rawValue, contentType: "application/octet-stream",
                   modifiedNanoseconds: 0, inode: 1, device: 1, destination: "default", priority: priority, remoteURL: nil,
                   bytesConfirmed: 0, rateBytesPerSecond: 0, meta: [:], patch: nil, patchState: .none, onMetered: nil,
                   resumeState: nil, intakeComplete: true, cancelRequested: false, createdAt: now, updatedAt: now)
    }

    static func store(with jobs: [Job]) throws -> QueueStore {
        let store = QueueStore(database: try QueueDatabase.inMemory())
        try store.writer.write { db in for job in jobs { try job.insert(db) } }
        return store
    }

    @Test("claims go by priority, then oldest first, and each claim opens an attempt")
    func claimOrder() throws {
        let base = Date(timeIntervalSince1970: 1_800_000_000)
        let ids = (0..<4).map { JobID.generate(at: base.addingTimeInterval(Double($0))) }
        let store = try Self.store(with: [Self.job(ids[0]), Self.job(ids[1], priority: 5), Self.job(ids[2]),
                                          Self.job(ids[3], priority: 5)])
        var order: [JobID] = []
        while let (job, attempt) = try store.claimNext() {
            order.append(job.id)
            #expect(job.state == .uploading && attempt.number == 1 && attempt.startOffset == 0)
        }
        #expect(order == [ids[1], ids[3], ids[0], ids[2]])
    }

    @Test("a retry time within the database's millisecond precision of now never makes a claim fail")
    func retryTimePrecision() throws {
        let base = Date(timeIntervalSince1970: 1_800_000_000.9996)
        for offset in [0.00001, 0.0001, 0.0002, 0.0003] {
            let id = JobID.generate()
            var failed = Self.job(id)
            failed.state = .failed
            failed.nextAttemptAt = base.addingTimeInterval(offset)
            let store = try Self.store(with: [failed])
            let claimed = try store.claimNext(now: base)
            #expect(claimed == nil || claimed?.0.id == id)
        }
    }

    @Test("a job that waits for its retry time is not claimed before it; then it is")
    func retryTime() throws {
        let id = JobID.generate()
        let store = try Self.store(with: [Self.job(id)])
        let (claimed, attempt) = try #require(try store.claimNext())
        let retryAt = Date().addingTimeInterval(60)
        try store.finish(claimed.id, attempt: attempt.number, event: .failTransient(error: "503", retryAt: retryAt),
                         outcome: "failed", error: "503")
        #expect(try store.claimNext() == nil)
        #expect(try store.roundView().nextDue != nil)
        let (again, second) = try #require(try store.claimNext(now: retryAt.addingTimeInterval(1)))
        #expect(again.id == id && second.number == 2 && again.failures == 1)
    }

    @Test("uploading jobs of a dead process go back to pending and keep their resume state")
    func recovery() throws {
        let id = JobID.generate()
        let store = try Self.store(with: [Self.job(id)])
        let (job, _) = try #require(try store.claimNext())
        try store.recordProgress(job.id, bytesConfirmed: 5, resumeState: "{\"url\":\"x\"}", rate: 1)
        let recovered = try store.recoverInterrupted()
        #expect(recovered == [id])
        let after = try #require(try store.job(id))
        #expect(after.state == .pending && after.bytesConfirmed == 5 && after.resumeState == "{\"url\":\"x\"}")
        let attempts = try store.attempts(of: id)
        #expect(attempts.map(\.outcome) == ["interrupted"])
        #expect(attempts.first?.endOffset == 5)
    }

    @Test("ids made in one burst are unique, valid UUIDv7 and sort in the order they were made")
    func idsAreMonotonic() {
        let ids = (0..<10_000).map { _ in JobID.generate() }
        #expect(ids == ids.sorted())
        #expect(Set(ids).count == ids.count)
        #expect(ids.allSatisfy { JobID($0.rawValue) == $0 && Array($0.rawValue)[14] == "7" })
        #expect(ids.allSatisfy { "89ab".contains(Array($0.rawValue)[19]) })
    }

    @Test("retry makes failed jobs pending; retrying a pending job is refused with a clear error")
    func retry() throws {
        let ids = [JobID.generate(), JobID.generate()]
        let store = try Self.store(with: ids.map { Self.job($0) })
        try store.apply(.failPermanent(error: "HTTP 403"), to: ids[0])
        #expect(try store.retry([ids[0]]) == [ids[0]])
        #expect(try store.job(ids[0])?.state == .pending)
        #expect(throws: UploadQueueError.self) { try store.retry([ids[1]]) }
        #expect(throws: UploadQueueError.self) { try store.retry([JobID.generate()]) }
    }

    @Test("cancel lets an idle job go (the row stays until its file is kept) and only flags a transferring one")
    func cancel() throws {
        let ids = [JobID.generate(), JobID.generate()]
        let store = try Self.store(with: ids.map { Self.job($0) })
        _ = try store.claimNext()
        let (flagged, _) = try store.requestCancel(ids[0], workerRunning: true)
        #expect(flagged == .requested)
        #expect(try store.roundView().cancelRequests == [ids[0]])
        let (removed, _) = try store.requestCancel(ids[1], workerRunning: true)
        #expect(removed == .removed)
        #expect(try store.job(ids[1]) != nil, "the caller keeps the file first, then removes the row")
        #expect(try store.removeCancelled(ids[1]) != nil)
        #expect(try store.job(ids[1]) == nil)
        #expect(try store.removeCancelled(ids[0]) != nil)
        #expect(try store.jobs().isEmpty)
    }

    @Test("the summary counts jobs and bytes per state and lists active transfers")
    func summary() throws {
        let ids = (0..<4).map { _ in JobID.generate() }
        let store = try Self.store(with: ids.enumerated().map { Self.job($1, size: Int64(100 * ($0 + 1))) })
        let (active, attempt) = try #require(try store.claimNext())
        try store.recordProgress(active.id, bytesConfirmed: 40, resumeState: nil, rate: 10)
        let (done, doneAttempt) = try #require(try store.claimNext())
        try store.finish(done.id, attempt: doneAttempt.number, event: .succeed, outcome: "uploaded", error: nil)
        _ = attempt
        let summary = try store.summary()
        #expect(summary.counts[.pending] == 2 && summary.counts[.uploading] == 1 && summary.counts[.uploaded] == 1)
        #expect(summary.bytes[.uploading] == active.size)
        #expect(summary.active.map(\.id) == [active.id])
        #expect(summary.active.first?.bytesConfirmed == 40)
    }

    @Test("several processes opening a new queue at once all succeed (the migration race is retried)")
    func concurrentCreation() async throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        let path = sandbox.state + "/queue.sqlite"
        let opened = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<8 {
                group.addTask { try await BlockingWork.run { _ = try QueueDatabase.open(path: path); return true } }
            }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(opened == 8)
        let store = QueueStore(database: try QueueDatabase.open(path: path))
        #expect(try store.jobs().isEmpty)
    }

    @Test("the database is WAL with synchronous=FULL and private file modes")
    func durabilitySettings() throws {
        let sandbox = try Sandbox()
        _ = try UploadQueue(configuration: try sandbox.configuration())
        let database = try QueueDatabase.open(path: sandbox.state + "/queue.sqlite")
        let (mode, readerSync) = try database.writer.read { db in
            (try String.fetchOne(db, sql: "PRAGMA journal_mode"), try Int.fetchOne(db, sql: "PRAGMA synchronous"))
        }
        let writerSync = try database.writer.writeWithoutTransaction { db in
            try Int.fetchOne(db, sql: "PRAGMA synchronous")
        }
        #expect(mode == "wal")
        #expect(readerSync == 2)
        #expect(writerSync == 2, "the connection that commits must run with synchronous = FULL")
        var info = stat()
        #expect(stat(sandbox.state + "/queue.sqlite", &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(stat(sandbox.state, &info) == 0 && info.st_mode & 0o777 == 0o700)
    }

    @Test("a job reads back exactly as it was written, every column set or empty; a value this version cannot read throws")
    func rowRoundTrip() throws {
        let at = Date(timeIntervalSince1970: 1_800_000_000)
        var full = Self.job(JobID.generate(at: at))
        full.createdAt = at
        full.updatedAt = at.addingTimeInterval(7)
        full.state = .failed
        full.waitingReason = .backoff
        full.permanent = true
        full.attempts = 3
        full.failures = 2
        full.nextAttemptAt = at.addingTimeInterval(60)
        full.lastError = "503 from https://example.invalid/x"
        full.remoteURL = "https://example.invalid/x"
        full.bytesConfirmed = 5
        full.rateBytesPerSecond = 9
        full.meta = ["album": "Field 7", "note": "ünïcode \"quoted\""]
        full.patch = PatchTarget(url: "https://app.invalid/p/1", method: "PUT", body: "{\"a\":1}", headers: ["X-A": "b"])
        full.patchState = .pending
        full.onMetered = "allow-below:1MiB"
        full.sourceAfterUpload = "move:/srv/done"
        full.resumeState = "{\"offset\":5}"
        full.cancelRequested = true
        full.ownerUID = 1000
        full.lane = "album-7"
        full.laneSequence = 4
        full.afterMode = .settled
        full.blockedBy = JobID.generate(at: at)
        full.group = "trip"
        var bare = Self.job(JobID.generate(at: at))
        bare.createdAt = at
        bare.updatedAt = at
        let (counted, owned, flagged) = (Self.job(JobID.generate(at: at)), Self.job(JobID.generate(at: at)),
                                         Self.job(JobID.generate(at: at)))
        let store = try Self.store(with: [full, bare, counted, owned, flagged])
        #expect(full.meteredBelow == Int64(1_048_576))
        #expect(try store.writer.read { db in try Job.fetchOne(db, key: full.id.rawValue) } == full)
        #expect(try store.writer.read { db in try Job.fetchOne(db, key: bare.id.rawValue) } == bare)
        // Only the order writes blocked_kind; the claim and every end read jobs by position (`Job.selection`): the
        // same job as by name, whatever order the table's migrations gave its columns.
        try store.writer.write { db in
            try db.execute(sql: "UPDATE job SET blocked_kind = 'lane' WHERE id = ?", arguments: [full.id.rawValue])
        }
        full.blockedKind = .lane
        for job in [full, bare] {
            let (named, selected) = try store.writer.read { db in
                (try Job.fetchOne(db, key: job.id.rawValue), try Job.read(job.id, in: db))
            }
            #expect(named == job)
            #expect(selected == job)
        }
        #expect(try store.writer.read { db in try Job.read(JobID(trusted: "no such job"), in: db) } == nil)
        // Read by name, a column the query left out is nil where the job may lack it, and an error where it may not.
        let partial = try store.writer.read { db in
            try Row.fetchOne(db, sql: "SELECT id, state FROM job WHERE id = ?", arguments: [full.id.rawValue])
        }
        #expect(throws: DatabaseError.self) { try Job(row: try #require(partial)) }
        let lacking = try store.writer.read { db -> Job? in
            let columns = Job.Columns.allCases.filter { $0 != .lane && $0 != .group }.map { "\"\($0.rawValue)\"" }
            return try Row.fetchOne(db, sql: "SELECT \(columns.joined(separator: ", ")) FROM job WHERE id = ?",
                                    arguments: [full.id.rawValue]).map(Job.init(row:))
        }
        #expect(lacking?.lane == nil && lacking?.group == nil && lacking?.id == full.id)

        try store.writer.write { db in
            try db.execute(sql: "UPDATE job SET state = 'teleported' WHERE id = ?", arguments: [bare.id.rawValue])
            try db.execute(sql: "UPDATE job SET created_at = 'yesterday' WHERE id = ?", arguments: [full.id.rawValue])
        }
        // Text where a number or a flag belongs: read as 0 or false, a damaged owner would be root's.
        try store.writer.write { db in
            try db.execute(sql: "UPDATE job SET attempts = 'many' WHERE id = ?", arguments: [counted.id.rawValue])
            try db.execute(sql: "UPDATE job SET owner_uid = 'x' WHERE id = ?", arguments: [owned.id.rawValue])
            try db.execute(sql: "UPDATE job SET cancel_requested = 'yes' WHERE id = ?",
                           arguments: [flagged.id.rawValue])
        }
        #expect(throws: DatabaseError.self) { try store.writer.read { db in try Job.fetchOne(db, key: bare.id.rawValue) } }
        // A value this version cannot read is the same error either way, naming its column.
        for (id, column) in [(bare.id, "state"), (full.id, "created_at"), (counted.id, "attempts"),
                             (owned.id, "owner_uid"), (flagged.id, "cancel_requested")] {
            for selected in [false, true] {
                do {
                    _ = try store.writer.read { db in
                        selected ? try Job.read(id, in: db) : try Job.fetchOne(db, key: id.rawValue)
                    }
                    Issue.record("\(column) read by \(selected ? "position" : "name") did not fail")
                } catch let error as DatabaseError {
                    #expect(error.resultCode == .SQLITE_MISMATCH, "\(error)")
                    #expect(error.message?.contains("column \(column) ") == true, "\(error)")
                }
            }
        }
    }

    @Test("dates are stored as the same text GRDB writes, to the millisecond")
    func storedDateText() {
        var generator = SystemRandomNumberGenerator()
        var dates = [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 951_782_400.9999),  // 2000-02-29
                     Date(timeIntervalSince1970: 4_107_542_399.999), Date(timeIntervalSince1970: 1_800_000_000.0005),
                     // Outside what the fast path takes: the formatter's own text.
                     Date(timeIntervalSince1970: -1.0005), Date(timeIntervalSince1970: -12_219_292_800),
                     Date(timeIntervalSince1970: 253_402_300_800), Date.distantFuture, Date.distantPast]
        for _ in 0..<20_000 {
            // 1970 to 2200, with sub-millisecond parts, and some right at a millisecond's edge.
            let seconds = Double.random(in: 0..<7_258_118_400, using: &generator)
            dates.append(Date(timeIntervalSince1970: seconds))
            dates.append(Date(timeIntervalSince1970: (seconds * 1000).rounded(.down) / 1000))
            dates.append(Date(timeIntervalSinceReferenceDate: Date().timeIntervalSinceReferenceDate
                              + Double.random(in: -1e6...1e6, using: &generator)))
        }
        let mismatches = dates.filter { date in
            String.fromDatabaseValue(date.databaseValue) != StoredDate.text(date)
        }
        #expect(mismatches.count == 0, "\(mismatches.count) differ; first: \(mismatches.first.map { "\($0.timeIntervalSince1970) GRDB \(String.fromDatabaseValue($0.databaseValue) ?? "") ours \(StoredDate.text($0))" } ?? "")")
    }
}
