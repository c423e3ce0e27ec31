/// Reads TOML keys and values byte by byte, tracking line and column for errors.
struct TOMLScanner {
    private let bytes: [UInt8]
    private(set) var index = 0
    private(set) var line = 1
    private var lineStart = 0
    /// Arrays and inline tables open around the current value.
    private var depth = 0

    /// The deepest nesting of arrays and inline tables, and the most parts of a dotted key: far beyond any config,
    /// and short of the stack a reader that recurses would exhaust (the TOML fuzzer's first finding was a stack
    /// overflow on `[[[[…`).
    static let maximumDepth = 32

    init(_ text: String) {
        bytes = Array(text.utf8)
    }

    var atEnd: Bool { index >= bytes.count }
    var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    func peek(_ offset: Int) -> UInt8? {
        index + offset < bytes.count ? bytes[index + offset] : nil
    }

    func error(_ message: String) -> TOMLSyntaxError {
        TOMLSyntaxError(line: line, column: index - lineStart + 1, message: message)
    }

    private mutating func advance(_ count: Int = 1) {
        index += count
    }

    private func starts(with text: String) -> Bool {
        let pattern = Array(text.utf8)
        guard index + pattern.count <= bytes.count else { return false }
        return bytes[index..<index + pattern.count].elementsEqual(pattern)
    }

    // MARK: Whitespace, comments, newlines

    /// Skips spaces and tabs.
    mutating func skipBlanks() {
        while let byte = current, byte == .space || byte == .tab { advance() }
    }

    /// Consumes one newline (LF or CRLF); false when none is here.
    mutating func newline() throws(TOMLSyntaxError) -> Bool {
        if current == .lineFeed {
            advance()
        } else if current == .carriageReturn {
            guard peek(1) == .lineFeed else { throw error("carriage return without line feed") }
            advance(2)
        } else {
            return false
        }
        line += 1
        lineStart = index
        return true
    }

    /// Skips a `#` comment up to (not including) the end of the line.
    mutating func skipComment() throws(TOMLSyntaxError) {
        guard current == .hash else { return }
        while let byte = current, byte != .lineFeed {
            if byte == .carriageReturn, peek(1) == .lineFeed { break }
            if Self.isForbiddenControl(byte) { throw error("control character in comment") }
            advance()
        }
    }

    /// After a statement: blanks, an optional comment, then a newline or the end.
    mutating func endOfLine() throws(TOMLSyntaxError) {
        skipBlanks()
        try skipComment()
        if atEnd { return }
        guard try newline() else { throw error("expected the end of the line") }
    }

    /// Skips blanks, comments and newlines (inside arrays).
    mutating func skipBlanksCommentsAndNewlines() throws(TOMLSyntaxError) {
        while true {
            skipBlanks()
            try skipComment()
            guard try newline() else { return }
        }
    }

    mutating func expect(_ byte: UInt8, _ what: String) throws(TOMLSyntaxError) {
        guard current == byte else { throw error("expected \(what)") }
        advance()
    }

    // MARK: Keys

    /// A key, possibly dotted: `a.b."c d"`.
    mutating func key() throws(TOMLSyntaxError) -> [String] {
        var parts: [String] = []
        while true {
            skipBlanks()
            parts.append(try simpleKey())
            skipBlanks()
            guard current == .dot else { return parts }
            guard parts.count < Self.maximumDepth else { throw error("a key of more than \(Self.maximumDepth) parts") }
            advance()
        }
    }

    private mutating func simpleKey() throws(TOMLSyntaxError) -> String {
        switch current {
        case .quote:
            if starts(with: "\"\"\"") { throw error("a key cannot be a multi-line string") }
            return try basicString()
        case .apostrophe:
            if starts(with: "'''") { throw error("a key cannot be a multi-line string") }
            return try literalString()
        default:
            let start = index
            while let byte = current, Self.isBareKeyByte(byte) { advance() }
            guard index > start else { throw error("expected a key") }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }
    }

    // MARK: Values

