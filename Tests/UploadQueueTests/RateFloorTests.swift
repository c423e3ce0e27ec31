import Foundation
import Testing
@testable import UploadQueue

/// No slot held hostage: a request that trickles below `min_rate` on average, or runs past its deadline, gives its
/// slot back as a stall and is retried.
@Suite(.serialized)
struct RateFloorTests {
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .seconds(seconds) }

    @Test("a steady transfer above the floor goes on; a trickle after a burst ends one window later")
    func trickleAfterBurst() {
        var steady = RateFloor(minimumRate: 1024, window: .seconds(10), bodyBytes: 1 << 30, started: start)
        for second in 0...120 {
            #expect(steady.observe(bytes: Int64(second) * 2048, at: at(Double(second))) == nil, "at \(second) s")
        }
        var trickle = RateFloor(minimumRate: 1024, window: .seconds(10), bodyBytes: 1 << 30, started: start)
        #expect(trickle.observe(bytes: 0, at: at(0)) == nil)
        #expect(trickle.observe(bytes: 6 << 20, at: at(1)) == nil, "a buffer's worth at once")
        var ended: Int?
        for second in 2...40 where ended == nil {
            if case .tooSlow(let bytes, let span, let floor) = trickle.observe(bytes: (6 << 20) + Int64(second) * 2,
                                                                              at: at(Double(second))) {
                #expect(bytes < 1024 * 10 && span >= .seconds(10) && floor == 1024)
                ended = second
            }
        }
        #expect(ended == 11, "one window after the burst")
    }

    @Test("nothing is judged before a whole window; the floor is off at 0; a send cap lowers it to half its share")
    func floorRules() {
        var early = RateFloor(minimumRate: 1024, window: .seconds(60), bodyBytes: 100, started: start)
        for second in 0..<60 { #expect(early.observe(bytes: 0, at: at(Double(second))) == nil) }
        var off = RateFloor(minimumRate: 0, window: .seconds(1), bodyBytes: 100, started: start)
        for second in 0..<10_000 where second % 500 == 0 { #expect(off.observe(bytes: 0, at: at(Double(second))) == nil) }
        // Capped by uploadq itself at 512 B/s: 300 B/s is more than half of it.
        var capped = RateFloor(minimumRate: 1024, window: .seconds(5), bodyBytes: 1 << 20, started: start)
        for second in 0...30 {
            #expect(capped.observe(bytes: Int64(second) * 300, at: at(Double(second)), cap: 512) == nil)
        }
        #expect(capped.observe(bytes: 31 * 300, at: at(36), cap: 512) != nil, "stopped moving")
    }

    @Test("once the body is sent only the answer's deadline applies: ten minutes from the last byte sent")
    func responsePhaseAndDeadline() {
        var waiting = RateFloor(minimumRate: 1024, window: .seconds(10), bodyBytes: 5 << 30, started: start)
        #expect(waiting.observe(bytes: 1024 * 60, at: at(1), sendingBody: false) == nil)
        for second in stride(from: 2.0, through: 601.0, by: 1.0) {
            #expect(waiting.observe(bytes: 1024 * 60 + Int64(second), at: at(second), sendingBody: false) == nil,
                    "a store answering slowly after the body is not a trickle (at \(second) s)")
        }
        // However large the body was: its size bought time to send it, not to wait for the answer.
        #expect(waiting.observe(bytes: 1024 * 61, at: at(602), sendingBody: false) == .pastDeadline(.seconds(600)))
        var sending = RateFloor(minimumRate: 1024, window: .seconds(10), bodyBytes: 1024 * 60, started: start)
        for second in stride(from: 0.0, through: 660.0, by: 1.0) {
            #expect(sending.observe(bytes: Int64(second) * 1100, at: at(second)) == nil)
        }
        #expect(sending.observe(bytes: 661 * 1100, at: at(661)) == .pastDeadline(.seconds(660)))
    }

    @Test("requests in flight together share the floor; a floor that rises starts a new window, not a false stall")
    func sharedFloor() {
        // Four uploads on a 2 KiB/s uplink: 512 B/s each, above a quarter of the floor.
        var shared = RateFloor(minimumRate: 1024, window: .seconds(10), bodyBytes: 1 << 30, started: start)
        for second in 0...60 {
            #expect(shared.observe(bytes: Int64(second) * 512, at: at(Double(second)), sharers: 4) == nil)
        }
        // Three of them end: the floor is 1 KiB/s again, judged over a window that begins now.
        for second in 61...70 {
            #expect(shared.observe(bytes: Int64(second) * 512, at: at(Double(second)), sharers: 1) == nil, "at \(second) s")
        }
        #expect(shared.observe(bytes: 71 * 512, at: at(71), sharers: 1) != nil, "512 B/s alone is below the floor")
    }

    @Test("a server that reads 2 B/s: the job is retried as a stall, and the other jobs flow meanwhile")
    func trickleServer() async throws {
        let dav = try TestServers.authority(try TestServers.davURL())
        let proxy = try await FaultProxy.start(upstream: dav)
        try await proxy.add(["method": "PUT", "path": "big", "action": "trickle", "after_bytes": 0,
                             "bytes_per_second": 2, "times": 1])
        let folder = "trickle-\(UInt32.random(in: 0...UInt32.max))"
        let sandbox = try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(proxy.url("/\(folder)/{name}"))"
            min_rate_window = "3s"
            """, concurrency: 2)
        let running = try RunningQueue(sandbox)
        // Larger than what the kernel's socket buffers take at once: the rest waits on the 2 B/s reader.
        let big = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/big.bin", size: 24 << 20, seed: 1),
                                            to: "dav")
        try await Task.sleep(for: .milliseconds(300))
        let small = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/small.jpg", size: 5000, seed: 2),
                                              to: "dav")
        let smallDone = try await running.wait(small, timeout: .seconds(20)) { $0.state == .uploaded }
        #expect(smallDone.state == .uploaded, "the other slot kept working")
        let bigDone = try await running.wait(big, timeout: .seconds(60)) { $0.state == .uploaded }
        let attempts = try running.attempts(big)
        await running.stop()
        #expect(bigDone.state == .uploaded, "\(bigDone.lastError ?? "")")
        #expect(attempts.count == 2, "\(attempts)")
        let first = try #require(attempts.first)
        #expect(first.outcome == "failed" && first.error?.contains("min_rate") == true, "\(first.error ?? "")")
        #expect(try #require(first.endedAt).timeIntervalSince(first.startedAt) < 20, "given back in seconds, not never")
        #expect(try sha256(ofFile: try TestServers.davRoot() + "/\(folder)/big.bin") == bigDone.sha256)
    }
}
