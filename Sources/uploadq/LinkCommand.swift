import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq link`: shows how the link is classified and who decided.
struct LinkCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "link", abstract: "Show the link classification (metered, unmetered, offline) and its source.")

    @OptionGroup var options: GlobalOptions
    @Flag(help: "Print one JSON document.") var json = false

    func run() async throws {
        let queue = try options.openQueue()
        let link = try await queue.status().link
        if json {
            try JSONOutput.print([
                "class": link.linkClass.rawValue, "source": link.source.rawValue,
                "interface": link.interface ?? NSNull(),
            ] as [String: Any])
        } else {
            print("\(link.linkClass.rawValue) (source: \(link.source.rawValue))")
        }
    }
}
