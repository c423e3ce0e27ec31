import Foundation

/// Whether the queue's database takes writes, as the scheduler sees it round after round: the cause of a spell of
/// failures (said once, not every second), since when (for `--exit-when-idle`'s give-up), and when the space
/// reserve was last looked at. Decisions only, tested without I/O; the scheduler logs and acts on them.
struct StoreHealth: Sendable, Equatable {
    /// What the scheduler should do after an event.
    enum Action: Sendable, Equatable {
        /// Say why the queue cannot be written: a new cause.
        case report(String, diskFull: Bool)
        /// Give the space reserve back, so what finishes can be recorded (a full disk).
        case releaseReserve
        /// Say that the queue can be written again.
        case recovered
        /// Look whether the space reserve must be made again.
        case checkReserve
    }

    /// The cause of the current spell of failures; nil while writes go through.
    private(set) var trouble: String?
    /// When the spell began.
    private(set) var since: ContinuousClock.Instant?
    private var reserveCheckedAt: ContinuousClock.Instant?
    /// How often a missing reserve is looked at.
    let reserveInterval: Duration

    init(reserveInterval: Duration = .seconds(30)) {
        self.reserveInterval = reserveInterval
    }

    /// A write failed for `reason`.
    mutating func failed(_ reason: String, diskFull: Bool, at now: ContinuousClock.Instant) -> [Action] {
        var actions: [Action] = diskFull ? [.releaseReserve] : []
        if since == nil { since = now }
        if trouble != reason {
            trouble = reason
            actions.append(.report(reason, diskFull: diskFull))
        }
        return actions
    }

    /// A round's writes went through; `unsettled` transfer ends still wait to be recorded (the spell lasts
    /// until they are).
    mutating func succeeded(unsettled: Int, at now: ContinuousClock.Instant) -> [Action] {
        var actions: [Action] = []
        if trouble != nil, unsettled == 0 {
            trouble = nil
            since = nil
            actions.append(.recovered)
        }
        if trouble == nil, reserveCheckedAt.map({ now - $0 >= reserveInterval }) ?? true {
            reserveCheckedAt = now
            actions.append(.checkReserve)
        }
        return actions
    }

    /// Whether the spell has lasted longer than `limit` (a batch run then stops waiting).
    func hasLasted(_ limit: Duration, at now: ContinuousClock.Instant) -> Bool {
        since.map { now - $0 > limit } ?? false
    }
}
