import Foundation

/// Stops sending work to a destination that keeps failing, and decides when to probe it: a pure state machine
/// (events in, state out), driven by the scheduler and tested without clocks or I/O.
///
/// | event                                  | closed                           | open               | probing              |
/// |----------------------------------------|----------------------------------|--------------------|----------------------|
/// | transient destination failure          | count; at `threshold` → open     | —                  | —                    |
/// | success                                | reset the count                  | → closed           | → closed             |
/// | probe due (`now ≥ until`)              | —                                | → probing          | —                    |
/// | probe answered / not answered          | —                                | —                  | → closed / → open    |
///
/// Each reopening waits twice as long as the last, from `probeInterval` up to `maximumProbeInterval`, until a
/// transfer succeeds.
struct CircuitBreaker: Sendable, Equatable {
    enum State: Sendable, Equatable {
        case closed
        /// No work goes out; a probe is due at `until`.
        case open(until: Date)
        /// A probe request is in flight.
        case probing
    }

    let policy: CircuitBreakerPolicy
    private(set) var state: State = .closed
    private(set) var consecutiveFailures = 0
    /// Times the circuit opened since it was last closed; picks the next probe delay.
    private(set) var openings = 0

    init(policy: CircuitBreakerPolicy) {
        self.policy = policy
    }

    /// True while work for the destination is held back.
    var isOpen: Bool { state != .closed }

    /// When the next probe is due, while open.
    var nextProbeAt: Date? {
        if case .open(let until) = state { return until }
        return nil
    }

    /// Counts a transient failure of the destination; returns true when this one opened the circuit.
    mutating func recordFailure(now: Date) -> Bool {
        guard policy.threshold > 0, state == .closed else { return false }
        consecutiveFailures += 1
        guard consecutiveFailures >= policy.threshold else { return false }
        open(now: now)
        return true
    }

    /// A transfer or a probe went through: the destination is healthy.
    mutating func recordSuccess() {
        state = .closed
        consecutiveFailures = 0
        openings = 0
    }

    /// Starts a probe if one is due; returns whether the caller should send it now.
    mutating func startProbeIfDue(now: Date) -> Bool {
        guard case .open(let until) = state, until <= now else { return false }
        state = .probing
        return true
    }

    /// Records a probe's answer. An answered probe lets work through again but keeps the backoff: a server that
    /// answers `OPTIONS` while every upload fails must not be retried at the base interval forever. Only a
    /// transfer that goes through (`recordSuccess`) resets it.
    mutating func finishProbe(answered: Bool, now: Date) {
        guard state == .probing else { return }
        if answered {
            state = .closed
            consecutiveFailures = 0
        } else {
            open(now: now)
        }
    }

    /// A probe that was started but never sent: the circuit is open again, its probe due at `now`.
    mutating func abandonProbe(now: Date) {
        guard state == .probing else { return }
        state = .open(until: now)
    }

    /// Moves the probe time with a step of the wall clock, so the wait it stands for stays as long as it was.
    mutating func shift(by step: TimeInterval) {
        if case .open(let until) = state { state = .open(until: until.addingTimeInterval(step)) }
    }

    /// The delay before the probe after the `openings`-th opening.
    static func probeDelay(policy: CircuitBreakerPolicy, openings: Int) -> Duration {
        let exponent = Double(min(max(openings - 1, 0), 30))
        let seconds = min(policy.probeInterval.seconds * pow(2, exponent), policy.maximumProbeInterval.seconds)
        return .milliseconds(Int64(seconds * 1000))
    }

    private mutating func open(now: Date) {
        openings += 1
        let delay = Self.probeDelay(policy: policy, openings: openings)
        state = .open(until: now.addingTimeInterval(delay.seconds))
    }
}
