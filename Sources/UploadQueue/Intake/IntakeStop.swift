import Synchronization

/// Tells intakes under way to stop reading: the daemon is shutting down (the spool's), or the client that asked
/// for the enqueue left or the daemon stops (a control API request's). A file half-hashed (a large one takes
/// minutes) is left where it is, and nothing is queued for it.
final class IntakeStop: Sendable {
    private let stopped = Atomic<Bool>(false)
    /// Why it stops and what becomes of the file, as the error says it.
    private let why: String

    /// A stop for intakes that are told `why` when it comes (by default the spool's words).
    init(why: String = "the daemon is shutting down; it is left where it is and taken at the next start") {
        self.why = why
    }

    /// Stops every intake that checks this, at its next block.
    func stop() { stopped.store(true, ordering: .releasing) }

    /// Whether `stop()` was called.
    var isStopped: Bool { stopped.load(ordering: .acquiring) }

    /// Throws `interrupted` once stopped; `path` is the file being read.
    func check(path: String, job: JobID? = nil) throws(UploadQueueError) {
        guard isStopped else { return }
        throw UploadQueueError(.interrupted, "the intake stopped before the file was read whole (\(why))", job: job,
                               path: path)
    }
}
