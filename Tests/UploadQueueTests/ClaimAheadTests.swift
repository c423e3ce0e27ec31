import Foundation
import GRDB
import Logging
import Testing
@testable import UploadQueue

/// Claiming ahead of the free slots: a transfer that ends hands its slot to a job already claimed, without waiting
/// for the round that records its end; what waits claimed is told apart from what transfers (status, the event
/// log, the attempts), and goes back to the queue when the runner stops, the gate changes or a crash cut it short.
@Suite(.serialized)
struct ClaimAheadTests {
    /// A scheduler on an in-memory queue of `count` jobs of one real 8 KiB file each, PUT to nginx under a folder
    /// of its own, `concurrency` at once; the rounds are the test's to call.
    struct Harness {
        let store: QueueStore
        let scheduler: Scheduler
        let engine: TransferEngine
        let folder: String
        let ids: [JobID]
        let sandbox: Sandbox

        /// `slow`: all transfers together at 64 KiB/s, so that those that start are still running when looked at.
        init(count: Int, concurrency: Int = 2, size: Int = 8192, slow: Bool = false) throws {
            sandbox = try Sandbox()
            let folder = "ahead-\(UUID().uuidString.prefix(8))"
            self.folder = folder
            let configuration = try ConfigurationLoader.parse("""
                state_dir = "\(sandbox.root)/state"
                [bandwidth]
                unmetered = "\(slow ? "64KiB" : "0")"
                [limits]
                concurrency = \(concurrency)
                [destinations.dav]
                protocol = "http-put"
                url = "\(try TestServers.davURL())/\(folder)/{job_id}"
                on_metered = "defer"
                """, file: "/etc/uploadq/test.toml", baseDirectory: "/tmp")
            var jobs: [Job] = []
            for index in 0..<count {
                let file = try sandbox.makeFile(sandbox.root + "/p\(index).jpg", size: size, seed: UInt64(index + 1))
                let fingerprint = try FileFingerprint.of(path: file)
                var job = QueueHoldsTests.job(size: Int64(size), serial: index)
                job.file = file
                job.mode = .reference
                job.inode = fingerprint.inode
                job.device = fingerprint.device
                job.modifiedNanoseconds = fingerprint.modifiedNanoseconds
                let descriptor = open(file, O_RDONLY)
                defer { close(descriptor) }
                job.sha256 = try SHA256Digest.ofFile(descriptor: descriptor, path: file, size: fingerprint.size)
                jobs.append(job)
            }
            ids = jobs.map(\.id)
            store = try QueueStoreTests.store(with: jobs)
            let engine = TransferEngine()
            self.engine = engine
            let uploaders = configuration.destinations.mapValues { UploadQueue.uploader(for: $0, engine: engine) }
            scheduler = Scheduler(configuration: configuration, store: store, events: EventHub(), uploaders: uploaders,
                                  logger: Logger(label: "test"), engine: engine,
                                  monitor: LinkMonitor(configuration: configuration, networkManager: nil))
        }

        /// The files nginx holds in the harness's folder.
        func stored() throws -> Int {
            let path = try TestServers.davRoot() + "/" + folder
            return ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).count
        }

        /// The event log's kinds for `id`, in order.
        func events(_ id: JobID) throws -> [String] {
            try store.writer.read { db in
                try String.fetchAll(db, sql: "SELECT kind FROM event WHERE job_id = ? ORDER BY seq", arguments: [id.rawValue])
            }
        }

