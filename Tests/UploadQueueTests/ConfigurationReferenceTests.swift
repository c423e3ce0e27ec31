import Foundation
import Testing
@testable import UploadQueue

/// The key table (`ConfigurationReference`): the loader reads only keys it documents, `config show` prints only
/// keys it documents with the defaults it documents, every example loads for exactly the destinations it names,
/// and `docs/configuration.md` and `uploadq.toml(5)` are generated from it.
struct ConfigurationReferenceTests {
    typealias Variant = ConfigurationKey.Variant

    /// The lines a destination of each kind needs.
    static let skeletons: [Variant: [String]] = [
        .file: [#"protocol = "file""#, #"url = "file://out""#],
        .tus: [#"protocol = "tus""#, #"url = "https://tus.example.com/files/""#],
        .rufh: [#"protocol = "rufh""#, #"url = "https://up.example.com/uploads""#],
        .httpPut: [#"protocol = "http-put""#, #"url = "https://dav.example.com/photos/{name}""#],
        .httpPost: [#"protocol = "http-post""#, #"url = "https://api.example.com/upload""#],
        .s3: [#"protocol = "s3""#, #"bucket = "photos""#],
        .minted: [#"protocol = "http-put""#, #"mint_url = "https://api.example.com/mint""#],
        .mintedCommand: [#"protocol = "http-post""#, #"mint_command = ["/usr/local/bin/mint", "--fast"]"#],
        .mintedS3: [#"protocol = "s3""#, #"mint_url = "https://companion.example.com""#],
    ]

    /// Every table present (empty, so every default shows) and one destination of each kind, named by its kind.
    static var everyTable: String {
        var text = "[spool]\ndestination = \"file\"\n"
        for section in ConfigurationReference.sections where !section.table.isEmpty && section.table != "spool"
            && !section.table.hasPrefix("destinations") {
            text += "[\(section.table)]\n"
        }
        for variant in Variant.allCases {
            text += "[destinations.\(variant.rawValue)]\n" + (skeletons[variant] ?? []).joined(separator: "\n") + "\n"
        }
        return text
    }

    static func parse(_ text: String) throws(ConfigurationError) -> Configuration {
        try ConfigurationLoader.parse(text, file: "/etc/uploadq/test.toml", baseDirectory: "/srv/q")
    }

    /// `config show`'s TOML as table → key → value text (it writes one key per line).
    static func shown(_ document: EffectiveConfiguration) -> [String: [String: String]] {
        var tables: [String: [String: String]] = ["": [:]]
        var current = ""
        for line in document.toml().split(separator: "\n") {
            if line.hasPrefix("[") {
                current = String(line.dropFirst().dropLast())
                tables[current, default: [:]] = [:]
            } else if let equals = line.range(of: " = ") {
                tables[current, default: [:]][String(line[..<equals.lowerBound])] = String(line[equals.upperBound...])
            }
        }
        return tables
    }

    /// The reference's table of a shown table, and the kind of destination it is.
    static func documented(_ table: String) -> (table: String, variant: Variant?) {
        guard table.hasPrefix("destinations.") else { return (table, nil) }
        return ("destinations.NAME", Variant(rawValue: String(table.dropFirst("destinations.".count))))
    }

    static func applies(_ key: ConfigurationKey, to variant: Variant?) -> Bool {
        guard let variant, !key.variants.isEmpty else { return true }
        return key.variants.contains(variant)
    }

    @Test("config show prints only documented keys, each with the default the reference gives")
    func showMatchesReference() throws {
        let tables = Self.shown(EffectiveConfiguration(try Self.parse(Self.everyTable), redactingSecrets: false))
        let given = try TOMLParser.parse(Self.everyTable)
        #expect(tables.count == ConfigurationReference.sections.count - 1 + Variant.allCases.count)
        for (table, values) in tables {
            let (reference, variant) = Self.documented(table)
            for key in values.keys {
                let documented = ConfigurationReference.keys(in: reference).first { $0.name == key }
                #expect(documented != nil, "config show prints \(table).\(key), which the reference lacks")
                if let documented {
                    #expect(Self.applies(documented, to: variant), "\(table).\(key) is not documented for \(variant!)")
                }
            }
            var givenKeys: Set<String> = []
            if table.hasPrefix("destinations."), case .table(let destinations)? = given["destinations"]?.kind,
               case .table(let inner)? = destinations[String(table.dropFirst("destinations.".count))]?.kind {
                givenKeys = Set(inner.keys)
            } else if case .table(let inner)? = given[table]?.kind {
                givenKeys = Set(inner.keys)
            }
            for key in ConfigurationReference.keys(in: reference) where Self.applies(key, to: variant) {
                let printed = values[key.name]
                switch key.defaultValue {
                case .value(var text):
                    if givenKeys.contains(key.name) { break }
                    if key.kind == .path, text.hasPrefix("\""), !text.hasPrefix("\"/") {
                        text = "\"/srv/q/" + text.dropFirst()
                    }
                    #expect(printed == text, "\(table).\(key.name): shown \(printed ?? "nothing"), documented \(text)")
                case .unset:
                    if !givenKeys.contains(key.name) {
                        #expect(printed == nil, "\(table).\(key.name) is documented as unset, and shown as \(printed!)")
                    }
                case .required:
                    if givenKeys.contains(key.name) {
                        #expect(printed != nil, "\(table).\(key.name) is required and not shown")
                    }
                case .computed:
                    break
                }
            }
        }
    }

    /// A config whose `table` holds `lines` (and a destination for a section's own needs).
    /// A config whose `table` holds `context` and `line` (and the destinations a section's examples name).
    static func config(table: String, variant: Variant?, context: [String], line: String) -> String {
        let destinations = ["default", "photos", "archive"].map { "[destinations.\($0)]\nprotocol = \"file\"\nurl = \"file://out\"\n" }
            .joined()
        if table.isEmpty { return (context + [line]).joined(separator: "\n") + "\n" + destinations }
        guard let variant else { return "[\(table)]\n" + (context + [line]).joined(separator: "\n") + "\n" + destinations }
        // A minted destination has no token: its pass_env goes with its mint_command.
        let minted = variant == .minted || variant == .mintedCommand
        let own = (minted ? context.filter { !$0.hasPrefix("token_command = ") } : context) + [line]
        let names = Set(own.compactMap { $0.components(separatedBy: " = ").first })
        let skeleton = (Self.skeletons[variant] ?? []).filter { !names.contains($0.components(separatedBy: " = ")[0]) }
        return "[destinations.d]\n" + (skeleton + own).joined(separator: "\n") + "\n"
    }

    /// The example's line; a CA file must exist, so its example points at one that does.
    static func exampleLine(_ key: ConfigurationKey, caFile: String) -> String {
        "\(key.name) = " + (key.name == "ca_file" ? "\"\(caFile)\"" : key.example)
    }

    @Test("every example loads, in its table, for every kind of destination the reference names, and no other")
    func examplesLoad() throws {
        let caFile = FileManager.default.temporaryDirectory.appendingPathComponent("uploadq-ref-ca-\(getpid()).pem").path
        try Data("not checked at load\n".utf8).write(to: URL(fileURLWithPath: caFile))
        defer { try? FileManager.default.removeItem(atPath: caFile) }
        for key in ConfigurationReference.keys {
            let line = Self.exampleLine(key, caFile: caFile)
            guard key.table == "destinations.NAME" else {
                let text = Self.config(table: key.table, variant: nil, context: key.exampleContext, line: line)
                #expect(throws: Never.self, "\(key.fullName)'s example:\n\(text)") { _ = try Self.parse(text) }
                continue
            }
            // A key the skeleton itself sets (protocol, url, bucket, mint_url) replaces it: some kind must take it.
            let inSkeleton = Self.skeletons.values.contains { $0.contains { $0.hasPrefix(key.name + " = ") } }
            var loaded: [Variant] = []
            for variant in Variant.allCases {
                let text = Self.config(table: key.table, variant: variant, context: key.exampleContext, line: line)
                if (try? Self.parse(text)) != nil {
                    loaded.append(variant)
                }
            }
            if inSkeleton {
                #expect(!Set(loaded).isDisjoint(with: key.variants), "\(key.fullName)'s example loads for no kind")
            } else {
                #expect(Set(loaded) == Set(key.variants), """
                    \(key.fullName): documented for \(key.variants.map(\.rawValue)), its example loads for \
                    \(loaded.map(\.rawValue))
                    """)
            }
        }
    }

    @Test("each key is documented once, each destination key names its kinds, each section has keys")
    func referenceIsWellFormed() {
        var seen: Set<String> = []
        for key in ConfigurationReference.keys {
            #expect(seen.insert(key.fullName).inserted, "\(key.fullName) twice")
            #expect(ConfigurationReference.sections.contains { $0.table == key.table }, "\(key.fullName): no section")
            #expect(key.table == "destinations.NAME" ? !key.variants.isEmpty : key.variants.isEmpty, "\(key.fullName)")
            #expect(!key.meaning.isEmpty && !key.example.isEmpty)
        }
        for section in ConfigurationReference.sections {
            #expect(!ConfigurationReference.keys(in: section.table).isEmpty, "\(section.title) has no keys")
        }
    }

    @Test("a read the reference does not document, or documents with another type or range, is refused")
    func undocumentedReadsRefused() {
        #expect(ConfigurationReference.problem(reading: "concurrency", in: "limits", with: .integer(1...256),
                                               variant: nil) == nil)
        #expect(ConfigurationReference.problem(reading: "parallelism", in: "limits", with: .integer(1...256),
                                               variant: nil) == "does not document it")
        #expect(ConfigurationReference.problem(reading: "concurrency", in: "limits", with: .integer(1...64),
                                               variant: nil) != nil)
        #expect(ConfigurationReference.problem(reading: "concurrency", in: "limits", with: .string, variant: nil) != nil)
        #expect(ConfigurationReference.problem(reading: "chunk_size", in: "destinations.NAME", with: .byteCount,
                                               variant: .tus) == nil)
        #expect(ConfigurationReference.problem(reading: "form_field", in: "destinations.NAME", with: .string,
                                               variant: .httpPost) == nil)
        #expect(ConfigurationReference.problem(reading: "form_field", in: "destinations.NAME", with: .string,
                                               variant: .minted) != nil)
        #expect(ConfigurationReference.problem(reading: "budget_reset", in: "link", with: .integer(1...31),
                                               variant: nil) != nil)
        #expect(ConfigurationReference.problem(reading: "limits", in: "", with: .table, variant: nil) == nil)
        #expect(ConfigurationReference.problem(reading: "limit", in: "", with: .table, variant: nil) != nil)
        // Through the loader: a table whose reads include an undocumented key is refused, naming it.
        var table = ConfigurationTable(TOMLTable(line: 1), path: "limits", file: "test.toml")
        _ = try? table.integer("parallelism", range: 1...4)
        #expect(throws: ConfigurationError.self) { try table.rejectUnknownKeys() }
    }

    @Test("docs/configuration.md is the reference as generated (uploadq config reference > docs/configuration.md)")
    func markdownUpToDate() throws {
        let path = ConfigurationTests.repositoryRoot + "/docs/configuration.md"
        let committed = try String(contentsOfFile: path, encoding: .utf8)
        #expect(committed == ConfigurationManual.markdown(),
                "docs/configuration.md is stale: run .build/debug/uploadq config reference > docs/configuration.md")
        for key in ConfigurationReference.keys {
            #expect(committed.contains("<a id=\"\(key.fullName)\"></a>\n\n") && committed.contains("### \(key.name)\n"),
                    "\(key.fullName)")
        }
    }

    @Test("roff text: backslashes escaped, no line starting with a control character, code spans in bold, balanced")
    func roffEscapes() {
        #expect(ConfigurationManual.roff(#"C:\x"#) == #"C:\ex"#)
        #expect(ConfigurationManual.roff(".hidden\n'quoted") == "\\&.hidden\n\\(aqquoted")
        #expect(ConfigurationManual.roff("a `b-c` d") == #"a \fBb\-c\fR d"#)
        // An odd number of backticks would leave the rest of the page in bold.
        let texts = ConfigurationReference.keys.map(\.meaning) + ConfigurationReference.sections.map(\.summary)
            + [ConfigurationReference.valueNotes, ConfigurationManual.lookup, ConfigurationManual.tools]
        for text in texts {
            #expect(text.filter { $0 == "`" }.count % 2 == 0, "unbalanced code span: \(text)")
        }
    }

    @Test("uploadq.toml(5) names every key and renders without a warning from man")
    func manPageRenders() async throws {
        let page = ConfigurationManual.manPage(version: UploadQueueVersion.current)
        for key in ConfigurationReference.keys {
            #expect(page.contains(".B \(ConfigurationManual.roff(key.name))\n"), "\(key.fullName)")
        }
        #expect(!page.split(separator: "\n").contains { $0.hasPrefix(".") && $0.count > 1 && $0.dropFirst().first == " " })
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("uploadq.toml.\(getpid()).5").path
        try Data(page.utf8).write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        // As lintian renders man pages: every warning goes to standard error.
        let result = try await BinaryRunner.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", file],
                                                environment: ["LC_ALL": "C.UTF-8", "MANROFFSEQ": "", "MANWIDTH": "80",
                                                              "PATH": "/usr/bin:/bin"],
                                                executable: "/usr/bin/man")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        #expect(result.stdout.count > 10_000)
    }
}
