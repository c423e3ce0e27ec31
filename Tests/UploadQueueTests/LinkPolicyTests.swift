import Foundation
import Testing
@testable import UploadQueue

/// The link policy against real servers: deferred on a metered link (nothing reaches the server), small files
/// allowed below a size, a running upload stopped within two seconds when the link turns metered and resumed
/// from its offset, offline jobs started as soon as the link is back, the shared bandwidth cap, and the bytes per
/// link class in `status`.
@Suite(.serialized)
struct LinkPolicyTests {
    func davSandbox(_ proxy: FaultProxy, retry: String = "300ms", bandwidth: Int64 = 0, concurrency: Int = 4)
        throws -> Sandbox
    {
        try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(proxy.url("/link/{job_id}-{name}"))"
            on_metered = "defer"
            """, retry: retry, concurrency: concurrency, bandwidth: bandwidth)
    }

    @Test("metered: deferred photos stay pending (the server gets nothing), allow-below goes; unmetered: all go")
    func deferOnMetered() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL()))
        let sandbox = try davSandbox(proxy)
        let set = try await BinaryRunner.run(["link", "metered", "--config", sandbox.configPath])
        #expect(set.status == 0 && set.stdout.hasPrefix("metered (source: override"), "\(set.stdout)\(set.stderr)")
        let running = try RunningQueue(sandbox)
        let photo = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 3 << 20, seed: 70),
                                              to: "dav")
        let event = try await running.queue.enqueue(
            try sandbox.makeFile(sandbox.root + "/event.json", size: 40_000, seed: 71), destination: "dav",
            onMetered: .allowBelow(1 << 20))
        let small = try await running.settled(event)
        #expect(small.state == .uploaded, "\(small.lastError ?? "")")
        let waiting = try await running.wait(photo) { $0.waitingReason == .meteredLink }
        #expect(waiting.state == .pending && waiting.waitingReason == .meteredLink)
        try await Task.sleep(for: .seconds(1))
        #expect(try await proxy.bodyBytes() == 40_000, "only the small file reached the server")

        let status = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let json = try #require(try status.json() as? [String: Any])
        let link = try #require(json["link"] as? [String: Any])
        #expect(link["class"] as? String == "metered" && link["source"] as? String == "override")
        #expect((json["waiting"] as? [String: Int])?["metered-link"] == 1)

        try await running.queue.setLinkOverride(.unmetered)
        let photoJob = try await running.settled(photo, timeout: .seconds(10))
        #expect(photoJob.state == .uploaded, "\(photoJob.lastError ?? "")")
        #expect(photoJob.waitingReason == nil)
        // Traffic is booked on every pass of the scheduler and once more when it stops.
        await running.stop()
        let traffic = try running.queue.store.traffic()["dav"] ?? [:]
        #expect((traffic["metered"] ?? 0) >= 40_000 && (traffic["metered"] ?? 0) < 1 << 20, "\(traffic)")
        #expect((traffic["unmetered"] ?? 0) >= 3 << 20, "\(traffic)")
        let after = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let byClass = try #require(((try after.json() as? [String: Any])?["traffic"] as? [String: Any])?["by_class"]
            as? [String: Int])
        #expect(byClass["metered"] == Int(traffic["metered"] ?? -1))
    }

    @Test("switching to metered stops a running 200 MiB tus upload within 2 s; back to unmetered it resumes")
    func stopMidTransfer() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(proxy.url("/files/"))"
            chunk_size = "8MiB"
            """, bandwidth: 40 << 20)
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeRandomFile(sandbox.root + "/clip.mov", size: 200 << 20),
                                           to: "tus")
        _ = try await running.wait(id) { $0.bytesConfirmed >= 24 << 20 }
        try await running.queue.setLinkOverride(.metered)
        let switched = ContinuousClock.now
        try await Task.sleep(for: .seconds(2))
        let atTwoSeconds = try await proxy.bodyBytes()
        try await Task.sleep(for: .seconds(1.5))
        #expect(try await proxy.bodyBytes() == atTwoSeconds, "bytes kept flowing after the link turned metered")
        let stopped = try #require(try running.queue.store.job(id))
        #expect(stopped.state == .pending && stopped.waitingReason == .meteredLink)
        #expect(stopped.bytesConfirmed < Int64(200 << 20))
        let confirmedAtStop = stopped.bytesConfirmed
        print("link test: \(atTwoSeconds) bytes through the proxy 2 s after the switch (\(switched)), "
            + "\(confirmedAtStop) confirmed")

        try await running.queue.setLinkOverride(.auto)
        let done = try await running.settled(id, timeout: .seconds(60))
        await running.stop()
        #expect(done.state == .uploaded, "\(done.lastError ?? "")")
        let attempts = try running.attempts(id)
        #expect(attempts.count == 2)
        #expect(attempts.first?.outcome == "interrupted")
        // tus servers keep what arrived of the interrupted PATCH: the resume starts at the server's offset, which is
        // the confirmed one or up to a chunk past it, never before.
        let resumedAt = try #require(attempts.last?.startOffset)
        #expect(resumedAt >= confirmedAtStop && resumedAt <= confirmedAtStop + Int64(8 << 20), "resumed at \(resumedAt)")
        #expect(try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: try #require(done.remoteURL))) == done.sha256)
    }

    @Test("offline: jobs wait as offline; when the link is back a failure's 5-minute backoff is not waited out")
    func offlineThenBack() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL()))
        try await proxy.add(["method": "PUT", "action": "close"])
        let sandbox = try davSandbox(proxy, retry: "5m")
        let running = try RunningQueue(sandbox)
        let failing = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 100_000, seed: 72),
                                                to: "dav")
        let failed = try await running.wait(failing) { $0.state == .failed }
        #expect(failed.nextAttemptAt.map { $0.timeIntervalSinceNow > 60 } == true)
        try await running.queue.setLinkOverride(.offline)
        let waiting = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/b.jpg", size: 100_000, seed: 73),
                                                to: "dav")
        let held = try await running.wait(waiting) { $0.waitingReason == .offline }
        #expect(held.state == .pending && held.waitingReason == .offline)
        try await Task.sleep(for: .milliseconds(500))
        try await running.queue.setLinkOverride(.auto)
        let back = ContinuousClock.now
        let first = try await running.settled(failing, timeout: .seconds(10))
        let second = try await running.settled(waiting, timeout: .seconds(10))
        let elapsed = ContinuousClock.now - back
        await running.stop()
        #expect(first.state == .uploaded && second.state == .uploaded, "\(first.lastError ?? "")")
        #expect(elapsed < .seconds(2), "started \(elapsed) after the link came back")
    }

    @Test("a 2 MiB/s cap holds for two concurrent transfers together (±15 %)")
    func sharedCap() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL()))
        let sandbox = try davSandbox(proxy, bandwidth: 2 << 20)
        let running = try RunningQueue(sandbox)
        let first = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/c.bin", size: 6 << 20, seed: 74),
                                              to: "dav")
        let second = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/d.bin", size: 6 << 20, seed: 75),
                                               to: "dav")
        let one = try await running.settled(first, timeout: .seconds(30))
        let two = try await running.settled(second, timeout: .seconds(30))
        let attempts = try running.attempts(first) + running.attempts(second)
        await running.stop()
        #expect(one.state == .uploaded && two.state == .uploaded)
        let start = try #require(attempts.map(\.startedAt).min())
        let end = try #require(attempts.compactMap(\.endedAt).max())
        let rate = Double(12 << 20) / end.timeIntervalSince(start)
        print("cap test: \(Int(rate)) B/s for a cap of \(2 << 20) B/s")
        #expect(abs(rate - Double(2 << 20)) <= 0.15 * Double(2 << 20), "\(Int(rate)) B/s")
        let overlap = try #require(attempts.compactMap(\.endedAt).min()) > (attempts.map(\.startedAt).max() ?? end)
        #expect(overlap, "the two transfers ran at the same time")
    }
}
