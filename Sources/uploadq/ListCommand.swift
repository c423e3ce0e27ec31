import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq list`: jobs, newest first, with their state and why they wait or failed.
struct ListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List jobs, newest first.")

    @OptionGroup var options: GlobalOptions
    @Option(help: "Only jobs in this state: pending, uploading, uploaded, failed.") var state: String?
    @Option(help: "At most this many jobs.") var limit: Int?
    @Flag(help: "Print one JSON array.") var json = false

    func validate() throws {
        if let state, JobState(rawValue: state) == nil {
            throw ValidationError("unknown state '\(state)' (pending, uploading, uploaded, failed)")
        }
        if let limit, limit < 0 { throw ValidationError("--limit must not be negative") }
    }

    func run() async throws {
        let queue = try options.openQueue()
        let listing = try await queue.listing(state: state.flatMap(JobState.init(rawValue:)), limit: limit)
        // A row this version cannot read is said on stderr; the others are listed all the same.
        for unreadable in listing.unreadable {
            printError("uploadq: \(unreadable.reason)")
        }
        if json {
            try ContractJSON.print(listing.jobs.map(ContractJSON.job))
            return
        }
        for job in listing.jobs {
            print(SafeText.escaped("\(job.id)  \(job.state.rawValue.padding(toLength: 9, withPad: " ", startingAt: 0)) "
                + "\(TextOutput.bytes(job.size).padding(toLength: 10, withPad: " ", startingAt: 0)) "
                + "\(job.destination)  \(job.originalName)  \(TextOutput.note(for: job, timeZone: queue.configuration.schedule.timeZone))"))
        }
    }
}
