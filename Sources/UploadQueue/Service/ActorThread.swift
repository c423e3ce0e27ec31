import CUploadQueueSystem
import Dispatch
import Foundation
import Synchronization

/// A serial executor with a thread of its own, for the actors whose methods call SQLite (or other blocking work)
/// directly: a write waiting out its busy timeout, or an fsync, then blocks this thread alone, never one of Swift's
/// cooperative threads (two on a 2-core device), on which every other task of the process runs.
///
/// An actor takes it as its `unownedExecutor`; the thread ends when the executor goes (with its actor).
final class ActorThread: SerialExecutor {
    private let state: State

    /// What the thread and the enqueuers share: the jobs to run, in order, and whether to stop.
    private final class State: Sendable {
        struct Queue {
            var jobs: [UnownedJob] = []
            var next = 0
            var stopping = false
        }

        let queue = Mutex(Queue())
        /// Signalled once per job, and once to stop.
        let ready = DispatchSemaphore(value: 0)
    }

    /// Starts the thread (named `name`, as `top` and a debugger show it).
    init(name: String) {
        let state = State()
        self.state = state
        // The thread runs jobs on this executor while it exists: a job is an actor's, and its actor holds the
        // executor. It never keeps the executor alive itself.
        let executor = UnownedSerialExecutor(ordinary: self)
        let thread = Thread {
            // What its actor runs may block: this thread is kept for that.
            _ = uploadq_thread_set_may_block(1)
            uploadq_thread_set_context(name)
            while true {
                state.ready.wait()
                let job = state.queue.withLock { queue -> UnownedJob? in
                    guard queue.next < queue.jobs.count else { return nil }
                    defer {
                        queue.next += 1
                        // What ran is dropped now and then, not one element at a time.
                        if queue.next == queue.jobs.count || queue.next >= 1024 {
                            queue.jobs.removeFirst(queue.next)
                            queue.next = 0
                        }
                    }
                    return queue.jobs[queue.next]
                }
                guard let job else {
                    if state.queue.withLock({ $0.stopping }) { return }
                    continue
                }
                job.runSynchronously(on: executor)
            }
        }
        thread.name = name
        thread.start()
    }

    deinit {
        state.queue.withLock { $0.stopping = true }
        state.ready.signal()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        state.queue.withLock { $0.jobs.append(job) }
        state.ready.signal()
    }
}
