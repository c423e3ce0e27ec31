import Foundation
import Testing
@testable import UploadQueue

/// The manual holds: every config block in it loads with `uploadq config check`, every command example runs (or
/// says it is not run), every relative link and anchor resolves, and the README stays short.
struct DocumentationTests {
    static let root = ConfigurationTests.repositoryRoot

    /// A fenced block of a Markdown file: its language, the rest of its info string, its text and its line.
    struct Block {
        let file: String
        let line: Int
        let language: String
        let flags: [String]
        let text: String
    }

    /// README.md, CHANGELOG.md, ARCHITECTURE.md and every page under docs/, as paths from the repository's root.
    static func pages() throws -> [String] {
        var pages = ["README.md", "CHANGELOG.md", "ARCHITECTURE.md"]
        let docs = root + "/docs"
        guard let walker = FileManager.default.enumerator(atPath: docs) else { return pages }
        while let path = walker.nextObject() as? String {
            if path.hasSuffix(".md") { pages.append("docs/" + path) }
        }
        return pages.sorted()
    }

    static func read(_ page: String) throws -> String {
        try String(contentsOfFile: root + "/" + page, encoding: .utf8)
    }

    static func blocks(of page: String) throws -> [Block] {
        var blocks: [Block] = []
        var open: (line: Int, info: String, lines: [String])?
        for (index, line) in try read(page).components(separatedBy: "\n").enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            // One fence style, so that no block escapes the checks: ``` at the start of the line.
            #expect(!(trimmed.hasPrefix("~~~") || (trimmed.hasPrefix("```") && !line.hasPrefix("```"))),
                    "\(page):\(index + 1): write fences as ``` at the start of the line")
            if line.hasPrefix("```") {
                if let current = open {
                    let words = current.info.split(separator: " ").map(String.init)
                    blocks.append(Block(file: page, line: current.line, language: words.first ?? "",
                                        flags: Array(words.dropFirst()), text: current.lines.joined(separator: "\n")))
                    open = nil
                } else {
                    open = (index + 1, String(line.dropFirst(3)).trimmingCharacters(in: .whitespaces), [])
                }
            } else {
                open?.lines.append(line)
            }
        }
        #expect(open == nil, "\(page): a fenced block opened at line \(open?.line ?? 0) is never closed")
        return blocks
    }

    @Test("the README is at most 250 lines, and every page the map names exists")
    func readmeIsShort() throws {
        let readme = try Self.read("README.md")
        let lines = readme.components(separatedBy: "\n").count
        #expect(lines <= 251, "README.md has \(lines) lines")
        for page in ["docs/install.md", "docs/configuration.md", "docs/destinations.md", "docs/spool.md",
                     "docs/link-policy.md", "docs/after-upload.md", "docs/operations.md", "docs/security.md",
                     "docs/durability.md", "docs/testing.md", "docs/benchmarks.md", "CHANGELOG.md", "ARCHITECTURE.md"] {
            #expect(readme.contains("(\(page))"), "the README's map does not link \(page)")
            #expect(FileManager.default.fileExists(atPath: Self.root + "/" + page), "\(page) is missing")
        }
        #expect(readme.contains("contrib/run-daemon.sh") && readme.contains("contrib/run-tests.sh"))
    }

    @Test("every block says what it is: toml, sh (run unless not-run), or a format that is not run")
    func blocksAreTagged() throws {
        let known: Set<String> = ["toml", "sh", "text", "json", "ini", "swift", "python", "roff", "diff"]
        for page in try Self.pages() {
            for block in try Self.blocks(of: page) {
                #expect(known.contains(block.language), """
                    \(page):\(block.line): a block tagged "\(block.language)": tag commands sh (sh not-run when the \
                    test cannot run them), configs toml, output text
                    """)
                #expect(block.flags.allSatisfy { $0 == "not-run" }, "\(page):\(block.line): unknown flags \(block.flags)")
            }
        }
    }

    @Test("every toml block of the manual loads with uploadq config check")
    func configBlocksLoad() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("uploadq-doc-configs-\(getpid())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var count = 0
        for page in try Self.pages() {
            for block in try Self.blocks(of: page) where block.language == "toml" {
                let file = directory + "/uploadq.toml"
                try Data(block.text.utf8).write(to: URL(fileURLWithPath: file))
                let result = try await BinaryRunner.run(["config", "check", "--config", file])
                #expect(result.status == 0, "\(page):\(block.line): \(result.stderr)")
                count += 1
            }
        }
        #expect(count >= 20)
    }

    /// A scratch directory as the runnable examples expect: the default config under Config/, `uploadq` on PATH and
    /// at .build/release/uploadq, a photo in the working directory and one in ~/Pictures.
    static func exampleSandbox() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("uploadq-doc-run-\(UUID())").path
        let manager = FileManager.default
        for folder in ["Config", "bin", ".build/release", "Pictures"] {
            try manager.createDirectory(atPath: directory + "/" + folder, withIntermediateDirectories: true)
        }
        try manager.copyItem(atPath: root + "/Config/uploadq.toml", toPath: directory + "/Config/uploadq.toml")
        try manager.createSymbolicLink(atPath: directory + "/bin/uploadq", withDestinationPath: BinaryRunner.path)
        try manager.createSymbolicLink(atPath: directory + "/.build/release/uploadq", withDestinationPath: BinaryRunner.path)
        // The start of a JPEG (SOI, a JFIF APP0 segment), then bytes: libmagic names it image/jpeg.
        var photo: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10] + Array("JFIF".utf8) + [0, 1, 1, 0, 0, 1, 0, 1, 0, 0]
        photo += (0..<4000).map { UInt8(truncatingIfNeeded: $0 &* 31) } + [0xFF, 0xD9]
        try Data(photo).write(to: URL(fileURLWithPath: directory + "/photo.jpg"))
        try Data(photo.reversed()).write(to: URL(fileURLWithPath: directory + "/Pictures/holiday.jpg"))
        return directory
    }

    @Test("every sh block not marked not-run runs, page by page in one sandbox, and exits 0")
    func commandExamplesRun() async throws {
        var ran = 0
        for page in try Self.pages() {
            let runnable = try Self.blocks(of: page).filter { $0.language == "sh" && !$0.flags.contains("not-run") }
            guard !runnable.isEmpty else { continue }
            let sandbox = try Self.exampleSandbox()
            defer { try? FileManager.default.removeItem(atPath: sandbox) }
            for block in runnable {
                let result = try await BinaryRunner.run(
                    ["timeout", "-k", "5", "120", "bash", "-euo", "pipefail", "-c", block.text], in: sandbox,
                    environment: ["HOME": sandbox, "PATH": sandbox + "/bin:/usr/local/bin:/usr/bin:/bin",
                                  "LANG": "C.UTF-8"],
                    executable: "/usr/bin/timeout")
                #expect(result.status == 0, "\(page):\(block.line): exit \(result.status)\n\(block.text)\n\(result.stderr)")
                ran += 1
            }
        }
        #expect(ran >= 5)
    }

    /// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` removed, spaces to `-`.
    static func slug(_ heading: String) -> String {
        String(heading.lowercased().compactMap { character -> Character? in
            if character == " " { return "-" }
            if character.isLetter || character.isNumber || character == "-" || character == "_" { return character }
            return nil
        })
    }

    /// The anchors of a page: its headings' slugs (numbered as GitHub numbers repeats) and its `<a id>`s.
    static func anchors(of page: String) throws -> Set<String> {
        var anchors: Set<String> = []
        var seen: [String: Int] = [:]
        var fenced = false
        for line in try read(page).components(separatedBy: "\n") {
            if line.hasPrefix("```") { fenced.toggle() }
            guard !fenced else { continue }
            if line.hasPrefix("#") {
                let text = line.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces)
                let base = slug(text)
                let repeats = seen[base, default: 0]
                anchors.insert(repeats == 0 ? base : "\(base)-\(repeats)")
                seen[base] = repeats + 1
            }
            var rest = line[...]
            while let start = rest.range(of: "<a id=\"") {
                let after = rest[start.upperBound...]
                guard let end = after.firstIndex(of: "\"") else { break }
                anchors.insert(String(after[..<end]))
                rest = after[end...]
            }
        }
        return anchors
    }

    /// The targets of a line's links: inline `[text](target "title")`, `<target>`, reference definitions
    /// `[name]: target`, and HTML `href="target"`.
    static func linkTargets(in line: String) -> [String] {
        var targets: [String] = []
        var rest = line[...]
        while let open = rest.range(of: "](") {
            let after = rest[open.upperBound...]
            // The closing parenthesis that balances the opening one.
            var depth = 0
            var end = after.endIndex
            for index in after.indices {
                if after[index] == "(" { depth += 1 }
                if after[index] == ")" {
                    if depth == 0 { end = index; break }
                    depth -= 1
                }
            }
            var target = after[..<end].trimmingCharacters(in: .whitespaces)
            if target.hasPrefix("<"), let close = target.firstIndex(of: ">") {
                target = String(target[target.index(after: target.startIndex)..<close])
            } else if let space = target.firstIndex(of: " ") {
                target = String(target[..<space])
            }
            targets.append(target)
            rest = end < after.endIndex ? after[end...] : after[after.endIndex...]
        }
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("["), let colon = trimmed.range(of: "]: ") {
            targets.append(String(trimmed[colon.upperBound...].split(separator: " ").first ?? ""))
        }
        var html = line[...]
        while let open = html.range(of: "href=\"") {
            let after = html[open.upperBound...]
            guard let close = after.firstIndex(of: "\"") else { break }
            targets.append(String(after[..<close]))
            html = after[close...]
        }
        return targets
    }

    @Test("a link's target is found in its inline, angle, titled, reference and HTML forms")
    func linkTargetsFound() {
        #expect(Self.linkTargets(in: "see [a](docs/a.md) and [b](<docs/b c.md>) or [c](c.md \"title\")")
                == ["docs/a.md", "docs/b c.md", "c.md"])
        #expect(Self.linkTargets(in: "[ref]: docs/ref.md#part") == ["docs/ref.md#part"])
        #expect(Self.linkTargets(in: "[x](a_(b).md) <a href=\"y.md\">y</a>") == ["a_(b).md", "y.md"])
    }

    @Test("every relative link of the manual leads to a file, and every anchor to a heading or an id")
    func linksResolve() throws {
        var checked = 0
        for page in try Self.pages() {
            var fenced = false
            for (index, line) in try Self.read(page).components(separatedBy: "\n").enumerated() {
                if line.hasPrefix("```") { fenced.toggle() }
                guard !fenced else { continue }
                for target in Self.linkTargets(in: line) {
                    if target.contains("://") || target.hasPrefix("mailto:") { continue }
                    let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
                    let path = String(parts[0])
                    let folder = (page as NSString).deletingLastPathComponent
                    let linked = path.isEmpty ? page
                        : ConfigurationLoader.lexicallyNormalized("/" + (folder.isEmpty ? path : folder + "/" + path))
                            .dropFirst().description
                    var isDirectory: ObjCBool = false
                    let exists = FileManager.default.fileExists(atPath: Self.root + "/" + linked, isDirectory: &isDirectory)
                    #expect(exists, "\(page):\(index + 1): \(target): no such file")
                    checked += 1
                    guard exists, parts.count == 2, linked.hasSuffix(".md") else { continue }
                    let anchors = try Self.anchors(of: linked)
                    #expect(anchors.contains(String(parts[1])), "\(page):\(index + 1): \(target): no such anchor")
                }
            }
        }
        #expect(checked >= 50)
    }
}
