import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq prune`: removes old history by hand (the daemon does it hourly by `[retention] history`).
struct PruneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Remove uploaded jobs and cancelled files older than a given age, and give the space back.",
        discussion: """
            Uploaded jobs go with their attempts, delivered patches and acknowledged completions. Failed and live \
            jobs are never pruned, nor jobs whose patch or completion is still owed.
            """)

    @OptionGroup var options: GlobalOptions
    @Option(help: "Age, as in the config: 90d, 12h, 30m (default: [retention] history).") var olderThan: String?
    @Flag(help: "Only count what would be removed.") var dryRun = false
    @Flag(help: "Print one JSON document.") var json = false

    func validate() throws {
        if let olderThan, ConfigurationLoader.duration(olderThan) == nil {
            throw ValidationError("--older-than takes a duration such as 90d, 12h or 30m, not '\(olderThan)'")
        }
    }

    func run() async throws {
        let configuration = try options.loadConfiguration()
        guard let age = olderThan.flatMap(ConfigurationLoader.duration) ?? configuration.retention.history else {
            printError("uploadq: [retention] history is \"forever\": give --older-than")
            throw CLIExit.usage.code
        }
        let report = if let client = try await options.daemonClient(saying: dryRun ? nil
                                                                       : "pruning the queue's database directly") {
            try await client.prune(olderThan: age, dryRun: dryRun)
        } else {
            try await options.openQueue().prune(olderThan: age, dryRun: dryRun)
        }
        if json {
            try ContractJSON.print(ContractJSON.prune(report, dryRun: dryRun))
            return
        }
        let verb = dryRun ? "would remove" : "removed"
        print("""
            \(verb) \(report.jobs) uploaded job(s) with \(report.attempts) attempt(s), \(report.patches) patch(es) and \
            \(report.completions) completion(s); \(report.cancelledFiles) cancelled file(s)
            database: \(TextOutput.bytes(report.databaseBytesBefore)) → \(TextOutput.bytes(report.databaseBytesAfter))
            """)
    }
}
