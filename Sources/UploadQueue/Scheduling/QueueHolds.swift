import Foundation

/// Why whole destinations wait: offline, the power, a metered link or its spent budget, outside the upload windows,
/// an open circuit, a full storage, an answer that proved nothing, or every slot busy. One entry per cause, which the scheduler records when it
/// changes, instead of a reason written into every row.
///
/// A job's waiting reasons are derived from it (`holds(for:)`) where they are shown, so what a pass of the
/// scheduler costs does not grow with the number of jobs that wait.
struct QueueHolds: Sendable, Equatable {
    /// One cause that holds back the jobs of a destination (or of the whole queue).
    struct Hold: Sendable, Hashable {
        /// A destination's name, or `QueueHolds.wholeQueue`.
        var scope: String
        var reason: WaitingReason
        /// For `metered-link` and `budget-spent`: the destination's own limit; a job at least this large waits
        /// unless its own policy lets it go (`MeteredPolicy.sizeLimit`). 0 holds every job without one.
        var meteredBelow: Int64? = nil
        /// When it is expected to clear, where that is known: a window opens, a budget resets.
        var until: Date? = nil
        /// For `outside-window`: jobs of at least this priority pass (`[schedule] urgent_priority`).
        var minimumPriority: Int? = nil
        /// For `budget-spent`: the destination's jobs without a policy of their own ignore the budget (`always`).
        var ignoresBudget = false
        /// A word on it: what the power lacks, which budget is spent.
        var detail: String? = nil
        /// For `budget-spent` on a destination that sends whole files while some budget is left: only files larger
        /// than this (what is left) wait. nil: the budget is spent.
        var sizeAbove: Int64? = nil
    }

    /// The scope of a hold on every destination (`concurrency`).
    static let wholeQueue = ""

    private(set) var entries: Set<Hold>
    /// Every owner's turns with runnable jobs, where reasons are shown (`QueueStore.displayHolds`): a job that
    /// would wait for a free slot waits for its turn (`fair-share`) when another owner's job of an earlier turn
    /// goes first.
    var turns: [FairShare.Turns] = []

    init(_ entries: some Sequence<Hold> = [], turns: [FairShare.Turns] = []) {
        self.entries = Set(entries)
        self.turns = turns
    }

    /// The holds the scheduler's view makes, and `concurrency` when every slot is busy.
    static func make(conditions: [String: DestinationConditions], slotsFull: Bool) -> QueueHolds {
        var holds: [Hold] = []
        for (name, condition) in conditions {
            switch condition.linkClass {
            case .offline: holds.append(Hold(scope: name, reason: .offline))
            case .portal: holds.append(Hold(scope: name, reason: .portal))
            case .metered:
                let below = condition.onMetered.sizeLimit
                holds.append(Hold(scope: name, reason: .meteredLink, meteredBelow: below))
                if let spent = condition.budgetSpent {
                    let detail = spent.sizeAbove.map { "\(spent.budget): \(ByteCountText.text($0)) left" } ?? spent.budget
                    holds.append(Hold(scope: name, reason: .budgetSpent, meteredBelow: below,
                                      until: spent.resetsAt.wholeSeconds,
                                      ignoresBudget: condition.onMetered.ignoresBudget, detail: detail,
                                      sizeAbove: spent.sizeAbove))
                }
            case .unmetered, nil: break
            }
            if let power = condition.power { holds.append(Hold(scope: name, reason: .power, detail: power)) }
            if let window = condition.outsideWindow {
                holds.append(Hold(scope: name, reason: .outsideWindow, until: window.opensAt?.wholeSeconds,
                                  minimumPriority: window.urgentPriority))
            }
            if condition.circuitOpen { holds.append(Hold(scope: name, reason: .circuitOpen)) }
            if condition.quotaFull { holds.append(Hold(scope: name, reason: .quotaFull)) }
            if let answer = condition.unverifiedAnswer {
                holds.append(Hold(scope: name, reason: .unverifiedAnswer, detail: answer))
            }
        }
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

    /// Destinations whose answers proved nothing, with what answered.
    var unverifiedAnswers: [String: String] {
        Dictionary(entries.filter { $0.reason == .unverifiedAnswer }.map { ($0.scope, $0.detail ?? "") }) { first, _ in first }
    }

    /// Everything that keeps a pending job from starting, the strongest cause first: its link is offline or
    /// behind a captive portal, the power, the metered link does not let it go (or its budget is spent), it is outside its windows, its
    /// destination's circuit is open, its storage is full, every slot is busy. Empty for a job that is not pending
    /// or that nothing holds (no row carries a reason of its own since migration v7). Every slot busy is
    /// `fair-share` for a job other owners' turns come before.
    func holds(for job: Job) -> [Hold] {
        guard job.state == .pending else { return [] }
        var found: [Hold] = []
        if job.state == .pending, let blocker = job.blockedBy {
            let inLane = job.lane != nil && job.blockedKind != .after
            found.append(Hold(scope: job.destination, reason: inLane ? .lane : .prerequisite,
                              meteredBelow: nil, until: nil, minimumPriority: nil, ignoresBudget: false,
                              detail: "job \(blocker)", sizeAbove: nil))
        }
        let scope = job.destination
        if let hold = hold(.offline, on: scope) { found.append(hold) }
        if let hold = hold(.portal, on: scope) { found.append(hold) }
        if let hold = hold(.power, on: scope) { found.append(hold) }
        if let metered = hold(.meteredLink, on: scope) {
            if job.size >= job.meteredBelow ?? metered.meteredBelow ?? 0 {
                found.append(metered)
            } else if let spent = hold(.budgetSpent, on: scope), job.size > spent.sizeAbove ?? -1 {
                let ignores = job.onMetered.map { $0 == "always" } ?? spent.ignoresBudget
                if !ignores { found.append(spent) }
            }
        }
        if let window = hold(.outsideWindow, on: scope), job.priority < window.minimumPriority ?? .max {
            found.append(window)
        }
        if let hold = hold(.circuitOpen, on: scope) { found.append(hold) }
        if let hold = hold(.quotaFull, on: scope) { found.append(hold) }
        if let hold = hold(.unverifiedAnswer, on: scope) { found.append(hold) }
        if found.isEmpty, let hold = hold(.concurrency, on: Self.wholeQueue), job.intakeComplete, !job.cancelRequested {
            let waitsForTurn = FairShare.waitsForTurn(turn: job.fairKey ?? 0, owner: FairShare.owner(job.ownerUID),
                                                      destination: job.destination, priority: job.priority,
                                                      among: turns)
            found.append(waitsForTurn ? Hold(scope: Self.wholeQueue, reason: .fairShare) : hold)
        }
        return found
    }

    /// The strongest reason a job waits (see `holds(for:)`).
    func reason(for job: Job) -> WaitingReason? {
        holds(for: job).first?.reason
    }

    /// `job` with its derived waiting reasons.
    func explained(_ job: Job) -> Job {
        // Claimed ahead for the runner's next free slot: its own wait, which no hold explains.
        if job.state == .uploading, job.waitingReason == .concurrency { return job }
        var job = job
        let holds = holds(for: job)
        job.waitingReason = holds.first?.reason
        job.waitingHolds = holds.map(WaitingHold.init)
        return job
    }
}

extension Date {
    /// The date rounded down to a whole second: what holds record, so a time read back compares equal.
    var wholeSeconds: Date { Date(timeIntervalSince1970: timeIntervalSince1970.rounded(.down)) }
}
