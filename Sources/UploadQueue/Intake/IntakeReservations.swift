import Synchronization

/// What the intakes under way in this process admitted and have not recorded yet: bytes on the state disk, and each
/// dropper's jobs and bytes. The checks of room (`min_free_space`) and of quotas count them, so intakes at once (a
/// dropper's four through the API, the spool's, the admin's) cannot together go past what each alone may.
final class IntakeReservations: Sendable {
    private struct State {
        var bytes: Int64 = 0
        var owners: [UInt32: OwnerQuota.Holding] = [:]
    }

    private let state = Mutex(State())

    /// What one admitted intake holds until it is recorded or given up: released when the last reference to it goes.
    final class Reservation: Sendable {
        private let ledger: IntakeReservations
        let bytes: Int64
        let owner: UInt32?
        let size: Int64

        fileprivate init(ledger: IntakeReservations, bytes: Int64, owner: UInt32?, size: Int64) {
            self.ledger = ledger
            self.bytes = bytes
            self.owner = owner
            self.size = size
        }

        deinit { ledger.release(self) }
    }

    /// Admits an intake that writes `bytes` to the state disk for a file of `size` of `owner` (a dropper's, or nil),
    /// if `refusal` (given what the intakes under way hold: bytes in all, and the owner's) finds nothing to refuse;
    /// the reservation holds it until it goes.
    func admit(bytes: Int64, size: Int64, owner: UInt32?,
               refusal: (_ bytesUnderWay: Int64, _ ownerUnderWay: OwnerQuota.Holding) -> UploadQueueError?)
        throws(UploadQueueError) -> Reservation
    {
        let refused = state.withLock { state -> UploadQueueError? in
            let own = owner.flatMap { state.owners[$0] } ?? OwnerQuota.Holding(jobs: 0, bytes: 0)
            if let refused = refusal(state.bytes, own) { return refused }
            state.bytes += bytes
            if let owner { state.owners[owner] = OwnerQuota.Holding(jobs: own.jobs + 1, bytes: own.bytes + size) }
            return nil
        }
        if let refused { throw refused }
        return Reservation(ledger: self, bytes: bytes, owner: owner, size: size)
    }

    private func release(_ reservation: Reservation) {
        state.withLock { state in
            state.bytes -= reservation.bytes
            guard let owner = reservation.owner, var own = state.owners[owner] else { return }
            own.jobs -= 1
            own.bytes -= reservation.size
            state.owners[owner] = own.jobs > 0 ? own : nil
        }
    }
}
