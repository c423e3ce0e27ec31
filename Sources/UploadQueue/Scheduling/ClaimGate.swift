import Foundation

/// Which destinations a claim may take jobs from now, and on what terms: the link, circuit and constraint filters
/// of a claim, as a small value the store turns into one indexed query (`QueueStore.claim`).
struct ClaimGate: Sendable, Equatable {
    /// The terms on which one destination's jobs may start.
    struct Door: Sendable, Equatable {
        /// On a metered link: only jobs smaller than their own limit (`Job.meteredBelow`), or than this one (the
        /// destination's `on_metered`) when they have none. nil: the link does not limit them.
        var meteredBelow: Int64?
        /// The metered budget is spent: only jobs that ignore it go (`on_metered = "always"`, their own, or their
        /// destination's when `destinationIgnoresBudget` and they have none).
        var budgetSpent = false
        var destinationIgnoresBudget = false
        /// Outside the upload windows: only jobs of at least this priority go.
        var minimumPriority: Int?
        /// Only jobs of at most this size go (a whole-file destination on a metered link: what is left of the
        /// budget).
        var maximumSize: Int64?

        /// Any of its runnable jobs.
        static let open = Door()

        /// On a metered link: jobs smaller than their own limit, or than `below` when they have none.
        static func metered(below: Int64) -> Door { Door(meteredBelow: below) }

        /// Whether `job` goes whatever is left of the metered budget (`always`, its own or, when it has none, its
        /// destination's).
        func exempts(_ job: Job) -> Bool {
            job.onMetered.map { $0 == "always" } ?? destinationIgnoresBudget
        }
    }

    /// A whole file took what is left of the metered budget: no other (but those that ignore the budget) may start
    /// through any door this claim.
    mutating func spendWholeFileBudget() {
        for name in doors.keys where doors[name]?.maximumSize != nil { doors[name]?.maximumSize = -1 }
    }

    /// The destinations whose jobs may be claimed; a destination missing here is held (offline, open circuit).
    var doors: [String: Door]

    /// The gate of the scheduler's view of things. `strays` are destinations of queued jobs that are no longer
    /// configured: open, so their jobs are claimed and fail with a clear reason.
    static func make(conditions: [String: DestinationConditions], strays: Set<String> = []) -> ClaimGate {
        var doors: [String: Door] = [:]
        for name in strays where conditions[name] == nil { doors[name] = .open }
        for (name, condition) in conditions where !condition.isShut {
            var door = Door.open
            if condition.linkClass == .metered {
                if let spent = condition.budgetSpent, spent.sizeAbove == nil {
                    door.budgetSpent = true
                    door.destinationIgnoresBudget = condition.onMetered.ignoresBudget
                } else {
                    door.meteredBelow = condition.onMetered.sizeLimit
                    door.maximumSize = condition.budgetSpent?.sizeAbove
                    door.destinationIgnoresBudget = condition.onMetered.ignoresBudget
                }
            }
            door.minimumPriority = condition.outsideWindow?.urgentPriority
            doors[name] = door
        }
        return ClaimGate(doors: doors)
    }
}
