import Foundation
import Testing
@testable import UploadQueue

/// Steps of the wall clock: noticed against the boot-time clock, and due times moved with them.
struct WallClockWatchTests {
    @Test("a wall clock that keeps pace is no step; a jump either way is, by its size; jitter and slewing are not")
    func steps() {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        var watch = WallClockWatch(wall: start, bootNanoseconds: 5_000_000_000)
        #expect(watch.observe(wall: start.addingTimeInterval(10), bootNanoseconds: 15_000_000_000) == nil)
        #expect(watch.observe(wall: start.addingTimeInterval(10.5), bootNanoseconds: 15_000_000_000) == nil,
                "half a second of difference is jitter or slewing")
        let back = watch.observe(wall: start.addingTimeInterval(20.5 - 3600), bootNanoseconds: 25_000_000_000)
        #expect(back.map { abs($0.seconds + 3600) < 0.001 } == true, "\(String(describing: back))")
        #expect(back?.oldClockUntil == start.addingTimeInterval(20.5), "the old clock ran until the look")
        let forwards = watch.observe(wall: start.addingTimeInterval(30.5 + 7200 - 3600), bootNanoseconds: 35_000_000_000)
        #expect(forwards.map { abs($0.seconds - 7200) < 0.001 } == true, "\(String(describing: forwards))")
        #expect(watch.observe(wall: start.addingTimeInterval(31.5 + 3600), bootNanoseconds: 36_000_000_000) == nil,
                "the watch goes on from the stepped clock")
    }

    @Test("rebasing moves the due times written under the old clock by the step, to the millisecond; older rows stay")
    func rebase() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let first = try await queue.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 100, seed: 401))
        let second = try await queue.enqueue(try sandbox.makeFile(sandbox.root + "/b.jpg", size: 100, seed: 403))
        let due = Date(timeIntervalSince1970: 1_800_000_000.25)
        let written = Date(timeIntervalSince1970: 1_799_999_990)
        let beforeBoot = Date(timeIntervalSince1970: 1_700_000_000)
        try await queue.store.writer.write { db in
            try db.execute(sql: "UPDATE job SET next_attempt_at = ?, updated_at = ? WHERE id = ?",
                           arguments: [due, written, first.rawValue])
            try db.execute(sql: "UPDATE job SET next_attempt_at = ?, updated_at = ? WHERE id = ?",
                           arguments: [due, beforeBoot, second.rawValue])
        }
        let era = Date(timeIntervalSince1970: 1_799_999_000)
        try queue.store.rebaseDueTimes(by: -3600, writtenFrom: era, through: era.addingTimeInterval(3600))
        let moved = try #require(try await queue.job(first))
        #expect(abs(try #require(moved.nextAttemptAt).timeIntervalSince(due) + 3600) < 0.002, "\(moved)")
        #expect(abs(moved.updatedAt.timeIntervalSince(written) + 3600) < 0.002, "written under the same clock, moved too")
        #expect(try await queue.job(second)?.nextAttemptAt == due, "written before this clock's era: right as it is")
        try queue.store.rebaseDueTimes(by: 7200.5, writtenFrom: era.addingTimeInterval(-3600), through: era)
        let again = try #require(try await queue.job(first)?.nextAttemptAt)
        #expect(abs(again.timeIntervalSince(due) - 3600.5) < 0.002, "\(again)")
    }
}

/// The real daemon under a shifted wall clock (the LD_PRELOAD shim built by the test set-up moves only
/// CLOCK_REALTIME, gettimeofday and time): a retry keeps its wait whichever way the clock steps.
@Suite(.serialized)
struct ClockStepTests {
    /// A daemon on this process's wall clock, under a shim that can step it.
    func daemon(_ sandbox: Sandbox, clock: ClockShim) throws -> DaemonProcess {
        try DaemonProcess(sandbox: sandbox, environment: clock.environment)
    }

    /// One job to the recorder whose first answer is a 503, retried after about 10 s; returns once that failure
    /// is recorded.
    func failOnce(_ sandbox: Sandbox, _ recorder: RecorderSession) async throws -> (JobID, QueueStore) {
        try await recorder.script([["status": 503, "body": "down for maintenance"]])
        let path = try sandbox.makeFile(sandbox.root + "/in/p.jpg", size: 20_000, seed: 402)
        let id = try await BinaryRunner.enqueue([path, "--destination", "api", "--config", sandbox.configPath])
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        return (id, store)
    }

    func sandbox(_ recorder: RecorderSession) throws -> Sandbox {
        try Sandbox(config: """
            [destinations.api]
            protocol = "http-put"
            url = "\(recorder.url("/{job_id}-{name}"))"
            """, retryInterval: "10s")
    }

    /// A daemon whose one job failed once (a retry about 10 s away) when the wall clock steps by `seconds`.
    struct Stepped {
        /// Kept for the run: its folder goes when it does.
        let sandbox: Sandbox
        let recorder: RecorderSession
        let daemon: DaemonProcess
        let store: QueueStore
        let id: JobID
        /// When the failure was seen, just before the step.
        let failedAt: ContinuousClock.Instant
    }

    func failThenStep(by seconds: Int) async throws -> Stepped {
        let recorder = try RecorderSession()
        let sandbox = try sandbox(recorder)
        let (id, store) = try await failOnce(sandbox, recorder)
        let clock = try ClockShim(file: sandbox.root + "/clock-offset")
        let daemon = try daemon(sandbox, clock: clock)
        let failed = try await eventually(timeout: .seconds(20)) { try store.job(id)?.state == .failed }
        #expect(failed, "daemon log:\n\(daemon.log.suffix(2000))")
        let failedAt = ContinuousClock.now
        try clock.set(offset: Double(seconds))
        return Stepped(sandbox: sandbox, recorder: recorder, daemon: daemon, store: store, id: id, failedAt: failedAt)
    }

    @Test("the clock steps back an hour after a failure: the retry still comes after about 10 s, not an hour later")
    func stepBack() async throws {
        let run = try await failThenStep(by: -3600)
        let uploaded = try await eventually(timeout: .seconds(40)) { try run.store.job(run.id)?.state == .uploaded }
        #expect(uploaded, "daemon log:\n\(run.daemon.log.suffix(3000))")
        #expect(ContinuousClock.now - run.failedAt < .seconds(30))
        #expect(run.daemon.log.contains("the wall clock stepped back by"), "daemon log:\n\(run.daemon.log.suffix(3000))")
        #expect(try await run.recorder.requests().count == 2)
        #expect(await run.daemon.terminate() < .seconds(10))
    }

    @Test("the clock steps forwards an hour after a failure: the retry keeps its wait instead of firing at once")
    func stepForwards() async throws {
        let run = try await failThenStep(by: 3600)
        let noticed = await eventually(timeout: .seconds(10)) { run.daemon.log.contains("the wall clock stepped forwards by") }
        #expect(noticed, "daemon log:\n\(run.daemon.log.suffix(3000))")
        if ContinuousClock.now - run.failedAt < .seconds(7) {
            #expect(try await run.recorder.requests().count == 1, "the retry did not fire at the step")
            #expect(try run.store.job(run.id)?.state == .failed)
        }
        let uploaded = try await eventually(timeout: .seconds(40)) { try run.store.job(run.id)?.state == .uploaded }
        #expect(uploaded, "daemon log:\n\(run.daemon.log.suffix(3000))")
        #expect(ContinuousClock.now - run.failedAt > .seconds(7), "the retry waited out its backoff")
        #expect(await run.daemon.terminate() < .seconds(10))
    }
}
