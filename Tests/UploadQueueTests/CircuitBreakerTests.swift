import Foundation
import Testing
@testable import UploadQueue

/// The circuit breaker as a pure state machine, and in the scheduler: a dead destination waits (circuit-open),
/// is probed, resumes when it answers, and never holds up another destination.
struct CircuitBreakerTests {
    let policy = CircuitBreakerPolicy(threshold: 3, probeInterval: .seconds(10), maximumProbeInterval: .seconds(35))
    let start = Date(timeIntervalSince1970: 1_000_000)

    @Test("it opens at the threshold of consecutive failures; a success in between resets the count")
    func opensAtThreshold() {
        var breaker = CircuitBreaker(policy: policy)
        var opened: [Bool] = []
        opened.append(breaker.recordFailure(now: start))
        opened.append(breaker.recordFailure(now: start))
        breaker.recordSuccess()
        opened.append(breaker.recordFailure(now: start))
        opened.append(breaker.recordFailure(now: start))
        #expect(!breaker.isOpen)
        opened.append(breaker.recordFailure(now: start))
        #expect(opened == [false, false, false, false, true])
        #expect(breaker.isOpen)
        #expect(breaker.nextProbeAt == start.addingTimeInterval(10))
        let again = breaker.recordFailure(now: start)
        #expect(!again, "an open circuit does not open again")
    }

    @Test("a probe is due after its delay; answered it closes, unanswered the delay doubles up to the cap")
    func probes() {
        var breaker = CircuitBreaker(policy: policy)
        for _ in 0..<3 { _ = breaker.recordFailure(now: start) }
        let early = breaker.startProbeIfDue(now: start.addingTimeInterval(9.9))
        let due = breaker.startProbeIfDue(now: start.addingTimeInterval(10))
        #expect(!early && due)
        #expect(breaker.state == .probing)
        let second = breaker.startProbeIfDue(now: start.addingTimeInterval(100))
        #expect(!second, "one probe at a time")
        breaker.finishProbe(answered: false, now: start.addingTimeInterval(10))
        #expect(breaker.nextProbeAt == start.addingTimeInterval(30))
        let next = breaker.startProbeIfDue(now: start.addingTimeInterval(30))
        #expect(next)
        breaker.finishProbe(answered: false, now: start.addingTimeInterval(30))
        #expect(breaker.nextProbeAt == start.addingTimeInterval(65), "40 s capped at 35 s")
        let last = breaker.startProbeIfDue(now: start.addingTimeInterval(65))
        #expect(last)
        breaker.finishProbe(answered: true, now: start.addingTimeInterval(65))
        #expect(breaker.state == .closed && breaker.consecutiveFailures == 0)
        // The server answers probes but uploads still fail: the next opening waits longer, not the base delay.
        for _ in 0..<3 { _ = breaker.recordFailure(now: start.addingTimeInterval(70)) }
        #expect(breaker.nextProbeAt == start.addingTimeInterval(70 + 35))
        let again = breaker.startProbeIfDue(now: start.addingTimeInterval(105))
        #expect(again)
        breaker.finishProbe(answered: true, now: start.addingTimeInterval(105))
        breaker.recordSuccess()
        #expect(breaker.openings == 0, "a transfer that goes through resets the backoff")
    }

    @Test("a threshold of 0 turns the breaker off")
    func disabled() {
        var breaker = CircuitBreaker(policy: CircuitBreakerPolicy(threshold: 0))
        for _ in 0..<100 {
            let opened = breaker.recordFailure(now: start)
            #expect(!opened)
        }
        #expect(!breaker.isOpen)
    }

    @Test("a dead destination's jobs wait as circuit-open without hammering it; others go on; a probe reopens it")
    func deadDestination() async throws {
        let recorder = try RecorderSession()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.recorderURL()))
        try await proxy.add(["action": "respond", "status": 503, "times": -1, "body": "down for maintenance"])
        let sandbox = try Sandbox(destination: "api", """
            protocol = "http-post"
            url = "\(proxy.url("/record/\(recorder.name)/up"))"
            circuit_threshold = 2
            circuit_probe_interval = "500ms"
            """, retry: "200ms", concurrency: 1)
        let running = try RunningQueue(sandbox)
        var dead: [JobID] = []
        for index in 0..<3 {
            let path = try sandbox.makeFile(sandbox.root + "/d\(index).jpg", size: 1000 + index, seed: UInt64(40 + index))
            dead.append(try await running.enqueue(path, to: "api"))
        }
        let waiting = try await eventually {
            try dead.allSatisfy { try running.queue.store.job($0)?.waitingReason == .circuitOpen
                || running.queue.store.job($0)?.state == .failed }
        }
        #expect(waiting)
        var healthy: [JobID] = []
        for index in 0..<2 {
            let path = try sandbox.makeFile(sandbox.root + "/h\(index).jpg", size: 2000 + index, seed: UInt64(50 + index))
            healthy.append(try await running.enqueue(path, to: "default"))
        }
        for id in healthy {
            #expect(try await running.settled(id, timeout: .seconds(10)).state == .uploaded)
        }
        let posts = try await proxy.requests().filter { $0["method"] as? String == "POST" }.count
        #expect(posts == 2, "only the threshold's failures reach the dead server")
        try await Task.sleep(for: .seconds(1.5))
        let probes = try await proxy.requests().filter { $0["method"] as? String == "HEAD" }.count
        #expect(probes >= 1 && probes <= 3, "probes back off: \(probes)")
        #expect(try await proxy.requests().filter { $0["method"] as? String == "POST" }.count == 2)
        let status = try await running.queue.status()
        #expect(status.summary.waiting[.circuitOpen] ?? 0 >= 1)

        try await proxy.clearRules()
        for id in dead {
            let job = try await running.settled(id, timeout: .seconds(20))
            #expect(job.state == .uploaded, "\(job.lastError ?? "")")
            #expect(job.waitingReason == nil)
        }
        await running.stop()
        #expect(try await recorder.requests().filter { $0["method"] as? String == "POST" }.count == 3)
    }
}
