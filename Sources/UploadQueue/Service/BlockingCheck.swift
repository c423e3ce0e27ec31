import CUploadQueueSystem
import Glibc
import Synchronization

/// Where blocking work (SQLite, an fsync) may run: on the threads uploadq keeps for it (an actor's own
/// `ActorThread`, the `BlockingWork` queues while they run it) or on a thread with no task (libcurl's, NIO's), never
/// on one of Swift's cooperative threads, on which every other task of the process waits its turn (two of them on a
/// 2-core device).
///
/// The debug build checks it where the queue's database is reached (`QueueStore`): a daemon started with
/// `UPLOADQ_BLOCKING_CHECK=trap` stops at the first blocking call on a cooperative thread, naming it, so every
/// test that runs the daemon fails on one. The release build checks nothing.
package enum BlockingCheck {
    private static let enforced = Atomic<Bool>(false)

    /// Turns the check on when the environment asks (`UPLOADQ_BLOCKING_CHECK=trap`), in the debug build; the
    /// daemon asks at its start, before it opens the queue.
    package static func enforceIfAsked() {
        #if DEBUG
        if getenv("UPLOADQ_BLOCKING_CHECK").map({ String(cString: $0) }) == "trap" {
            enforced.store(true, ordering: .relaxed)
        }
        #endif
    }

    /// Whether the calling thread is marked as one that may block (an actor's own thread, blocking work running).
    static var mayBlockNow: Bool { uploadq_thread_may_block() != 0 }

    /// Whether the calling thread is one of Swift's cooperative threads as far as blocking goes: a task runs on it,
    /// and it is none of the threads kept for blocking work.
    static var onCooperativeThread: Bool {
        !mayBlockNow && withUnsafeCurrentTask { $0 != nil }
    }

    /// Stops the process (when the check is on) if `what`, a blocking call, runs on a cooperative thread.
    @inline(__always)
    static func check(_ what: @autoclosure () -> String) {
        #if DEBUG
        guard enforced.load(ordering: .relaxed), onCooperativeThread else { return }
        preconditionFailure("blocking work on a cooperative thread: \(what()); run it on BlockingWork or an actor's "
            + "ActorThread")
        #endif
    }

    /// Runs `body` with the calling thread marked as one that may block (the blocking-work queues' threads, for
    /// the time they run it), restoring the mark after.
    static func mayBlock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let was = uploadq_thread_set_may_block(1)
        defer { uploadq_thread_set_may_block(was) }
        return try body()
    }
}
