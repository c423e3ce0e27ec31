import Dispatch

/// Where a command of the CLI runs its tasks (`withTaskExecutorPreference`): threads of a dispatch queue marked as
/// ones that may block, not Swift's pool. A command opens the queue and queries it from its tasks; the process has
/// no other work those threads could hold up, and the check (`BlockingCheck`) holds for every command as it does
/// for the daemon. The daemon itself runs on the pool, its blocking work on `BlockingWork` and its actors' threads.
package final class CommandExecutor: TaskExecutor {
    private let queue = DispatchQueue(label: "uploadq.command", qos: .userInitiated, attributes: .concurrent)

    package init() {}

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        queue.async { BlockingCheck.mayBlock { () throws(Never) in job.runSynchronously(on: executor) } }
    }
}
