import Foundation

/// Which destinations a claim may take jobs from now, and on what terms: the link, circuit and constraint filters
/// of a claim, as a small value the store turns into one indexed query (`QueueStore.claim`).
struct ClaimGate: Sendable, Equatable {
    /// The terms on which one destination's jobs may start.
    enum Door: Sendable, Equatable {
        /// Any of its runnable jobs.
        case open
        /// Its link is metered: only jobs smaller than their own limit (`Job.meteredBelow`), or than this one
        /// (the destination's `on_metered`) when they have none.
        case metered(below: Int64)
    }

    /// The destinations whose jobs may be claimed; a destination missing here is held (offline, open circuit).
    var doors: [String: Door]

    /// The gate of the scheduler's view of things: a destination whose link is offline or whose circuit is open
    /// stays shut; one on a metered link lets through what its policy allows. `strays` are destinations of queued
    /// jobs that are no longer configured: open, so their jobs are claimed and fail with a clear reason.
    static func make(destinations: [String: Destination], links: [String: LinkStatus], openCircuits: Set<String>,
                     strays: Set<String> = []) -> ClaimGate {
        var doors: [String: Door] = [:]
        for name in strays where destinations[name] == nil { doors[name] = .open }
        for (name, destination) in destinations where !openCircuits.contains(name) {
            guard destination.isNetwork else {
                doors[name] = .open
                continue
            }
            switch links[name]?.linkClass {
            case .offline: continue
            case .metered: doors[name] = .metered(below: destination.onMetered.sizeLimit)
            case .unmetered, nil: doors[name] = .open
            }
        }
        return ClaimGate(doors: doors)
    }
}
