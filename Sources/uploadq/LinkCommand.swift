import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq link [auto|metered|unmetered|offline]`: shows how the link is classified and who decided, or sets the
/// class by hand (kept across restarts; a running daemon follows within moments).
struct LinkCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "link",
        abstract: "Show the link classification (metered, unmetered, offline) and its source, or set it by hand.",
        discussion: """
            With MODE, the class is set by hand until `uploadq link auto`: photos to destinations with \
            on_metered = "defer" wait while it is metered, and nothing moves while it is offline.
            """)

    @OptionGroup var options: GlobalOptions
    @Argument(help: "auto (detect), metered, unmetered or offline.") var mode: String?
    @Flag(help: "Print one JSON document.") var json = false

    func run() async throws {
        let override = try mode.map { mode in
            guard let override = LinkOverride(rawValue: mode) else {
                throw ValidationError("\"\(mode)\" is not one of auto, metered, unmetered, offline")
            }
            return override
        }
        let link: LinkStatus
        if let client = try await options.daemonClient(saying: override == nil ? nil
                                                          : "setting the link class in the queue's database directly") {
            link = if let override { try await client.setLinkOverride(override) } else { try await client.link() }
        } else {
            let queue = try options.openQueue()
            if let override { try await queue.setLinkOverride(override) }
            link = try await queue.link()
        }
        if json {
            try ContractJSON.print(ContractJSON.link(link))
        } else {
            var line = "\(link.linkClass.rawValue) (source: \(link.source.rawValue)"
            if let interface = link.interface { line += ", interface: \(interface)" }
            if let value = link.networkManager { line += ", NetworkManager: \(value)" }
            if let reason = link.reason { line += "; \(reason)" }
            print(line + ")")
        }
    }
}
