import Synchronization

/// What the intakes under way in this process admitted and have not recorded yet: bytes on the state disk, and each
/// dropper's jobs and bytes. The checks of room (`min_free_space`) and of quotas count them, so intakes at once (a
/// dropper's four through the API, the spool's, the admin's) cannot together go past what each alone may.
final class IntakeReservations: Sendable {
    private struct State {
        var bytes: Int64 = 0
        var owners: [UInt32: OwnerQuota.Holding] = [:]
        /// Reservations released so far (their jobs recorded, or given up): an owner's holding read from the queue
        /// before one, and judged after it, may count that job in neither.
        var releases = 0
    }

    private let state = Mutex(State())

    /// What one admitted intake holds until it is recorded or given up: released when the last reference to it goes.
    final class Reservation: Sendable {
        private let ledger: IntakeReservations
        /// The bytes of its copy (none when the file is adopted), counted until the copy is written.
        let copyBytes: Int64
        /// The bytes of its row.
        let rowBytes: Int64
        let owner: UInt32?
        let size: Int64
        private let copyWritten = Mutex(false)
        private let released = Mutex(false)

        fileprivate init(ledger: IntakeReservations, copyBytes: Int64, rowBytes: Int64, owner: UInt32?, size: Int64) {
            self.ledger = ledger
            self.copyBytes = copyBytes
            self.rowBytes = rowBytes
            self.owner = owner
            self.size = size
        }

        /// The copy is on the disk: the free space measured from now on counts it, so the reservation no longer
        /// does (the quota's part stays until the job is recorded).
        func copied() {
            guard copyWritten.withLock({ written in defer { written = true }; return !written }) else { return }
            ledger.unreserve(copyBytes)
        }

        /// The bytes still reserved on the disk.
        fileprivate var bytesHeld: Int64 { rowBytes + (copyWritten.withLock { $0 } ? 0 : copyBytes) }

        /// Its row is committed: the queue counts the job from now on (its holding, the disk's free space), so
        /// the reservation no longer does. Until then the job counts here alone; after, in the queue alone.
        func recorded() {
            guard released.withLock({ released in defer { released = true }; return !released }) else { return }
            ledger.release(self)
        }

        deinit { recorded() }
    }

    /// Admits an intake that writes `copyBytes` and `rowBytes` to the state disk for a file of `size` of `owner`
    /// (a dropper's, or nil), if `refusal` (given what the intakes under way hold: bytes in all, and the owner's;
    /// and what `holding` read of the queue) finds nothing to refuse; the reservation holds it until it goes.
    /// `holding` reads the database outside the ledger's lock (nothing blocks on it); read again when a
    /// reservation was released meanwhile (its job recorded), so that job counts in the queue or in the ledger.
    func admit(copyBytes: Int64, rowBytes: Int64, size: Int64, owner: UInt32?,
               holding: () throws(UploadQueueError) -> OwnerQuota.Holding,
               refusal: (_ bytesUnderWay: Int64, _ ownerUnderWay: OwnerQuota.Holding, _ held: OwnerQuota.Holding)
                   -> UploadQueueError?)
        throws(UploadQueueError) -> Reservation
    {
        enum Verdict { case admitted, refused(UploadQueueError), readAgain }
        var attempt = 0
        while true {
            attempt += 1
            let releases = state.withLock { $0.releases }
            let held = try holding()
            let verdict = state.withLock { state -> Verdict in
                // The insert's transaction checks the quota again: a last read overtaken costs no more than a copy.
                if state.releases != releases, attempt < Self.reads { return .readAgain }
                let own = owner.flatMap { state.owners[$0] } ?? OwnerQuota.Holding(jobs: 0, bytes: 0)
                if let refused = refusal(state.bytes, own, held) { return .refused(refused) }
                state.bytes += copyBytes + rowBytes
                if let owner { state.owners[owner] = OwnerQuota.Holding(jobs: own.jobs + 1, bytes: own.bytes + size) }
                return .admitted
            }
            switch verdict {
            case .admitted: return Reservation(ledger: self, copyBytes: copyBytes, rowBytes: rowBytes, owner: owner, size: size)
            case .refused(let error): throw error
            case .readAgain: continue
            }
        }
    }

    /// How many times `admit` reads an owner's holding at most.
    private static let reads = 3

    /// Bytes a reservation no longer holds on the disk.
    fileprivate func unreserve(_ bytes: Int64) {
        state.withLock { $0.bytes -= bytes }
    }

    private func release(_ reservation: Reservation) {
        state.withLock { state in
            state.releases += 1
            state.bytes -= reservation.bytesHeld
            guard let owner = reservation.owner, var own = state.owners[owner] else { return }
            own.jobs -= 1
            own.bytes -= reservation.size
            state.owners[owner] = own.jobs > 0 ? own : nil
        }
    }
}
