/// Parses TOML 1.0 text into a `TOMLTable`, rejecting duplicate keys and table redefinitions.
///
/// Written for the config file so every value keeps its line number, which error messages show.
enum TOMLParser {
    static func parse(_ text: String) throws(TOMLSyntaxError) -> TOMLTable {
        var scanner = TOMLScanner(text)
        let root = TOMLTableNode(line: 1, origin: .header)
        var current = root
        while true {
            scanner.skipBlanks()
            try scanner.skipComment()
            if scanner.atEnd { break }
            if try scanner.newline() { continue }
            if scanner.current == .openBracket {
                current = try header(&scanner, root: root)
            } else {
                try keyValue(&scanner, into: current)
            }
            try scanner.endOfLine()
        }
        return root.table()
    }

    /// `[a.b]` or `[[a.b]]`; returns the table that following keys go into.
    private static func header(_ scanner: inout TOMLScanner, root: TOMLTableNode) throws(TOMLSyntaxError) -> TOMLTableNode {
        let line = scanner.line
        let isArray = scanner.peek(1) == .openBracket
        try scanner.expect(.openBracket, "'['")
        if isArray { try scanner.expect(.openBracket, "'['") }
        let path = try scanner.key()
        try scanner.expect(.closeBracket, "']'")
        if isArray { try scanner.expect(.closeBracket, "']]'") }

        var table = root
        for key in path.dropLast() {
            table = try table.child(key, line: line, scanner: scanner, viaDottedKey: false)
        }
        let name = path.joined(separator: ".")
        return isArray
            ? try table.appendArrayElement(path.last!, line: line, name: name, scanner: scanner)
            : try table.defineByHeader(path.last!, line: line, name: name, scanner: scanner)
    }

    /// `a.b = value` into `table`.
    private static func keyValue(_ scanner: inout TOMLScanner, into table: TOMLTableNode) throws(TOMLSyntaxError) {
        let line = scanner.line
        let path = try scanner.key()
        try scanner.expect(.equals, "'=' after the key")
        scanner.skipBlanks()
        var value = try scanner.value(inlineTable: inlineTable)
        value.line = line
        var target = table
        for key in path.dropLast() {
            target = try target.child(key, line: line, scanner: scanner, viaDottedKey: true)
        }
        try target.setValue(path.last!, value, name: path.joined(separator: "."), scanner: scanner)
    }

    /// `{ a = 1, b.c = 2 }`: one line, no trailing comma, closed once written.
    private static func inlineTable(_ scanner: inout TOMLScanner) throws(TOMLSyntaxError) -> TOMLTable {
        let node = TOMLTableNode(line: scanner.line, origin: .header)
        try scanner.expect(.openBrace, "'{'")
        scanner.skipBlanks()
        if scanner.current == .closeBrace {
            try scanner.expect(.closeBrace, "'}'")
            return node.table()
        }
        while true {
            scanner.skipBlanks()
            try keyValue(&scanner, into: node)
            scanner.skipBlanks()
            if scanner.current == .comma {
                try scanner.expect(.comma, "','")
                continue
            }
            try scanner.expect(.closeBrace, "',' or '}' in inline table")
            return node.table()
        }
    }
}

/// A table while the document is being read: it knows how it was created, which decides what may extend it.
final class TOMLTableNode {
    enum Origin {
        /// Created as the parent of a header (`a` in `[a.b]`); a later `[a]` may still define it.
        case implicit
        /// Defined by its own header, or the root, or an inline table.
        case header
        /// Created by a dotted key (`a.b = 1` creates `a`).
        case dottedKey
    }

    private enum Entry {
        case value(TOMLValue)
        case table(TOMLTableNode)
        case tableArray([TOMLTableNode], line: Int)
    }

    let line: Int
    private var origin: Origin
    private var order: [String] = []
    private var entries: [String: Entry] = [:]

    init(line: Int, origin: Origin) {
        self.line = line
        self.origin = origin
    }

