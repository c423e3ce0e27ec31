import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq retry`: makes failed jobs pending now.
struct RetryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "retry", abstract: "Make failed jobs pending now.")

    @OptionGroup var options: GlobalOptions
    @Argument(help: "Ids of failed jobs.") var ids: [String] = []
    @Flag(help: "Retry every failed job.") var failed = false

    func validate() throws {
        if ids.isEmpty == !failed { throw ValidationError("give job ids or --failed (not both)") }
    }

    func run() async throws {
        let queue = try options.openQueue()
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