    /// Any value; `table` parses inline tables (it needs the document builder's key rules).
    mutating func value(inlineTable: (inout TOMLScanner) throws(TOMLSyntaxError) -> TOMLTable) throws(TOMLSyntaxError) -> TOMLValue {
        let startLine = line
        if current == .openBracket || current == .openBrace {
            depth += 1
            defer { depth -= 1 }
            guard depth <= Self.maximumDepth else {
                throw error("arrays and inline tables nested more than \(Self.maximumDepth) deep")
            }
            return current == .openBracket ? TOMLValue(kind: .array(try array(inlineTable: inlineTable)), line: startLine)
                : TOMLValue(kind: .table(try inlineTable(&self)), line: startLine)
        }
        switch current {
        case .quote:
            return TOMLValue(kind: .string(starts(with: "\"\"\"") ? try multilineString(quote: .quote) : try basicString()), line: startLine)
        case .apostrophe:
            return TOMLValue(kind: .string(starts(with: "'''") ? try multilineString(quote: .apostrophe) : try literalString()), line: startLine)
        case nil:
            throw error("expected a value")
        default:
            return TOMLValue(kind: try scalar(), line: startLine)
        }
    }

    private mutating func array(inlineTable: (inout TOMLScanner) throws(TOMLSyntaxError) -> TOMLTable) throws(TOMLSyntaxError) -> [TOMLValue] {
        advance()
        var items: [TOMLValue] = []
        while true {
            try skipBlanksCommentsAndNewlines()
            if current == .closeBracket {
                advance()
                return items
            }
            items.append(try value(inlineTable: inlineTable))
            try skipBlanksCommentsAndNewlines()
            if current == .comma {
                advance()
            } else if current == .closeBracket {
                advance()
                return items
            } else {
                throw error("expected ',' or ']' in array")
            }
        }
    }

    // MARK: Strings

    private mutating func basicString() throws(TOMLSyntaxError) -> String {
        advance()
        var out: [UInt8] = []
        while true {
            guard let byte = current else { throw error("unterminated string") }
            switch byte {
            case .quote:
                advance()
                return try decode(out)
            case .backslash:
                try escape(into: &out)
            case .lineFeed, .carriageReturn:
                throw error("newline in a single-line string (use \"\"\" for multi-line text)")
            default:
                if Self.isForbiddenControl(byte) { throw error("control character in string") }
                out.append(byte)
                advance()
            }
        }
    }

    /// `"""…"""` (with escapes) or `'''…'''` (raw): the newline right after the opening is dropped, and up to two
    /// quotes just before the closing belong to the text.
    private mutating func multilineString(quote: UInt8) throws(TOMLSyntaxError) -> String {
        let escapes = quote == .quote
        advance(3)
        _ = try newline()
        var out: [UInt8] = []
        while true {
            guard let byte = current else { throw error("unterminated multi-line string") }
            if byte == quote, peek(1) == quote, peek(2) == quote {
                var quotes = 3
                while peek(quotes) == quote, quotes < 5 { quotes += 1 }
                out.append(contentsOf: repeatElement(quote, count: quotes - 3))
                advance(quotes)
                return try decode(out)
            }
            if escapes, byte == .backslash {
                if lineEndingBackslashFollows() {
                    advance()
                    skipBlanks()
                    while try newline() { skipBlanks() }
                } else {
                    try escape(into: &out)
                }
            } else if byte == .lineFeed || byte == .carriageReturn {
                _ = try newline()
                out.append(.lineFeed)
            } else {
                if Self.isForbiddenControl(byte) { throw error("control character in string") }
                out.append(byte)
                advance()
            }
        }
    }

    /// True when the backslash here is followed only by blanks up to a newline.
    private func lineEndingBackslashFollows() -> Bool {
        var offset = 1
        while let byte = peek(offset), byte == .space || byte == .tab { offset += 1 }
        return peek(offset) == .lineFeed || (peek(offset) == .carriageReturn && peek(offset + 1) == .lineFeed)
    }

    private mutating func literalString() throws(TOMLSyntaxError) -> String {
        advance()
        let start = index
        while true {
            guard let byte = current else { throw error("unterminated string") }
            if byte == .apostrophe { break }
            if byte == .lineFeed || byte == .carriageReturn { throw error("newline in a single-line string") }
            if Self.isForbiddenControl(byte) { throw error("control character in string") }
            advance()
        }
        let text = bytes[start..<index]
        advance()
        return try decode(Array(text))
    }

