import ArgumentParser
import Foundation
import UploadQueue

/// The `uploadq` command: a background upload queue's daemon and its controls.
@main
struct Uploadq: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "uploadq",
        abstract: "A durable background upload queue: every accepted file reaches its server exactly once.",
        version: UploadQueueVersion.current,
        subcommands: [DaemonCommand.self, EnqueueCommand.self, StatusCommand.self, ListCommand.self,
                      ShowCommand.self, RetryCommand.self, SkipCommand.self, CancelCommand.self, GroupCommand.self,
                      GroupsCommand.self, LanesCommand.self, LinkCommand.self, WatchCommand.self,
                      PruneCommand.self, EventsCommand.self, ConfigCommand.self, DoctorCommand.self])

    /// Where the commands but the daemon run their tasks.
    private static let commandExecutor = CommandExecutor()

    /// Runs `command` with its tasks on `commandExecutor`.
    private nonisolated static func runOffPool(_ command: sending any AsyncParsableCommand) async throws {
        var command = command
        try await withTaskExecutorPreference(commandExecutor) { try await command.run() }
    }

    /// Runs the command with the contract's exit codes: usage errors exit 2 (not argument-parser's 64).
    static func main() async {
        signal(SIGPIPE, SIG_IGN)
        // The debug build under test stops at a blocking call on Swift's shared threads.
        BlockingCheck.enforceIfAsked()
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                if asyncCommand is DaemonCommand {
                    try await asyncCommand.run()
                } else {
                    // A command's tasks on threads that may block (it queries the queue), not Swift's pool.
                    try await runOffPool(asyncCommand)
                }
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(CLIExit.usage.rawValue)
            }
            guard code != .success else { exit(withError: error) }  // help and --version, as ArgumentParser prints them
            // An error may quote a file name or a server's answer: each line with its control characters escaped.
            // (An exit code thrown after the command said why has no message: nothing more is written.)
            let message = fullMessage(for: error)
            if !message.isEmpty {
                let lines = message.split(separator: "\n", omittingEmptySubsequences: false)
                FileHandle.standardError.write(Data((lines.map { SafeText.escaped(String($0)) }.joined(separator: "\n") + "\n").utf8))
            }
            Foundation.exit(code.rawValue)
        }
    }
}

/// The exit codes of the interface contract.
enum CLIExit: Int32 {
    case failure = 1
    case usage = 2
    case notFound = 3
    case noDaemon = 4
    /// The queue's disk is below `[limits] min_free_space` (`enqueue`: nothing was taken) or too full to open the
    /// queue at all.
    case diskLow = 5

    var code: ExitCode { ExitCode(rawValue) }
}
