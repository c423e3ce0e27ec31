import Synchronization

/// What a running transfer looks at before each chunk besides the link: whether the scheduler asked it to stop
/// (a window), the power as it is now, and whether the metered budget is spent, counting the bytes sent since the
/// last booking: so a transfer stops at the chunk boundary after the charger is pulled or the budget is crossed,
/// not a round of the scheduler later.
final class ConstraintGauge: Sendable {
    private struct Budget {
        var bytes: Int64
        /// Counted in the ledger so far.
        var booked: Int64
        var description: String
        /// Destinations on metered links now.
        var meteredLabels: Set<String>
        /// Whether the link as a whole is metered (what patches, which name no destination, go over).
        var othersMetered: Bool
        var configured: Set<String>
    }

    private struct State {
        var stops: [JobID: TransferFailure] = [:]
        var budget: Budget?
    }

    private let state = Mutex(State())
    /// The engine's counts of what was sent and not booked yet.
    private let traffic: TrafficCounter?
    /// The device's power (nil when nothing requires anything of it).
    private let power: PowerMonitor?

    init(traffic: TrafficCounter?, power: PowerMonitor? = nil) {
        self.traffic = traffic
        self.power = power
    }

    /// Asks a transfer to stop before its next chunk, with `failure` (an `interrupted` one).
    func askToStop(_ id: JobID, _ failure: TransferFailure) {
        state.withLock { $0.stops[id] = failure }
    }

    /// Lets a transfer go on after all, or forgets the request of one that ended.
    func withdraw(_ id: JobID) {
        state.withLock { _ = $0.stops.removeValue(forKey: id) }
    }

    /// The budget, what the ledger holds now, and which traffic labels go over metered links (nil: no budget).
    func setBudget(_ budget: MeteredBudget?, booked: Int64, meteredDestinations: Set<String>, linkMetered: Bool,
                   destinations: Set<String>) {
        state.withLock {
            $0.budget = budget.map {
                Budget(bytes: $0.bytes, booked: booked, description: $0.description,
                       meteredLabels: meteredDestinations, othersMetered: linkMetered, configured: destinations)
            }
        }
    }

    /// The bytes the ledger holds, as the booking that is being written will leave it.
    func setBooked(_ booked: Int64) {
        state.withLock { $0.budget?.booked = booked }
    }

    /// Throws the stop the scheduler asked for; an `interrupted` failure when the power does not meet
    /// `requirement` now; or, for a transfer on a metered link that does not ignore the budget, one once the budget
    /// is spent (what was sent since the last booking counts).
    func check(_ id: JobID, requirement: PowerRequirement = .any, metered: Bool, ignoresBudget: Bool)
        throws(TransferFailure)
    {
        let (stop, budget) = state.withLock { ($0.stops[id], $0.budget) }
        if let stop { throw stop }
        if requirement != .any, let power, let unmet = power.current(fresh: true).unmet(requirement) {
            throw TransferFailure(.interrupted, code: WaitingReason.power.rawValue, """
                stopped before the next chunk for the power: \(unmet); it resumes from its confirmed offset
                """)
        }
        guard metered, !ignoresBudget, let budget else { return }
        let unbooked = traffic?.peek { label in
            budget.configured.contains(label) ? budget.meteredLabels.contains(label) : budget.othersMetered
        } ?? 0
        if budget.booked + unbooked >= budget.bytes {
            throw TransferFailure(.interrupted, code: WaitingReason.budgetSpent.rawValue, """
                stopped before the next chunk: the metered budget (\(budget.description)) is spent; it resumes from \
                its confirmed offset when the budget resets or the link is unmetered
                """)
        }
    }
}
