import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq cancel`: removes jobs from the queue, stopping their transfers.
struct CancelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel jobs; files the queue owned are kept under state_dir/cancelled/.")

    @OptionGroup var options: GlobalOptions
    @Argument(help: "Ids of the jobs to cancel.") var ids: [String]

    func validate() throws {
        if ids.isEmpty { throw ValidationError("give at least one job id") }
    }

    func run() async throws {
        let queue = try options.openQueue()
        var exitCode: CLIExit?
        for text in ids {
            let id = try parseJobID(text)
            do {
                switch try await queue.cancel(id) {
                case .removed:
                    print("\(id) cancelled")
                case .requested:
                    if try await waitUntilGone(id, queue: queue) {
                        print("\(id) cancelled")
                    } else {
                        print("\(id) cancel requested; the daemon stops its transfer at the next safe point")
                    }
                }
            } catch let error as UploadQueueError {
                printError("uploadq: \(error.message)")
                exitCode = error.code == .jobNotFound ? .notFound : (exitCode ?? .failure)
            }
        }
        if let exitCode { throw exitCode.code }
    }

    private func waitUntilGone(_ id: JobID, queue: UploadQueue) async throws -> Bool {
        for _ in 0..<100 {
            if try await queue.job(id) == nil { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return false
    }
}
