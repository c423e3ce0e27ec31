import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import UploadQueue

/// `uploadq daemon`: runs the queue and the spool watcher in the foreground until SIGTERM/SIGINT.
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Run the upload service in the foreground until SIGTERM or SIGINT.")

    @OptionGroup var options: GlobalOptions

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(help: "Log lines as text (for people) or json (one object per line, for log shippers).")
    var logFormat: String = "text"

    @Flag(help: "Exit once no job is pending or uploading (batch use: drain the queue, then stop).")
    var exitWhenIdle = false

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("unknown log level '\(logLevel)'")
        }
        guard let format = StderrLogHandler.Format(rawValue: logFormat) else {
            throw ValidationError("unknown log format '\(logFormat)' (text or json)")
        }
        let logger = Logger(label: "uploadq") { StderrLogHandler(label: $0, level: level, format: format) }
        // The debug build under test stops at a blocking call on Swift's shared threads.
        BlockingCheck.enforceIfAsked()
        // The daemon holds tokens and keys: no core dump, no ptrace by its user's other processes.
        for failure in ProcessHardening.apply() {
            logger.warning("cannot turn core dumps off (\(failure)); the daemon runs on")
        }
        if let failure = AllocatorSettings.apply() {
            logger.warning("cannot set the allocator's thresholds (\(failure)); the daemon runs on with glibc's defaults")
        }
        if let failure = ProcessHardening.reapHelpers() {
            logger.warning("a helper that leaves with setsid may outlive its deadline (\(failure)); the daemon runs on")
        }
        let notifier = SystemdNotifier()
        // Waiting for room on a full disk keeps systemd's start timeout from killing the start, and says why; any
        // other hang before READY=1 still meets that timeout.
        let queue = try await options.openQueueWaitingForRoom(level: level, format: format, logger: logger,
                                                              giveUp: exitWhenIdle) {
            notifier.notify("STATUS=waiting for room on the queue's disk\nEXTEND_TIMEOUT_USEC=30000000")
        }
        let configuration = queue.configuration
        let queueServices = try await queue.services(exitWhenIdle: exitWhenIdle) {
            logger.info("uploadq daemon ready", metadata: [
                "config": "\(configuration.file ?? ConfigurationLoader.embeddedName)",
                "state_dir": "\(configuration.stateDirectory)",
                "spool": "\(configuration.spool?.directory ?? "none")",
            ])
            notifier.notify("READY=1\nSTATUS=uploading; spool \(configuration.spool?.directory ?? "none")")
        }
        // One group, stopped in the reverse of this order: the spool watcher first (no new intake once stopping),
        // the watchdog (stopping is systemd's stop timeout's business), then the queue's services. With
        // --exit-when-idle the scheduler finishing is the normal end: the rest of the group stops gracefully.
        var services = queueServices
        if let watchdog = SystemdWatchdog(queue: queue, notifier: notifier, logger: logger) {
            services.append(.init(service: watchdog, successTerminationBehavior: .ignore,
                                  failureTerminationBehavior: .gracefullyShutdownGroup))
        }
        if let spool = configuration.spool {
            // A spool that cannot be watched stops the daemon, said, with the queue's parts stopped in order.
            services.append(.init(service: SpoolWatcher(spool: spool, queue: queue, logger: logger),
                                  successTerminationBehavior: .ignore, failureTerminationBehavior: .gracefullyShutdownGroup))
        }
        let group = ServiceGroup(configuration: .init(
            services: services,
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
        do {
            try await group.run()
            notifier.notify("STOPPING=1")
            logger.info("uploadq daemon stopped")
        } catch let error as UploadQueueError {
            printError("uploadq: \(error)")
            throw CLIExit.failure.code
        } catch {
            printError("uploadq: daemon stopped: \(error)")
            throw CLIExit.failure.code
        }
    }
}
