import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq skip JOB...`: lets a lane go on past a job of it that failed for good.
struct SkipCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skip",
        abstract: "Let a lane go on past a job of it that failed for good; the job stays failed and visible.",
        discussion: """
            A lane whose [lanes] on_failure is "hold" (the default) waits at a job that failed for good until it is \
            retried, skipped or cancelled. `uploadq retry` later still sends a skipped job, out of its lane's order.
            """)

    @OptionGroup var options: GlobalOptions
    @Argument(help: "Ids of jobs that failed for good in a lane.") var ids: [String]

    func run() async throws {
        let client = try await options.daemonClient(saying: "skipping in the queue's database directly")
        let queue = client == nil ? try options.openQueue() : nil
        var failed = false
        for text in ids {
            let id = try parseJobID(text)
            do {
                if let client { try await client.skip(id) } else { try await queue!.skip(id) }
                print("\(id) skipped: its lane goes on")
            } catch let error as UploadQueueError {
                printError("uploadq: \(error)")
                failed = true
            }
        }
        if failed { throw CLIExit.failure.code }
    }
}
