import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq retry`: makes failed jobs pending now, or (`--hooks`) runs their failed patch and hooks again.
struct RetryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retry", abstract: "Make failed jobs pending now, or (--hooks) their failed patch and hooks.")

    @OptionGroup var options: GlobalOptions
    @Argument(help: "Ids of failed jobs.") var ids: [String] = []
    @Flag(help: "Retry every failed job.") var failed = false
    @Flag(help: "Only run the failed patch and hooks of these jobs again (an on_failed hook of a failed job included), not the upload.")
    var hooks = false

    func validate() throws {
        if ids.isEmpty == !failed { throw ValidationError("give job ids or --failed (not both)") }
        if hooks && failed { throw ValidationError("--hooks takes job ids") }
    }

    func run() async throws {
        let queue = try options.openQueue()
        if hooks {
            var missing = false
            for text in ids {
                let id = try parseJobID(text)
                if try await queue.retryOutbox(id) {
                    print("\(id) patch and hooks pending again")
                } else {
                    printError("uploadq: \(id) has no failed patch or hook")
                    missing = true
                }
            }
            if missing { throw CLIExit.failure.code }
            return
        }
        if failed {
            let changed = try await queue.retryFailed()
            print("\(changed.count) job(s) pending again")
            return
        }
        var exitCode: CLIExit?
        for text in ids {
            let id = try parseJobID(text)
            do {
                if try await queue.retry([id]).isEmpty {
                    printError("uploadq: \(id) has nothing to retry (it is uploaded and its patch did not fail)")
                    exitCode = exitCode ?? .failure
                } else if try await queue.job(id)?.state == .uploaded {
                    print("\(id) patch pending again")
                } else {
                    print("\(id) pending")
                }
            } catch let error as UploadQueueError {
                printError("uploadq: \(error.message)")
                exitCode = error.code == .jobNotFound ? .notFound : (exitCode ?? .failure)
            }
        }
        if let exitCode { throw exitCode.code }
    }
}
