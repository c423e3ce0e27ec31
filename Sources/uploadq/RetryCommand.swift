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
        var exitCode: CLIExit?
        let client = try await options.daemonClient(saying: "retrying in the queue's database directly")
        let queue = client == nil ? try options.openQueue() : nil
        if failed {
            let changed = if let client { try await client.retryFailed() } else { try await queue!.retryFailed() }
            print("\(changed.count) job(s) pending again")
            return
        }
        if hooks {
            var missing = false
            for text in ids {
                let id = try parseJobID(text)
                let retried: Bool
                do {
                    retried = if let client { try await client.retry(id, hooksOnly: true) } else { try await queue!.retryOutbox(id) }
                } catch let error as UploadQueueError where error.code == .jobNotFound {
                    retried = false
                }
                if retried {
                    print("\(id) patch and hooks pending again")
                } else {
                    printError("uploadq: \(id) has no failed patch or hook")
                    missing = true
                }
            }
            if missing { throw CLIExit.failure.code }
            return
        }
        for text in ids {
            let id = try parseJobID(text)
            do {
                let retried = if let client { try await client.retry(id) } else { try await !queue!.retry([id]).isEmpty }
                let state = if let client {
                    try await client.wait(for: id, until: [.uploaded], timeout: .zero)
                } else {
                    try await queue!.job(id)?.state
                }
                if !retried {
                    printError("uploadq: \(id) has nothing to retry (it is uploaded and its patch did not fail)")
                    exitCode = exitCode ?? .failure
                } else if state == .uploaded {
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
