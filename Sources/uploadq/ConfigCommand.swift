import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq config check|show|reference`: validates the config without starting anything, prints it as in force,
/// or prints the reference of every key.
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Check the config, show it with every default filled in and secrets redacted, or list every key.",
        subcommands: [Check.self, Show.self, Reference.self])

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

    /// `uploadq config reference`: every key with its type, default, example and meaning.
    struct Reference: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reference",
            abstract: "Print every config key with its type, default, example and meaning (Markdown, or roff).",
            discussion: """
                The same text as docs/configuration.md and the uploadq.toml(5) man page: all three come from the \
                key table the loader checks its reads against.
                """)

        @Flag(help: "Print the uploadq.toml(5) man page (roff) instead of Markdown.") var man = false

        func run() throws {
            let text = man ? ConfigurationManual.manPage(version: UploadQueueVersion.current) : ConfigurationManual.markdown()
            FileHandle.standardOutput.write(Data(text.utf8))
        }
    }
}
