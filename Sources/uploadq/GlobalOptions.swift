import ArgumentParser
import Foundation
import Logging
import UploadQueue

/// Options every command takes.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: "Config file (default: $UPLOADQ_CONFIG, ./Config/uploadq.toml, /etc/uploadq/uploadq.toml, else built-in).")
    var config: String?

    /// The configuration, or exit 1 with the loader's message (file, line, key).
    func loadConfiguration() throws -> Configuration {
        do {
            return try ConfigurationLoader.load(path: ConfigurationLoader.locate(explicit: config))
        } catch {
            printError("uploadq: config: \(error)")
            throw CLIExit.failure.code
        }
    }

    /// The running daemon's control API, when a daemon answers on it: a command that changes the queue goes
    /// through it, as every client does (the daemon wakes at once, and root or a member of `[api] group` is served
    /// as the daemon's rules say). Nil when no daemon runs: the command then changes the database directly, and
    /// says so with `directly`.
    func daemonClient(saying directly: String? = nil) async throws -> UploadQueueClient? {
        let client = UploadQueueClient(configuration: try loadConfiguration())
        if await client.isDaemonRunning() { return client }
        if let directly { printError("uploadq: no daemon answers on \(client.socketPath): \(directly)") }
        return nil
    }

    /// The queue opened for this command, logging to stderr at `level`.
    /// `quietly`: a queue that cannot be opened throws without a word (the caller has another way).
    func openQueue(level: Logger.Level = .warning, quietly: Bool = false) throws -> UploadQueue {
        let configuration = try loadConfiguration()
        do {
            return try UploadQueue(configuration: configuration, logger: Logger(label: "uploadq") {
                StderrLogHandler(label: $0, level: level)
            })
        } catch {
            if quietly { throw error }
            printError("uploadq: cannot open the queue in \(configuration.stateDirectory): \(error)")
            let diskFull = (error as? UploadQueueError)?.code == .diskLow
            throw (diskFull ? CLIExit.diskLow : CLIExit.failure).code
        }
    }
}

extension GlobalOptions {
    /// Opens the queue for the daemon: a disk too full to open it on is waited out (said once, tried every 5 s),
    /// so a device whose disk filled up recovers by itself once there is room; `giveUp` (a batch run) stops
    /// waiting after a minute.
    func openQueueWaitingForRoom(level: Logger.Level, format: StderrLogHandler.Format, logger: Logger, giveUp: Bool,
                                 waiting: () -> Void = {}) async throws -> UploadQueue {
        let configuration = try loadConfiguration()
        let started = ContinuousClock.now
        var told = false
        while true {
            do {
                // Opened off Swift's shared threads: the migrations, a busy database's wait.
                return try await BlockingWork.run {
                    try UploadQueue(configuration: configuration, logger: Logger(label: "uploadq") {
                        StderrLogHandler(label: $0, level: level, format: format)
                    })
                }
            } catch let error as UploadQueueError where error.code == .diskLow {
                if !told {
                    logger.error("cannot open the queue yet: \(error); waiting for room (free space on that disk)")
                    told = true
                }
                waiting()
                if giveUp && ContinuousClock.now - started > .seconds(60) {
                    printError("uploadq: cannot open the queue in \(configuration.stateDirectory): \(error)")
                    throw CLIExit.failure.code
                }
                try await Task.sleep(for: .seconds(5))
            } catch {
                printError("uploadq: cannot open the queue in \(configuration.stateDirectory): \(error)")
                throw CLIExit.failure.code
            }
        }
    }
}

/// Writes a line to stderr.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((SafeText.escaped(text) + "\n").utf8))
}

/// Parses a job id argument or fails as a usage error.
func parseJobID(_ text: String) throws -> JobID {
    guard let id = JobID(text) else { throw ValidationError("'\(text)' is not a job id (a UUID such as 01934f7e-8c1a-7b3e-9d2f-0a1b2c3d4e5f)") }
    return id
}
