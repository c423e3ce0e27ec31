import Foundation
import Testing
@testable import UploadQueue

/// The device constraints end to end, against tuspyserver and nginx through the fault proxy (which counts the
/// bytes on the wire): a fake power-supply tree, the metered budget, and, under the clock shim, a window that
/// closes and a timetable that slows down mid-transfer.
@Suite(.serialized)
struct DeviceConstraintDaemonTests {
    /// A power-supply tree in the sandbox: mains and a battery.
    func powerTree(_ sandbox: Sandbox, online: Bool, capacity: Int) throws {
        try setPower(sandbox, online: online, capacity: capacity)
        try "Mains\n".write(toFile: sandbox.root + "/power/AC/type", atomically: true, encoding: .utf8)
        try "Battery\n".write(toFile: sandbox.root + "/power/BAT0/type", atomically: true, encoding: .utf8)
    }

    func setPower(_ sandbox: Sandbox, online: Bool? = nil, capacity: Int? = nil) throws {
        for name in ["AC", "BAT0"] {
            try FileManager.default.createDirectory(atPath: sandbox.root + "/power/" + name, withIntermediateDirectories: true)
        }
        if let online {
            try "\(online ? 1 : 0)\n".write(toFile: sandbox.root + "/power/AC/online", atomically: true, encoding: .utf8)
            try (online ? "Charging\n" : "Discharging\n")
                .write(toFile: sandbox.root + "/power/BAT0/status", atomically: true, encoding: .utf8)
        }
        if let capacity {
            try "\(capacity)\n".write(toFile: sandbox.root + "/power/BAT0/capacity", atomically: true, encoding: .utf8)
        }
    }

    func tusSandbox(_ proxy: FaultProxy, chunk: String, extra: String = "", destinationKeys: String = "",
                    bandwidth: Int64 = 0, bandwidthKeys: String = "", concurrency: Int = 4) throws -> Sandbox {
        try Sandbox(config: """
            [destinations.tus]
            protocol = "tus"
            url = "\(proxy.url("/files/"))"
            chunk_size = "\(chunk)"
            \(destinationKeys)
            \(extra)
            """, bandwidth: bandwidth, concurrency: concurrency, bandwidthKeys: bandwidthKeys)
    }

