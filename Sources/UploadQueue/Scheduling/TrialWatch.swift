import Foundation

/// Destinations whose answers cannot be used for now: their storage said it is full (HTTP 507, `quota-full`), or
/// what answered proved nothing (a captive portal, a proxy, a server whose answer does not prove it has the bytes:
/// `unverified-answer`). Their jobs wait instead of each failing and retrying, and one job at a time is let through
/// as a trial when one is due, the way a circuit breaker probes (the first after the destination's
/// `circuit_probe_interval`, each next one twice as late, up to its maximum). A pure state machine, tested without
/// clocks or I/O.
///
/// | event                                   | not held        | held (waiting)      | trial running                  |
/// |-----------------------------------------|-----------------|---------------------|--------------------------------|
/// | an upload is refused (full, unverified) | → held          | the reason follows  | (the trial's own: → held, later) |
/// | a trial is due (`now ≥ until`)          | —               | → trial (one job)   | —                              |
/// | the trial is uploaded / fails otherwise | —               | —                   | → not held                     |
/// | the trial is refused again              | —               | —                   | → held, twice the wait         |
/// | no job to try                           | —               | —                   | → not held                     |
struct TrialWatch: Sendable, Equatable {
    /// Why a destination is held, with a word on it for `show` and the log.
    struct Held: Sendable, Equatable {
        /// `quota-full` or `unverified-answer`.
        var reason: WaitingReason
        /// What the last refusal said (an unverified answer's account: what answered, what to do).
        var detail: String?
    }

    /// What changed, for one log line per change.
    enum Change: Sendable, Equatable {
        /// The destination is held; its jobs wait until `until`.
        case held(Held, until: Date)
        /// A trial was refused too; the next one is at `until`.
        case stillHeld(Held, until: Date)
        /// It takes files again (it was held for `reason`).
        case cleared(WaitingReason)
    }

    private(set) var breakers: [String: CircuitBreaker] = [:]
    /// Why each destination is held.
    private(set) var held: [String: Held] = [:]
    /// The job let through as the trial of each destination.
    private(set) var trials: [String: JobID] = [:]

    /// When the next trial is due among `eligible` destinations (those a job could go to now), if one waits.
    func nextTrialAt(among eligible: Set<String>) -> Date? {
        breakers.filter { eligible.contains($0.key) }.values.compactMap(\.nextProbeAt).min()
    }

    /// Destinations whose jobs wait (held, or with a trial running), with why.
    var heldDestinations: [String: Held] { held.filter { breakers[$0.key]?.isOpen == true } }

    /// Destinations held for `reason`.
    func destinations(heldFor reason: WaitingReason) -> Set<String> {
        Set(heldDestinations.filter { $0.value.reason == reason }.keys)
    }

    /// An upload to `destination` was refused for `held`'s reason. Returns the change to log, if any (a destination
    /// already held for that reason says nothing more; a trial refused is told by `finished`).
    mutating func refused(_ destination: String, _ why: Held, job: JobID, policy: CircuitBreakerPolicy,
                          now: Date) -> Change? {
        if trials[destination] == job, breakers[destination]?.state == .probing {
            return finished(destination, job: job, outcome: .refused(why), now: now, policy: policy)
        }
        if trials[destination] == job { trials[destination] = nil }
        let before = held[destination]
        // Another reason waits by its own timing (a portal's trials a minute apart at most, a full store's not).
        var breaker = before?.reason == why.reason ? breakers[destination] ?? CircuitBreaker(policy: Self.opensAtOnce(policy))
            : CircuitBreaker(policy: Self.opensAtOnce(policy))
        held[destination] = why
        guard !breaker.isOpen else { return nil }
        _ = breaker.recordFailure(now: now)
        breakers[destination] = breaker
        return breaker.nextProbeAt.map { .held(why, until: $0) }
    }

    /// Destinations among `eligible` (whose link and circuit let a job go) whose trial is due now, `limit` at most
    /// (the free slots); they move to "trial running" (the caller claims one job for each and reports it with
    /// `started` or `nothingToTry`).
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
        let reason = held[destination]?.reason ?? .quotaFull
        forget(destination)
        return .cleared(reason)
    }

    /// How a job of a watched destination ended.
    enum Outcome: Sendable, Equatable {
        case uploaded
        /// Refused again (full, unverified).
        case refused(Held)
        /// Failed or stopped for another reason.
        case other
    }

    /// A job of `destination` ended. An upload that went through clears the destination, and so does a trial
    /// that ended for another reason (the destination did not refuse it); a trial refused again waits twice as
    /// long.
    /// `policy`: the timing of the reason a trial refused again gives, when it is another than the hold's.
    mutating func finished(_ destination: String, job: JobID, outcome: Outcome, now: Date,
                           policy: CircuitBreakerPolicy? = nil) -> Change? {
        guard var breaker = breakers[destination] else { return nil }
        let wasTrial = trials[destination] == job
        if wasTrial { trials[destination] = nil }
        switch outcome {
        case .refused(let why):
            guard wasTrial else { return nil }
            if held[destination]?.reason != why.reason, let policy {
                // Another reason: its own timing, from its first wait.
                breaker = CircuitBreaker(policy: Self.opensAtOnce(policy))
                _ = breaker.recordFailure(now: now)
                held[destination] = why
                breakers[destination] = breaker
                return breaker.nextProbeAt.map { .held(why, until: $0) }
            }
            held[destination] = why
            breaker.finishProbe(answered: false, now: now)
            breakers[destination] = breaker
            return breaker.nextProbeAt.map { .stillHeld(why, until: $0) }
        case .other where !wasTrial:
            return nil
        case .uploaded, .other:
            let reason = held[destination]?.reason ?? .quotaFull
            forget(destination)
            return .cleared(reason)
        }
    }

    /// The link came out from behind a portal: an unverified answer it gave is forgotten, and the jobs go at once
    /// (a full storage stays held).
    mutating func forgetUnverified(_ destination: String) {
        guard held[destination]?.reason == .unverifiedAnswer else { return }
        forget(destination)
    }

    /// Moves the trial times with a step of the wall clock.
    mutating func shift(by step: TimeInterval) {
        for name in breakers.keys { breakers[name]?.shift(by: step) }
    }

    private mutating func forget(_ destination: String) {
        breakers[destination] = nil
        held[destination] = nil
        trials[destination] = nil
    }

    /// The destination's trial timing, opening on the first refusal.
    private static func opensAtOnce(_ policy: CircuitBreakerPolicy) -> CircuitBreakerPolicy {
        var policy = policy
        policy.threshold = 1
        return policy
    }
}
