import Foundation
import Logging
import ServiceLifecycle

/// Feeds systemd's watchdog (`WatchdogSec=`): `WATCHDOG=1` at half the interval systemd asks for, but only while
/// the queue is healthy (scheduler loop and transfer engine going round, database answering), so a wedged daemon
/// is restarted rather than kept alive by a timer.
package struct SystemdWatchdog: Service {
    let queue: UploadQueue
    let notifier: SystemdNotifier
    let interval: Duration
    let logger: Logger

    /// The watchdog systemd asked for through `$WATCHDOG_USEC` (and `$WATCHDOG_PID`, when it names this
    /// process); nil when there is none.
    package init?(queue: UploadQueue, notifier: SystemdNotifier, logger: Logger,
                 environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let text = environment["WATCHDOG_USEC"], let microseconds = Int64(text), microseconds > 0 else { return nil }
        if let pid = environment["WATCHDOG_PID"].flatMap({ Int32($0) }), pid != getpid() { return nil }
        self.queue = queue
        self.notifier = notifier
        self.logger = logger
        interval = .microseconds(microseconds / 2)
    }

    package func run() async throws {
        await cancelWhenGracefulShutdown {
            var complained = false
            while !Task.isCancelled {
                // A shutdown cancels the sleep: that is the normal end, not a failure of the group.
                try? await Task.sleep(for: interval)
                if Task.isCancelled { break }
                if await queue.isHealthy() {
                    notifier.notify("WATCHDOG=1", patience: .zero)
                    complained = false
                } else if !complained {
                    logger.warning("not feeding the systemd watchdog: the scheduler, the transfer engine or the database does not answer")
                    complained = true
                }
            }
        }
    }
}
