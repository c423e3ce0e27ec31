/// The configuration reference written out from `ConfigurationReference`: Markdown for `docs/configuration.md`, roff
/// for the `uploadq.toml(5)` man page (`uploadq config reference [--man]`).
package enum ConfigurationManual {
    /// Where the config is looked for, by the contract's order.
    static let lookup = """
        uploadq reads one TOML file: `--config PATH`, else `$UPLOADQ_CONFIG`, else `./Config/uploadq.toml`, else \
        `/etc/uploadq/uploadq.toml`, else its built-in default (the same text as the repository's \
        `Config/uploadq.toml`).
        """

    static let tools = """
        `uploadq config check` validates a file without starting anything (exit 0, or 1 with the same \
        file:line:key error the daemon would give). `uploadq config show [--json]` prints the configuration in \
        force: every key with its default filled in and relative paths resolved, secrets redacted.
        """

    /// The reference as Markdown.
    package static func markdown() -> String {
        var out = """
            <!-- Generated from Sources/UploadQueue/Configuration/ConfigurationReference.swift by \
            `uploadq config reference > docs/configuration.md`; a test fails when it is stale. Edit the Swift \
            file, not this one. -->
            # Configuration reference

            \(lookup)

            \(ConfigurationReference.valueNotes)

            \(tools)

            Every key, table by table. A table left out, and a key left out, take the defaults below.


            """
        out += ConfigurationReference.sections
            .map { "[\($0.title.hasPrefix("[") ? "`\($0.title)`" : $0.title)](#\($0.anchor))" }
            .joined(separator: " · ") + "\n"
        for section in ConfigurationReference.sections {
            out += "\n<a id=\"\(section.anchor)\"></a>\n\n## \(section.title)\n\n\(section.summary)\n"
            for key in ConfigurationReference.keys(in: section.table) {
                // A key's anchor is its full name; the top level's one key shares its section's.
                out += key.fullName == section.anchor ? "\n" : "\n<a id=\"\(key.fullName)\"></a>\n\n"
                out += "### \(key.name)\n\n"
                var facts = ["**Type:** \(key.kind.description)", "**Default:** \(defaultText(key.defaultValue, code: "`"))"]
                if !key.variants.isEmpty, key.variants.count < ConfigurationKey.Variant.allCases.count {
                    facts.append("**For:** " + key.variants.map(\.rawValue).joined(separator: ", "))
                }
                out += facts.joined(separator: " · ") + "  \n"
                out += "**Example:** `" + exampleLines(key).joined(separator: "` then `") + "`\n\n"
                out += key.meaning + "\n"
            }
        }
        return out
    }

    /// The reference as the `uploadq.toml(5)` man page.
    package static func manPage(version: String) -> String {
        var out = """
            .TH UPLOADQ.TOML 5 "" "uploadq \(roff(version))" "File Formats"
            .SH NAME
            uploadq.toml \\- the configuration file of uploadq
            .SH SYNOPSIS
            /etc/uploadq/uploadq.toml
            .SH DESCRIPTION
            \(roff(lookup))
            .PP
            \(roff(ConfigurationReference.valueNotes))
            .PP
            \(roff(tools))

            """
        for section in ConfigurationReference.sections {
            out += ".SH \"\(roff(section.title.uppercased()))\"\n\(roff(section.summary))\n"
            for key in ConfigurationReference.keys(in: section.table) {
                out += ".TP\n.B \(roff(key.name))\n"
                var facts = [key.kind.description, "default: " + defaultText(key.defaultValue, code: "")]
                if !key.variants.isEmpty, key.variants.count < ConfigurationKey.Variant.allCases.count {
                    facts.append("for: " + key.variants.map(\.rawValue).joined(separator: ", "))
                }
                out += roff(facts.joined(separator: "; ")) + "\n.br\n"
                out += roff("Example: " + exampleLines(key).joined(separator: "; ")) + "\n.br\n"
                out += roff(key.meaning) + "\n"
            }
        }
        out += """
            .SH FILES
            .TP
            .B /etc/uploadq/uploadq.toml
            The system's configuration (a conffile of the package).
            .SH SEE ALSO
            .BR uploadq (1),
            .BR uploadq\\-config (1)

            """
        return out
    }

    private static func defaultText(_ value: ConfigurationKey.Default, code: String) -> String {
        switch value {
        case .value(let text): code + text + code
        case .unset(let meaning): "not set (\(meaning))"
        case .computed(let how): how
        case .required: "none: required"
        }
    }

    private static func exampleLines(_ key: ConfigurationKey) -> [String] {
        key.exampleContext + ["\(key.name) = \(key.example)"]
    }

    /// Text for roff: backslashes escaped, minus signs marked, a line never starting with a control character,
    /// and Markdown code spans set in bold.
    static func roff(_ text: String) -> String {
        var escaped = text.replacingOccurrences(of: "\\", with: "\\e").replacingOccurrences(of: "-", with: "\\-")
            .replacingOccurrences(of: "'", with: "\\(aq")
        var bold = false
        escaped = String(escaped.map { character -> String in
            guard character == "`" else { return String(character) }
            bold.toggle()
            return bold ? "\\fB" : "\\fR"
        }.joined())
        return escaped.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.hasPrefix(".") || line.hasPrefix("'") ? "\\&" + line : String(line)
        }.joined(separator: "\n")
    }
}