    private mutating func escape(into out: inout [UInt8]) throws(TOMLSyntaxError) {
        advance()
        guard let byte = current else { throw error("unterminated escape") }
        let simple: [UInt8: UInt8] = [
            UInt8(ascii: "b"): 0x08, UInt8(ascii: "t"): 0x09, UInt8(ascii: "n"): 0x0A, UInt8(ascii: "f"): 0x0C,
            UInt8(ascii: "r"): 0x0D, UInt8(ascii: "e"): 0x1B, .quote: .quote, .backslash: .backslash,
        ]
        if let replacement = simple[byte] {
            out.append(replacement)
            advance()
            return
        }
        let digits: Int
        switch byte {
        case UInt8(ascii: "u"): digits = 4
        case UInt8(ascii: "U"): digits = 8
        default: throw error("invalid escape \\\(Character(Unicode.Scalar(byte)))")
        }
        advance()
        guard index + digits <= bytes.count,
              let code = UInt32(String(decoding: bytes[index..<index + digits], as: UTF8.self), radix: 16),
              let scalar = Unicode.Scalar(code)
        else { throw error("invalid unicode escape") }
        out.append(contentsOf: Array(String(Character(scalar)).utf8))
        advance(digits)
    }

    private func decode(_ raw: [UInt8]) throws(TOMLSyntaxError) -> String {
        guard let text = String(validating: raw, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
        return text
    }

    // MARK: Numbers, booleans, date-times

    private mutating func scalar() throws(TOMLSyntaxError) -> TOMLValue.Kind {
        let start = index
        let startColumn = index - lineStart + 1
        while let byte = current {
            if Self.isScalarByte(byte) {
                advance()
            } else if byte == .space, index - start == 10, let next = peek(1), Self.isDigit(next),
                      Self.isDate(bytes[start..<index]) {
                advance()
            } else {
                break
            }
        }
        let token = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let kind = TOMLScalar.parse(token) else {
            throw TOMLSyntaxError(line: line, column: startColumn, message: token.isEmpty ? "expected a value" : "invalid value '\(token)'")
        }
        return kind
    }

    // MARK: Byte classes

    static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

    private static func isDate(_ text: ArraySlice<UInt8>) -> Bool {
        let chars = Array(text)
        return chars.count == 10 && chars[4] == .minus && chars[7] == .minus
            && chars.enumerated().allSatisfy { $0.offset == 4 || $0.offset == 7 || isDigit($0.element) }
    }

    private static func isBareKeyByte(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == .minus || byte == .underscore
    }

    private static func isScalarByte(_ byte: UInt8) -> Bool {
        isBareKeyByte(byte) || byte == .plus || byte == .dot || byte == .colon
    }

    /// Control characters TOML forbids in strings and comments (tab is allowed).
    static func isForbiddenControl(_ byte: UInt8) -> Bool {
        (byte < 0x20 && byte != .tab) || byte == 0x7F
    }
}

extension UInt8 {
    static let space = UInt8(ascii: " ")
    static let tab = UInt8(ascii: "\t")
    static let lineFeed = UInt8(ascii: "\n")
    static let carriageReturn = UInt8(ascii: "\r")
    static let hash = UInt8(ascii: "#")
    static let quote = UInt8(ascii: "\"")
    static let apostrophe = UInt8(ascii: "'")
    static let backslash = UInt8(ascii: "\\")
    static let dot = UInt8(ascii: ".")
    static let comma = UInt8(ascii: ",")
    static let equals = UInt8(ascii: "=")
    static let minus = UInt8(ascii: "-")
    static let plus = UInt8(ascii: "+")
    static let underscore = UInt8(ascii: "_")
    static let colon = UInt8(ascii: ":")
    static let openBracket = UInt8(ascii: "[")
    static let closeBracket = UInt8(ascii: "]")
    static let openBrace = UInt8(ascii: "{")
    static let closeBrace = UInt8(ascii: "}")
}
