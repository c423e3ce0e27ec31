import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq config check|show`: validates the config without starting anything, or prints it as in force.
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Check the config, or show it with every default filled in and secrets redacted.",
        subcommands: [Check.self, Show.self])

    /// `uploadq config check`: the loader's validation alone, with its file:line:key errors.
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "check",
            abstract: "Validate the config without starting the daemon (exit 0 valid, 1 not).")

        @OptionGroup var options: GlobalOptions

        func run() throws {
            let configuration = try options.loadConfiguration()
            let names = configuration.destinations.keys.sorted()
            print("config OK: \(configuration.file ?? ConfigurationLoader.embeddedName)")
            print("  state_dir:    \(configuration.stateDirectory)")
            print("  spool:        " + (configuration.spool.map { "\($0.directory) → \($0.destination)" } ?? "none"))
            print("  destinations: \(names.isEmpty ? "none" : names.joined(separator: ", "))")
        }
    }

    /// `uploadq config show`: the effective config as TOML (loadable again) or JSON.
    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "Print the effective config: defaults filled in, paths resolved, secrets redacted.",
            discussion: """
                Header values, credentials and query values in URLs, and the arguments of token and mint \
                programs are shown as "\(EffectiveConfiguration.redacted)". Without them, the TOML printed loads \
                to the same configuration.
                """)

        @OptionGroup var options: GlobalOptions
        @Flag(help: "Print one JSON document instead of TOML.") var json = false

        func run() throws {
            let configuration = try options.loadConfiguration()
            let document = EffectiveConfiguration(configuration)
            let source = "# effective config of \(configuration.file ?? ConfigurationLoader.embeddedName)\n"
            FileHandle.standardOutput.write(Data((json ? document.json() : source + document.toml()).utf8))
        }
    }
}