        func stop() async {
            let stopper = Task { await scheduler.run() }
            stopper.cancel()
            await stopper.value
            engine.shutdown()
        }
    }

    @Test("a transfer that ends hands its slot to a job claimed ahead at once: no round runs, yet every job is sent")
    func handOn() async throws {
        let harness = try Harness(count: 6, concurrency: 2)
        // One round: two transfers start, four jobs (twice the slots) wait claimed for the next free slots.
        try await harness.scheduler.round()
        let claimed = try harness.store.jobs(state: .uploading)
        #expect(claimed.count == 6)
        #expect(claimed.filter { $0.waitingReason == .concurrency }.count == 4)
        // No other round: the transfers that end hand their slots on, and the four claimed ahead reach nginx all
        // the same.
        let allStored = try await eventually(timeout: .seconds(20)) { try harness.stored() == 6 }
        #expect(allStored, "\((try? harness.stored()) ?? -1) stored")
        // The next round writes the starts, then the ends, in order.
        _ = try await eventually(timeout: .seconds(20)) {
            try await harness.scheduler.round()
            return try harness.store.jobs(state: .uploaded).count == 6
        }
        for id in harness.ids {
            let job = try #require(try harness.store.job(id))
            #expect(job.state == .uploaded && job.attempts == 1 && job.waitingReason == nil, "\(job)")
            let attempts = try harness.store.attempts(of: id)
            #expect(attempts.count == 1 && attempts.first?.outcome == "uploaded", "\(attempts)")
            if let attempt = attempts.first, let ended = attempt.endedAt { #expect(attempt.startedAt <= ended) }
            #expect(try harness.events(id) == ["enqueued", "started", "uploaded"], "one start, told when it started")
        }
        // Read in the log's order, never more transfers ran than there are slots: a slot's start is logged after
        // the end that handed it on.
        let log = try harness.store.writer.read { db in
            try Row.fetchAll(db, sql: "SELECT kind, job_id FROM event WHERE kind IN ('started', 'uploaded') ORDER BY seq")
        }
        var running = Set<String>()
        var most = 0
        for row in log {
            if row["kind"] == "started" { running.insert(row["job_id"]) } else { running.remove(row["job_id"]) }
            most = max(most, running.count)
        }
        #expect(most <= 2, "\(most) transfers at once by the log's order")
        await harness.stop()
    }

    @Test("status tells what transfers from what waits claimed for the next slot; a stop gives those back unstarted")
    func statusAndStop() async throws {
        // Two 1 MiB transfers at 64 KiB/s keep both slots busy while status is read.
        let harness = try Harness(count: 7, concurrency: 2, size: 1 << 20, slow: true)
        try await harness.scheduler.round()
        let summary = try harness.store.summary()
        let transferring = try harness.store.jobs(state: .uploading).filter { $0.waitingReason == nil }
        let ahead = try harness.store.jobs(state: .uploading).filter { $0.waitingReason == .concurrency }
        #expect(transferring.count == 2 && ahead.count == 4, "the seventh is pending")
        #expect(summary.counts[.uploading] == 2 && summary.counts[.pending] == 5,
                "status counts only what transfers as uploading: \(summary.counts)")
        #expect(summary.bytes[.uploading] == 2 << 20 && summary.bytes[.pending] == 5 << 20, "\(summary.bytes)")
        #expect(Set(summary.active.map(\.id)) == Set(transferring.map(\.id)), "no job claimed ahead is a transfer")
        #expect(summary.waiting[.concurrency] == 5, "they wait for a slot: \(summary.waiting)")
        for job in ahead {
            #expect(try harness.events(job.id) == ["enqueued"], "no `started` before it starts")
            #expect(try harness.store.attempts(of: job.id).isEmpty, "no attempt before it starts")
        }
        await harness.stop()
        for job in ahead {
            let back = try #require(try harness.store.job(job.id))
            #expect(back.state == .pending && back.attempts == 0 && back.waitingReason == nil, "\(back)")
        }
    }

    @Test("a gate that narrows (the link turns metered) gives the jobs claimed ahead back in the next round")
    func gateChange() async throws {
        let harness = try Harness(count: 8, concurrency: 2, size: 1 << 20, slow: true)
        try await harness.scheduler.round()
        let ahead = try harness.store.jobs(state: .uploading).filter { $0.waitingReason == .concurrency }
        #expect(ahead.count == 4)
        try harness.store.setSetting(LinkMonitor.overrideSetting, Configuration.LinkOverride.metered.rawValue)
        try await harness.scheduler.round()
        for job in ahead {
            let back = try #require(try harness.store.job(job.id))
            // Back in the queue, or (its slot freed meanwhile) started before the round saw the link: never both.
            #expect(back.state != .uploading || back.waitingReason == nil, "\(back)")
            if back.state == .pending {
                let events = try harness.events(job.id)
                #expect(back.attempts == 0 && events == ["enqueued"], "\(events)")
            }
        }
        #expect(try harness.store.jobs(state: .uploading).allSatisfy { $0.waitingReason == nil },
                "nothing waits claimed through a narrowed gate")
        await harness.stop()
    }

    @Test("recordStart's one statement is the lifecycle's start: the same job after it, an attempt, a `started` event")
    func startIsTheLifecycles() throws {
        var stored = QueueHoldsTests.job(size: 8192, serial: 1)
        stored.attempts = 2
        stored.failures = 1
        stored.bytesConfirmed = 4096
        let store = try QueueStoreTests.store(with: [stored])
        let now = Date(timeIntervalSince1970: 1_800_000_100)
        let claimed = try store.writer.write { db in
            try QueueStore.claim(limit: 1, gate: nil, now: now, aheadUpTo: 1 << 20, in: db)
        }
        let (promised, attempt) = try #require(claimed.first)
        let before = try #require(try store.job(stored.id, holdsInForce: false))
        #expect(before.state == .uploading && before.waitingReason == .concurrency && before.attempts == 2)
        #expect(try store.attempts(of: stored.id).isEmpty)
        var expected = before.lifecycle
        try expected.apply(.start)
        let startedAt = now.addingTimeInterval(5)
        #expect(try store.writer.write { db in
            try QueueStore.recordStart(stored.id, at: startedAt, offset: promised.bytesConfirmed, in: db)
        })
        let after = try #require(try store.job(stored.id, holdsInForce: false))
        #expect(after.lifecycle == expected, "\(after.lifecycle) against \(expected)")
        #expect(after.updatedAt == startedAt)
        #expect(promised.attempts == after.attempts && attempt.number == after.attempts, "what the claim promised")
        let attempts = try store.attempts(of: stored.id)
        #expect(attempts.count == 1 && attempts.first?.number == 3 && attempts.first?.startOffset == 4096
                    && attempts.first?.startedAt == startedAt, "\(attempts)")
        let started = try store.writer.read { db in
            try String.fetchAll(db, sql: "SELECT fields FROM event WHERE job_id = ? AND kind = 'started'",
                                arguments: [stored.id.rawValue])
        }
        #expect(started.count == 1 && started.first?.contains("\"attempt\":3") == true, "\(started)")
        // A job started once is not started again.
        #expect(try store.writer.write { db in
            try QueueStore.recordStart(stored.id, at: startedAt, offset: 0, evenIfCancelled: true, in: db)
        } == false)
        #expect(try store.job(stored.id, holdsInForce: false)?.lifecycle == expected)
    }

    @Test("a job claimed ahead and flagged for cancel does not start in a round; a slot already handed to it records it")
    func flaggedStart() throws {
        let jobs = (0..<2).map { QueueHoldsTests.job(size: 8192, serial: $0) }
        let store = try QueueStoreTests.store(with: jobs)
        let now = Date(timeIntervalSince1970: 1_800_000_100)
        let claimed = try store.writer.write { db in
            try QueueStore.claim(limit: 2, gate: nil, now: now, aheadUpTo: 1 << 20, in: db)
        }
        #expect(claimed.count == 2)
        for job in jobs { _ = try store.requestCancel(job.id, workerRunning: true) }
        // A round's start: the flag wins, nothing is written.
        #expect(try store.writer.write { db in try QueueStore.recordStart(jobs[0].id, at: now, offset: 0, in: db) } == false)
        let waiting = try #require(try store.job(jobs[0].id, holdsInForce: false))
        #expect(waiting.waitingReason == .concurrency && waiting.attempts == 0 && waiting.cancelRequested)
        // A slot handed on before the flag was seen: the transfer runs, so its start is written (its cancel stops it).
        #expect(try store.writer.write { db in
            try QueueStore.recordStart(jobs[1].id, at: now, offset: 0, evenIfCancelled: true, in: db)
        })
        #expect(try store.job(jobs[1].id, holdsInForce: false)?.attempts == 1)
    }

    @Test("a job claimed ahead that is cancelled leaves without starting; a crash's recovery gives the others back")
    func cancelAndRecovery() async throws {
        let harness = try Harness(count: 7, concurrency: 2, size: 1 << 20, slow: true)
        try await harness.scheduler.round()
        let ahead = try harness.store.jobs(state: .uploading).filter { $0.waitingReason == .concurrency }
        #expect(ahead.count == 4)
        let cancelled = try #require(ahead.first)
        let (outcome, _) = try harness.store.requestCancel(cancelled.id, workerRunning: true)
        #expect(outcome == .requested)
        try await harness.scheduler.round()
        #expect(try harness.store.job(cancelled.id) == nil, "removed")
        #expect(try harness.events(cancelled.id) == ["enqueued", "cancelled"], "never started")
        // A runner killed now: the next start's recovery puts what was claimed ahead back, no attempt counted.
        let left = try harness.store.jobs(state: .uploading).filter { $0.waitingReason == .concurrency }
        let recovered = try harness.store.recoverInterrupted()
        for job in left {
            #expect(recovered.contains(job.id))
            let back = try #require(try harness.store.job(job.id, holdsInForce: false))
            #expect(back.state == .pending && back.attempts == 0 && back.waitingReason == nil, "\(back)")
            #expect(try harness.store.attempts(of: job.id).isEmpty)
        }
        #expect(left.count == 3, "the others claimed ahead")
        await harness.stop()
    }
}
