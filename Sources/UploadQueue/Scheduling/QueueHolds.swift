import Foundation

/// Why whole destinations wait: offline, a metered link, an open circuit, or every slot busy. One entry per cause,
/// which the scheduler records when it changes, instead of a reason written into every row.
///
/// A job's waiting reason is derived from it (`reason(for:)`) where it is shown, so what a pass of the scheduler
/// costs does not grow with the number of jobs that wait.
struct QueueHolds: Sendable, Equatable {
    /// One cause that holds back the jobs of a destination (or of the whole queue).
    struct Hold: Sendable, Hashable {
        /// A destination's name, or `QueueHolds.wholeQueue`.
        var scope: String
        var reason: WaitingReason
        /// For `metered-link`: the destination's own limit; a job at least this large waits unless its own
        /// policy lets it go (`MeteredPolicy.sizeLimit`). 0 holds every job without one.
        var meteredBelow: Int64? = nil
    }

    /// The scope of a hold on every destination (`concurrency`).
    static let wholeQueue = ""

    private(set) var entries: Set<Hold>

    init(_ entries: some Sequence<Hold> = []) {
        self.entries = Set(entries)
    }

    /// The holds the scheduler's view makes: offline and metered links of the destinations that move bytes over the
    /// network, open circuits, and busy slots.
    static func make(destinations: [String: Destination], links: [String: LinkStatus], openCircuits: Set<String>,
                     quotaFull: Set<String> = [], slotsFull: Bool) -> QueueHolds {
        var holds: [Hold] = []
        for (name, destination) in destinations where destination.isNetwork {
            switch links[name]?.linkClass {
            case .offline: holds.append(Hold(scope: name, reason: .offline))
            case .metered:
                holds.append(Hold(scope: name, reason: .meteredLink, meteredBelow: destination.onMetered.sizeLimit))
            case .unmetered, nil: break
            }
        }
        for name in openCircuits { holds.append(Hold(scope: name, reason: .circuitOpen)) }
        for name in quotaFull { holds.append(Hold(scope: name, reason: .quotaFull)) }
        if slotsFull { holds.append(Hold(scope: wholeQueue, reason: .concurrency)) }
        return QueueHolds(holds)
    }

    /// The hold for `reason` on `scope`, if any.
    func hold(_ reason: WaitingReason, on scope: String) -> Hold? {
        entries.first { $0.scope == scope && $0.reason == reason }
    }

    /// Destinations whose circuit is open.
    var openCircuits: Set<String> {
        Set(entries.filter { $0.reason == .circuitOpen }.map(\.scope))
    }

    /// Destinations whose storage is full.
    var quotaFull: Set<String> {
        Set(entries.filter { $0.reason == .quotaFull }.map(\.scope))
    }

    /// Why a job does not move, the strongest cause first: its link is offline, the metered link does not let it
    /// go, its destination's circuit is open, its storage is full, every slot is busy. nil for a job that is not pending or that
    /// nothing holds (no row carries a reason of its own since migration v7).
    func reason(for job: Job) -> WaitingReason? {
        guard job.state == .pending else { return nil }
        if hold(.offline, on: job.destination) != nil { return .offline }
        if let metered = hold(.meteredLink, on: job.destination),
           job.size >= job.meteredBelow ?? metered.meteredBelow ?? 0 {
            return .meteredLink
        }
        if hold(.circuitOpen, on: job.destination) != nil { return .circuitOpen }
        if hold(.quotaFull, on: job.destination) != nil { return .quotaFull }
        if hold(.concurrency, on: Self.wholeQueue) != nil, job.intakeComplete, !job.cancelRequested {
            return .concurrency
        }
        return nil
    }

    /// `job` with its derived waiting reason.
    func explained(_ job: Job) -> Job {
        var job = job
        job.waitingReason = reason(for: job)
        return job
    }
}
