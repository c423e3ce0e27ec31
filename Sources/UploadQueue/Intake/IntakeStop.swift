import Synchronization

/// Tells intakes under way to stop reading: the daemon is shutting down, and a file half-hashed (a large one
/// takes minutes) is left where it is, to be taken again at the next start.
final class IntakeStop: Sendable {
    private let stopped = Atomic<Bool>(false)

    /// Stops every intake that checks this, at its next block.
    func stop() { stopped.store(true, ordering: .releasing) }

    /// Whether `stop()` was called.
    var isStopped: Bool { stopped.load(ordering: .acquiring) }

    /// Throws `interrupted` once stopped; `path` is the file being read.
    func check(path: String, job: JobID? = nil) throws(UploadQueueError) {
        guard isStopped else { return }
        throw UploadQueueError(.interrupted, "the intake stopped (the daemon is shutting down) before the file was "
            + "read whole; it is left where it is and taken at the next start", job: job, path: path)
    }
}
