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
        let client = try await options.daemonClient(saying: "cancelling in the queue's database directly")
        let queue = client == nil ? try options.openQueue() : nil
        var exitCode: CLIExit?
        for text in ids {
            let id = try parseJobID(text)
            do {
                let outcome = if let client { try await client.cancel(id) } else { try await queue!.cancel(id) }
                switch outcome {
                case .removed:
                    print("\(id) cancelled")
                case .requested:
                    if try await waitUntilGone(id, client: client, queue: queue) {
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

    /// Whether the job left the queue within 10 s (its transfer stopped at a safe point).
    private func waitUntilGone(_ id: JobID, client: UploadQueueClient?, queue: UploadQueue?) async throws -> Bool {
        for _ in 0..<100 {
            let gone = if let client {
                try await client.wait(for: id, until: [.uploaded], timeout: .zero) == nil
            } else {
                try await queue!.job(id) == nil
            }
            if gone { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return false
    }
}