    @Test("unplugged, a 200 MiB tus upload stops within one chunk; plugged back it resumes from its offset, nothing lost")
    func acPower() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        let sandbox = try tusSandbox(proxy, chunk: "8MiB", extra: """
            [power]
            require = "ac"
            supply_dir = "power"
            """, bandwidth: 40 << 20)
        try powerTree(sandbox, online: true, capacity: 80)
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeRandomFile(sandbox.root + "/clip.mov", size: 200 << 20),
                                           to: "tus")
        _ = try await running.wait(id) { $0.bytesConfirmed >= 24 << 20 }
        let before = try await proxy.bodyBytes()
        try setPower(sandbox, online: false)
        let stopped = try await running.wait(id, timeout: .seconds(10)) { $0.state == .pending }
        try await Task.sleep(for: .seconds(1.5))
        let after = try await proxy.bodyBytes()
        print("power test: \(after - before) bytes sent after the charger was pulled (chunk \(8 << 20))")
        #expect(after - before <= 8 << 20, "\(after - before) bytes went out after the charger was pulled")
        let held = try #require(try running.queue.store.job(id))
        #expect(held.waitingReason == .power, "\(held.waitingHolds)")
        #expect(held.waitingHolds.first?.detail?.contains("on battery (80%)") == true, "\(held.waitingHolds)")
        #expect(held.bytesConfirmed % (8 << 20) == 0, "stopped at a chunk boundary")
        let status = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let power = try #require((try status.json() as? [String: Any])?["power"] as? [String: Any])
        #expect(power["external"] as? Bool == false && power["battery_percent"] as? Int == 80)

        try setPower(sandbox, online: true)
        let done = try await running.settled(id, timeout: .seconds(60))
        await running.stop()
        #expect(done.state == .uploaded, "\(done.lastError ?? "")")
        let attempts = try running.attempts(id)
        #expect(attempts.count == 2 && attempts.first?.outcome == "interrupted")
        #expect(attempts.last?.startOffset == stopped.bytesConfirmed, "resumed from the confirmed offset")
        #expect(try await proxy.bodyBytes() <= (200 << 20) + (8 << 20), "nothing sent twice beyond the chunk in flight")
        #expect(try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: try #require(done.remoteURL))) == done.sha256)
    }

    @Test("battery-not-low holds jobs below the threshold on battery, and lets them go above it or on the charger")
    func batteryNotLow() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        let sandbox = try tusSandbox(proxy, chunk: "1MiB", extra: """
            [power]
            require = "battery-not-low"
            low_battery = "50%"
            supply_dir = "power"
            """)
        try powerTree(sandbox, online: false, capacity: 40)
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 300_000, seed: 601),
                                           to: "tus")
        let waiting = try await running.wait(id, timeout: .seconds(10)) { $0.waitingReason == .power }
        #expect(waiting.state == .pending)
        try await Task.sleep(for: .seconds(2))
        #expect(try await proxy.bodyBytes() == 0, "nothing goes on a low battery")
        let shown = try await BinaryRunner.run(["show", id.rawValue, "--config", sandbox.configPath]).stdout
        #expect(shown.contains("power: battery at 40%, below 50%"), "\(shown)")
        try setPower(sandbox, capacity: 60)
        let done = try await running.settled(id, timeout: .seconds(20))
        await running.stop()
        #expect(done.state == .uploaded, "\(done.lastError ?? "")")
    }

    /// A zone without daylight saving whose clock shows between 11:30 and 12:30 at `now`: a day in it ends at
    /// least 11 hours after a test that starts then, and began as long before, whatever the hour the suite runs.
    static func zoneNearNoon(_ now: Date = Date()) -> TimeZone {
        let hour = now.timeIntervalSince1970.truncatingRemainder(dividingBy: 86_400) / 3600
        let offset = Int((12 - hour).rounded())
        let name = offset == 0 ? "Etc/GMT" : offset > 0 ? "Etc/GMT-\(offset)" : "Etc/GMT+\(-offset)"
        return TimeZone(identifier: name)!
    }

    @Test("budget 10 MiB on a metered link: 40 MiB of allowed uploads send at most 10 MiB and one chunk; the rest waits through a restart, then goes unmetered")
    func meteredBudget() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        // The day's budget resets at midnight in a zone where it is about noon now: 11 hours or more away.
        let sandbox = try tusSandbox(proxy, chunk: "2MiB", extra: """
            [link]
            metered_budget = "10MiB/day"
            [schedule]
            time_zone = "\(Self.zoneNearNoon().identifier)"
            """, destinationKeys: "on_metered = \"allow\"", bandwidth: 20 << 20, concurrency: 1)
        var running = try RunningQueue(sandbox)
        try await running.queue.setLinkOverride(.metered)
        var ids: [JobID] = []
        for index in 0..<4 {
            ids.append(try await running.enqueue(
                try sandbox.makeFile(sandbox.root + "/v\(index).mov", size: 10 << 20, seed: 610 + UInt64(index)), to: "tus"))
        }
        let spent = try await eventually(timeout: .seconds(30)) {
            try ids.contains { try running.queue.store.job($0)?.waitingReason == .budgetSpent }
        }
        #expect(spent)
        try await Task.sleep(for: .seconds(2))
        let sent = try await proxy.bodyBytes()
        print("budget test: \(sent) bytes through the proxy for a 10 MiB budget, 2 MiB chunks")
        #expect(sent <= (10 << 20) + (2 << 20), "\(sent) bytes on the metered link")
        #expect(sent >= 8 << 20, "the budget was used: \(sent)")
        let status = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let budget = try #require((try status.json() as? [String: Any])?["metered_budget"] as? [String: Any])
        #expect((budget["used"] as? Int ?? 0) >= 10 << 20 && budget["left"] as? Int == 0, "\(budget)")
        let listed = try await BinaryRunner.run(["list", "--config", sandbox.configPath]).stdout
        #expect(listed.contains("metered link, budget 10.0 MiB/day spent, resets 00:00"), "\(listed)")
        let metrics = try await BinaryRunner.run(["status", "--prometheus", "--config", sandbox.configPath]).stdout
        #expect(metrics.contains("uploadq_metered_budget_bytes{state=\"left\"} 0"), "\(metrics)")
        let waitingForBudget = try ids.filter { try running.queue.store.job($0)?.state == .pending }.count
        #expect(waitingForBudget >= 2)
        #expect(metrics.contains("uploadq_waiting_jobs{reason=\"budget-spent\"} \(waitingForBudget)\n"), "\(metrics)")

        // A restart does not reset the ledger.
        await running.stop()
        running = try RunningQueue(sandbox)
        try await Task.sleep(for: .seconds(3))
        #expect(try await proxy.bodyBytes() == sent, "a restart sent more on the spent budget")
        // `always` goes all the same (and counts).
        let event = try await running.queue.enqueue(try sandbox.makeFile(sandbox.root + "/event.json", size: 2_000, seed: 619),
                                                    destination: "tus", onMetered: .always)
        let eventJob = try await running.settled(event, timeout: .seconds(20))
        #expect(eventJob.state == .uploaded)

        try await running.queue.setLinkOverride(.unmetered)
        for id in ids {
            let job = try await running.settled(id, timeout: .seconds(60))
            #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        }
        await running.stop()
        let traffic = try running.queue.store.traffic()["tus"] ?? [:]
        #expect((traffic["metered"] ?? 0) <= (12 << 20) + (64 << 10), "\(traffic)")
    }

    /// A daemon whose wall clock shows `time` (UTC, today) now, through the clock shim.
    func daemon(_ sandbox: Sandbox, at time: String) throws -> DaemonProcess {
        let clock = try ClockShim(file: sandbox.root + "/clock-offset", showing: try ClockShim.today(at: time))
        return try DaemonProcess(sandbox: sandbox, environment: clock.environment)
    }

    @Test("a window that closes mid-transfer stops the upload after its chunk; an urgent one goes on")
    func windowCloses() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        let sandbox = try tusSandbox(proxy, chunk: "2MiB", extra: """
            [schedule]
            windows = ["00:00-12:00"]
            urgent_priority = 10
            time_zone = "UTC"
            """, bandwidth: 2 << 20)
        let plain = try await BinaryRunner.enqueue([try sandbox.makeRandomFile(sandbox.root + "/plain.mov", size: 64 << 20),
                                              "--destination", "tus", "--config", sandbox.configPath])
        let urgent = try await BinaryRunner.enqueue([try sandbox.makeRandomFile(sandbox.root + "/urgent.mov", size: 40 << 20),
                                               "--destination", "tus", "--priority", "10", "--config", sandbox.configPath])
        // 25 s before the window closes, at 1 MiB/s each: both run well before, and neither is done by then.
        let daemon = try daemon(sandbox, at: "11:59:35")
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let started = try await eventually(timeout: .seconds(10)) { try store.job(plain)?.bytesConfirmed ?? 0 > 0 }
        #expect(started, "daemon log:\n\(daemon.log.suffix(2000))")
        let stopped = try await eventually(timeout: .seconds(40)) {
            try store.job(plain)?.state == .pending && store.job(plain)?.attempts ?? 0 >= 1
        }
        #expect(stopped, "daemon log:\n\(daemon.log.suffix(2000))")
        let held = try #require(try store.job(plain))
        #expect(held.bytesConfirmed > 0 && held.bytesConfirmed % (2 << 20) == 0 && held.bytesConfirmed < 64 << 20)
        let attempt = try #require(try store.attempts(of: plain).last)
        #expect(attempt.outcome == "interrupted" && attempt.error?.contains("outside its upload windows") == true,
                "\(attempt)")
        let shown = try await BinaryRunner.run(["show", plain.rawValue, "--config", sandbox.configPath]).stdout
        #expect(shown.contains("outside window until"), "\(shown)")
        let done = try await eventually(timeout: .seconds(60)) { try store.job(urgent)?.state == .uploaded }
        #expect(done, "daemon log:\n\(daemon.log.suffix(2000))")
        try await Task.sleep(for: .seconds(1))
        #expect(try store.job(plain)?.state == .pending, "the plain job waits for the window")
        #expect(await daemon.terminate() < .seconds(10))
    }

    @Test("the timetable slows a running upload from 4 MiB/s to 512 KiB/s at its time, as the wire shows (±15 %)")
    func timetable() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        let sandbox = try tusSandbox(proxy, chunk: "64MiB", extra: """
            [schedule]
            time_zone = "UTC"
            """, bandwidthKeys: "timetable = [\"00:00,4MiB\", \"12:00,512KiB\"]")
        _ = try await BinaryRunner.enqueue([try sandbox.makeRandomFile(sandbox.root + "/long.mov", size: 128 << 20),
                                      "--destination", "tus", "--config", sandbox.configPath])
        // 20 s of 4 MiB/s before 12:00 (80 MiB, in one request), then 512 KiB/s.
        let daemon = try daemon(sandbox, at: "11:59:40")
        // The fast phase: measured from the first bytes on, for 3 s.
        let flowing = try await eventually(timeout: .seconds(15)) { try await proxy.bodyBytes() > 256 << 10 }
        #expect(flowing, "daemon log:\n\(daemon.log.suffix(2000))")
        let fastStart = (ContinuousClock.now, try await proxy.bodyBytes())
        try await Task.sleep(for: .seconds(3))
        let fastEnd = (ContinuousClock.now, try await proxy.bodyBytes())
        let fast = Double(fastEnd.1 - fastStart.1) / (fastEnd.0 - fastStart.0).seconds
        // 12:00 on the daemon's clock, a second to apply it, then 4 s measured.
        let switched = await eventually(timeout: .seconds(30)) { daemon.log.contains("send cap: 512.0 KiB/s") }
        #expect(switched, "daemon log:\n\(daemon.log.suffix(2000))")
        try await Task.sleep(for: .seconds(1))
        let slowStart = (ContinuousClock.now, try await proxy.bodyBytes())
        try await Task.sleep(for: .seconds(4))
        let slowEnd = (ContinuousClock.now, try await proxy.bodyBytes())
        let slow = Double(slowEnd.1 - slowStart.1) / (slowEnd.0 - slowStart.0).seconds
        print("timetable test: \(Int(fast)) B/s before 12:00, \(Int(slow)) B/s after")
        #expect(abs(fast - 4 * 1_048_576) / (4 * 1_048_576) < 0.15, "\(fast) B/s for a cap of 4 MiB/s")
        #expect(abs(slow - 512 * 1024) / (512 * 1024) < 0.15, "\(slow) B/s for a cap of 512 KiB/s")
        #expect(await daemon.terminate() < .seconds(10))
    }
}
