import Foundation
import Synchronization

/// How many requests of one kind each dropper may have in flight at once (its enqueues, its listings): more are
/// answered 429. The queue's own user and root are held to none.
final class PerUserSlots: Sendable {
    private let counts = Mutex<[uid_t: Int]>([:])
    let limit: Int
    /// What is counted, for the answer: `listings`, `enqueues`.
    let what: String

    init(limit: Int, what: String) {
        self.limit = limit
        self.what = what
    }

    /// Takes a slot of `peer`'s, or answers 429; give it back with `give`.
    func take(_ peer: ControlPeer) throws(ControlAPIError) {
        guard !peer.isAdmin else { return }
        let taken = counts.withLock { counts -> Bool in
            guard counts[peer.uid, default: 0] < limit else { return false }
            counts[peer.uid, default: 0] += 1
            return true
        }
        guard taken else {
            throw ControlAPIError(429, "too-many-requests", "\(limit) of your \(what) are being answered already; send "
                + "the next once one is")
        }
    }

    func give(_ peer: ControlPeer) {
        guard !peer.isAdmin else { return }
        counts.withLock { counts in
            counts[peer.uid, default: 1] -= 1
            if counts[peer.uid] == 0 { counts[peer.uid] = nil }
        }
    }

    /// A slot taken for `peer`, given back once, by whichever comes first of its holders (the reply written, a wait
    /// begun, an error), or when the last of them lets it go.
    final class Slot: Sendable {
        private let slots: PerUserSlots
        private let peer: ControlPeer
        private let given = Atomic(false)

        init(_ slots: PerUserSlots, _ peer: ControlPeer) {
            self.slots = slots
            self.peer = peer
        }

        func give() {
            guard !given.exchange(true, ordering: .acquiringAndReleasing) else { return }
            slots.give(peer)
        }

        // A reply dropped unwritten (its connection gone) still gives its slot back.
        deinit { give() }
    }

    /// `take`, as a slot that gives itself back once.
    func slot(_ peer: ControlPeer) throws(ControlAPIError) -> Slot {
        try take(peer)
        return Slot(self, peer)
    }
}