    private func add(_ key: String, _ entry: Entry) {
        order.append(key)
        entries[key] = entry
    }

    /// The sub-table `key`, created when missing, for a header path or a dotted key.
    func child(_ key: String, line: Int, scanner: TOMLScanner, viaDottedKey: Bool) throws(TOMLSyntaxError) -> TOMLTableNode {
        switch entries[key] {
        case nil:
            let node = TOMLTableNode(line: line, origin: viaDottedKey ? .dottedKey : .implicit)
            add(key, .table(node))
            return node
        case .table(let node):
            if viaDottedKey, node.origin != .dottedKey {
                throw scanner.error("cannot add keys to table '\(key)' with a dotted key: it is defined by a [header] on line \(node.line)")
            }
            return node
        case .tableArray(let nodes, _):
            if viaDottedKey { throw scanner.error("'\(key)' is an array of tables; use [[\(key)]]") }
            return nodes[nodes.count - 1]
        case .value(let value):
            throw scanner.error("'\(key)' is already \(value.typeName) (line \(value.line)), not a table")
        }
    }

    /// `[key]`: defines the table once.
    func defineByHeader(_ key: String, line: Int, name: String, scanner: TOMLScanner) throws(TOMLSyntaxError) -> TOMLTableNode {
        switch entries[key] {
        case nil:
            let node = TOMLTableNode(line: line, origin: .header)
            add(key, .table(node))
            return node
        case .table(let node) where node.origin == .implicit:
            node.origin = .header
            node.definedLine = line
            return node
        case .table(let node):
            throw scanner.error("table [\(name)] is already defined on line \(node.definedLine ?? node.line)")
        case .tableArray(_, let arrayLine):
            throw scanner.error("[\(name)] is an array of tables (line \(arrayLine)); use [[\(name)]]")
        case .value(let value):
            throw scanner.error("'\(name)' is already \(value.typeName) (line \(value.line)), not a table")
        }
    }

    /// Line of the header that defined a table first created implicitly.
    private var definedLine: Int?

    /// `[[key]]`: appends a new table to the array.
    func appendArrayElement(_ key: String, line: Int, name: String, scanner: TOMLScanner) throws(TOMLSyntaxError) -> TOMLTableNode {
        let node = TOMLTableNode(line: line, origin: .header)
        switch entries[key] {
        case nil:
            add(key, .tableArray([node], line: line))
        case .tableArray(let nodes, let arrayLine):
            entries[key] = .tableArray(nodes + [node], line: arrayLine)
        case .table(let existing):
            throw scanner.error("[[\(name)]] conflicts with table [\(name)] on line \(existing.line)")
        case .value(let value):
            throw scanner.error("'\(name)' is already \(value.typeName) (line \(value.line)), not an array of tables")
        }
        return node
    }

    /// `key = value`: a key may be set once.
    func setValue(_ key: String, _ value: TOMLValue, name: String, scanner: TOMLScanner) throws(TOMLSyntaxError) {
        if let existing = entries[key] {
            let line = switch existing {
            case .value(let value): value.line
            case .table(let node): node.line
            case .tableArray(_, let line): line
            }
            throw TOMLSyntaxError(line: value.line, column: 1, message: "duplicate key '\(name)' (first defined on line \(line))")
        }
        add(key, .value(value))
    }

    /// The finished, immutable table.
    func table() -> TOMLTable {
        var table = TOMLTable(line: definedLine ?? line)
        for key in order {
            switch entries[key]! {
            case .value(let value):
                table.insert(key, value)
            case .table(let node):
                table.insert(key, TOMLValue(kind: .table(node.table()), line: node.definedLine ?? node.line))
            case .tableArray(let nodes, let line):
                let items = nodes.map { TOMLValue(kind: .table($0.table()), line: $0.line) }
                table.insert(key, TOMLValue(kind: .array(items), line: line))
            }
        }
        return table
    }
}
