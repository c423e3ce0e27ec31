import Testing
@testable import UploadQueue

/// The retry schedule as a pure function: no clocks, no I/O.
struct RetryPolicyTests {
    @Test("the default is 30 s for ten failures, then 5 min, forever")
    func defaultSchedule() {
        let policy = RetryPolicy()
        for failure in 1...10 {
            #expect(policy.delay(afterFailure: failure, random: 0.5) == .seconds(30))
        }
        for failure in [11, 12, 100, 10_000] {
            #expect(policy.delay(afterFailure: failure, random: 0.5) == .seconds(300))
        }
    }

    @Test("jitter stays within ±10 % and reaches both ends")
    func jitterBounds() {
        let policy = RetryPolicy()
        #expect(policy.delay(afterFailure: 1, random: 0) == .seconds(27))
        #expect(policy.delay(afterFailure: 1, random: 1) == .seconds(33))
        #expect(policy.delay(afterFailure: 20, random: 0) == .seconds(270))
        #expect(policy.delay(afterFailure: 20, random: 1) == .seconds(330))
        for step in 0...20 {
            let delay = policy.delay(afterFailure: 3, random: Double(step) / 20)
            #expect(delay >= .seconds(27) && delay <= .seconds(33))
        }
    }

    @Test("exponential backoff doubles from the initial interval and stops at the cap")
    func exponential() {
        let policy = RetryPolicy(backoff: .exponential, initialInterval: .seconds(1), laterInterval: .seconds(60), jitter: 0)
        let delays = (1...9).map { policy.delay(afterFailure: $0, random: 0.5) }
        #expect(delays == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(32),
                           .seconds(60), .seconds(60), .seconds(60)])
        #expect(policy.delay(afterFailure: 5_000, random: 0.5) == .seconds(60))
    }

    @Test("a longer Retry-After from the server wins; a shorter one does not shorten the schedule")
    func retryAfter() {
        let policy = RetryPolicy(jitter: 0)
        #expect(policy.delay(afterFailure: 1, random: 0.5, retryAfter: .seconds(120)) == .seconds(120))
        #expect(policy.delay(afterFailure: 1, random: 0.5, retryAfter: .seconds(5)) == .seconds(30))
    }
}
