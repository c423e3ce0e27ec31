import Foundation

/// Destinations whose storage said it is full (HTTP 507, a quota): their jobs wait as `quota-full` instead of each
/// failing and retrying, and one job at a time is let through as a trial when a probe is due, the way a circuit
/// breaker probes (the first after the destination's `circuit_probe_interval`, each next one twice as late, up to
/// its maximum). A pure state machine, tested without clocks or I/O.
///
/// | event                                   | not full        | full (waiting)      | trial running                  |
/// |-----------------------------------------|-----------------|---------------------|--------------------------------|
/// | an upload is refused as full            | → full          | —                   | (the trial's own: → full, later) |
/// | a probe is due (`now ≥ until`)          | —               | → trial (one job)   | —                              |
/// | the trial is uploaded / fails otherwise | —               | —                   | → not full                     |
/// | the trial is refused as full            | —               | —                   | → full, twice the wait         |
/// | no job to try                           | —               | —                   | → not full                     |
struct QuotaWatch: Sendable, Equatable {
    /// What changed, for one log line per change.
    enum Change: Sendable, Equatable {
        /// The destination is full; its jobs wait until `probeAt`.
        case full(until: Date)
        /// A trial was refused too; the next one is at `until`.
        case stillFull(until: Date)
        /// It takes files again.
        case cleared
    }

    private(set) var breakers: [String: CircuitBreaker] = [:]
    /// The job let through as the trial of each destination.
    private(set) var trials: [String: JobID] = [:]

    /// When the next trial is due among `eligible` destinations (those a job could go to now), if one waits.
    func nextTrialAt(among eligible: Set<String>) -> Date? {
        breakers.filter { eligible.contains($0.key) }.values.compactMap(\.nextProbeAt).min()
    }

    /// Destinations whose jobs wait (full, or with a trial running).
    var fullDestinations: Set<String> { Set(breakers.filter { $0.value.isOpen }.keys) }

    /// An upload to `destination` was refused as full. Returns the change to log, if any (a destination already
    /// full says nothing more; a trial refused is told by `finished`).
    mutating func refused(_ destination: String, job: JobID, policy: CircuitBreakerPolicy, now: Date) -> Change? {
        if trials[destination] == job, breakers[destination]?.state == .probing {
            return finished(destination, job: job, outcome: .full, now: now)
        }
        if trials[destination] == job { trials[destination] = nil }
        var breaker = breakers[destination] ?? CircuitBreaker(policy: Self.opensAtOnce(policy))
        guard !breaker.isOpen else { return nil }
        _ = breaker.recordFailure(now: now)
        breakers[destination] = breaker
        return breaker.nextProbeAt.map { .full(until: $0) }
    }

    /// Destinations among `eligible` (whose link and circuit let a job go) whose trial is due now, `limit` at most
    /// (the free slots); they move to "trial running" (the caller claims one job for each and
    /// reports it with `started` or `nothingToTry`).
    mutating func dueTrials(now: Date, limit: Int, among eligible: Set<String>) -> [String] {
        var due: [String] = []
        for name in breakers.keys.sorted() where eligible.contains(name) && due.count < limit
            && breakers[name]?.startProbeIfDue(now: now) == true {
            due.append(name)
        }
        return due
    }

    /// `job` is the trial of `destination`.
    mutating func started(_ destination: String, job: JobID) {
        trials[destination] = job
    }

    /// A due trial could not be claimed (the database refused the round, or the link holds every job): it is due
    /// again at `retryAt`.
    mutating func trialNotStarted(_ destination: String, retryAt: Date) {
        breakers[destination]?.abandonProbe(now: retryAt)
    }

    /// A due trial found no job to send: nothing is held any more.
    mutating func nothingToTry(_ destination: String) -> Change? {
        breakers[destination] = nil
        trials[destination] = nil
        return .cleared
    }

    /// How a job of a watched destination ended.
    enum Outcome: Sendable, Equatable {
        case uploaded
        /// Refused as full.
        case full
        /// Failed or stopped for another reason.
        case other
    }

    /// A job of `destination` ended. An upload that went through clears the destination, and so does a trial
    /// that ended for another reason (the storage did not say it is full); a trial refused again waits twice as
    /// long.
    mutating func finished(_ destination: String, job: JobID, outcome: Outcome, now: Date) -> Change? {
        guard var breaker = breakers[destination] else { return nil }
        let wasTrial = trials[destination] == job
        if wasTrial { trials[destination] = nil }
        switch outcome {
        case .full:
            guard wasTrial else { return nil }
            breaker.finishProbe(answered: false, now: now)
            breakers[destination] = breaker
            return breaker.nextProbeAt.map { .stillFull(until: $0) }
        case .other where !wasTrial:
            return nil
        case .uploaded, .other:
            breakers[destination] = nil
            trials[destination] = nil
            return .cleared
        }
    }

    /// Moves the trial times with a step of the wall clock.
    mutating func shift(by step: TimeInterval) {
        for name in breakers.keys { breakers[name]?.shift(by: step) }
    }

    /// The destination's probe timing, opening on the first refusal.
    private static func opensAtOnce(_ policy: CircuitBreakerPolicy) -> CircuitBreakerPolicy {
        var policy = policy
        policy.threshold = 1
        return policy
    }
}
