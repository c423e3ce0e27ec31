/// Which ready spool files are taken now: a few at once, their owners taking turns.
///
/// Droppers are strangers: one user's large files must not hold up another's photo. So `slots` files are read
/// (hashed, copied) at once, one owner holds at most `slots - 1` of them (a slot stays free for everyone else),
/// and among owners with files ready, the one served longest ago goes first. Pure: the watcher does the I/O.
struct IntakeTurns: Sendable, Equatable {
    /// A file ready to be taken, and whose it is.
    struct Ready: Sendable, Equatable {
        var name: String
        var owner: UInt32
    }

    /// Files read at once.
    let slots: Int
    /// The files being taken, by name, with their owners.
    private(set) var inFlight: [String: UInt32] = [:]
    /// Owners in the order they were last served, longest ago first.
    private var served: [UInt32] = []

    /// Turns with `slots` files at once (at least 2, so one owner never has them all).
    init(slots: Int = 3) {
        self.slots = max(2, slots)
    }

    /// The files to start now, from `ready` (in the order each owner wants them taken), marked in flight.
    mutating func pick(_ ready: [Ready]) -> [String] {
        var waiting: [UInt32: [String]] = [:]
        var owners: [UInt32] = []
        for file in ready where inFlight[file.name] == nil {
            if waiting[file.owner] == nil { owners.append(file.owner) }
            waiting[file.owner, default: []].append(file.name)
        }
        var started: [String] = []
        while inFlight.count < slots {
            let held = Dictionary(grouping: inFlight.values, by: { $0 }).mapValues(\.count)
            // Owners that may start one more, the one served longest ago (or never) first.
            let eligible = owners.filter { !(waiting[$0]?.isEmpty ?? true) && held[$0, default: 0] < slots - 1 }
            guard let owner = eligible.min(by: { rank($0) < rank($1) }), let name = waiting[owner]?.removeFirst()
            else { break }
            inFlight[name] = owner
            served.removeAll { $0 == owner }
            served.append(owner)
            started.append(name)
        }
        return started
    }

    /// A file's intake ended (taken, rejected, left for later): its slot is free.
    mutating func finished(_ name: String) {
        inFlight[name] = nil
    }

    /// Where `owner` stands in the turns: never served first, then longest ago first.
    private func rank(_ owner: UInt32) -> Int {
        served.firstIndex(of: owner) ?? -1
    }
}
