import Foundation

/// One element of an S3 XML reply, parsed by a small reader that knows what S3 sends: a declaration, elements
/// (namespace prefixes dropped, attributes ignored), text with the five entities and numeric references,
/// comments and CDATA.
///
/// Foundation's XMLParser would pull libxml2 into the binary for a handful of flat replies.
struct S3XMLElement: Sendable, Equatable {
    var name: String
    var children: [S3XMLElement]
    /// The element's own text, entities resolved (children's text not included).
    var text: String

    /// The first child named `name`.
    func child(_ name: String) -> S3XMLElement? { children.first { $0.name == name } }

    /// Every child named `name`, in order.
    func children(_ name: String) -> [S3XMLElement] { children.filter { $0.name == name } }

    /// The trimmed text of the first child named `name`.
    func value(_ name: String) -> String? {
        child(name).map { $0.text.trimmingCharacters(in: .whitespacesAndNewlines) }
    }

    /// Parses a document and returns its root element; nil when the bytes are not well-formed XML.
    static func parse(_ bytes: [UInt8]) -> S3XMLElement? {
        var reader = Reader(bytes: bytes)
        return reader.document()
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        init(bytes: [UInt8]) {
            self.bytes = bytes
            // A UTF-8 byte order mark.
            if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
        }

        mutating func document() -> S3XMLElement? {
            skipMisc()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "<"), let root = element(depth: 0) else { return nil }
            skipMisc()
            return index == bytes.count ? root : nil
        }

        /// Whitespace, the declaration, processing instructions, comments and a DOCTYPE.
        mutating func skipMisc() {
            while index < bytes.count {
                if isSpace(bytes[index]) {
                    index += 1
                } else if starts("<?") {
                    guard skip(past: "?>") else { return }
                } else if starts("<!--") {
                    guard skip(past: "-->") else { return }
                } else if starts("<!DOCTYPE") {
                    guard skip(past: ">") else { return }
                } else {
                    return
                }
            }
        }

        /// One element and its content; nil when malformed or nested deeper than S3 ever nests (a hostile reply
        /// must not exhaust the stack).
        mutating func element(depth: Int) -> S3XMLElement? {
            guard depth < 32 else { return nil }
            index += 1  // <
            guard let name = name() else { return nil }
            // Attributes are skipped: S3 puts nothing needed there.
            var quote: UInt8?
            while index < bytes.count {
                let byte = bytes[index]
                if let open = quote {
                    if byte == open { quote = nil }
                } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                    quote = byte
                } else if byte == UInt8(ascii: ">") || byte == UInt8(ascii: "/") {
                    break
                }
                index += 1
            }
            guard index < bytes.count else { return nil }
            var element = S3XMLElement(name: localName(name), children: [], text: "")
            if bytes[index] == UInt8(ascii: "/") {
                guard starts("/>") else { return nil }
                index += 2
                return element
            }
            index += 1  // >
            var text: [UInt8] = []
            while index < bytes.count {
                if starts("</") {
                    index += 2
                    guard let closing = self.name(), closing == name else { return nil }
                    while index < bytes.count, isSpace(bytes[index]) { index += 1 }
                    guard index < bytes.count, bytes[index] == UInt8(ascii: ">") else { return nil }
                    index += 1
                    element.text = String(decoding: text, as: UTF8.self)
                    return element
                } else if starts("<!--") {
                    guard skip(past: "-->") else { return nil }
                } else if starts("<![CDATA[") {
                    index += 9
                    let start = index
                    guard skip(past: "]]>") else { return nil }
                    text += bytes[start..<(index - 3)]
                } else if starts("<?") {
                    guard skip(past: "?>") else { return nil }
                } else if bytes[index] == UInt8(ascii: "<") {
                    guard let child = self.element(depth: depth + 1) else { return nil }
                    element.children.append(child)
                } else if bytes[index] == UInt8(ascii: "&") {
                    guard let resolved = entity() else { return nil }
                    text += resolved
                } else {
                    text.append(bytes[index])
                    index += 1
                }
            }
            return nil
        }

        mutating func name() -> String? {
            let start = index
            while index < bytes.count, !isSpace(bytes[index]), bytes[index] != UInt8(ascii: ">"),
                  bytes[index] != UInt8(ascii: "/") {
                index += 1
            }
            return index > start ? String(decoding: bytes[start..<index], as: UTF8.self) : nil
        }

        /// `&amp;` `&lt;` `&gt;` `&quot;` `&apos;` `&#NN;` `&#xHH;` as UTF-8.
        mutating func entity() -> [UInt8]? {
            guard let end = bytes[index...].prefix(12).firstIndex(of: UInt8(ascii: ";")) else { return nil }
            let body = String(decoding: bytes[(index + 1)..<end], as: UTF8.self)
            index = end + 1
            switch body {
            case "amp": return [UInt8(ascii: "&")]
            case "lt": return [UInt8(ascii: "<")]
            case "gt": return [UInt8(ascii: ">")]
            case "quot": return [UInt8(ascii: "\"")]
            case "apos": return [UInt8(ascii: "'")]
            default:
                let value: UInt32?
                if body.hasPrefix("#x") || body.hasPrefix("#X") {
                    value = UInt32(body.dropFirst(2), radix: 16)
                } else if body.hasPrefix("#") {
                    value = UInt32(body.dropFirst())
                } else {
                    value = nil
                }
                guard let value, let scalar = UnicodeScalar(value) else { return nil }
                return Array(String(Character(scalar)).utf8)
            }
        }

        func starts(_ text: String) -> Bool {
            let pattern = Array(text.utf8)
            return bytes.count - index >= pattern.count && bytes[index..<(index + pattern.count)].elementsEqual(pattern)
        }

        /// Moves past the next `text`; false when it never comes.
        mutating func skip(past text: String) -> Bool {
            let pattern = Array(text.utf8)
            while index + pattern.count <= bytes.count {
                if bytes[index..<(index + pattern.count)].elementsEqual(pattern) {
                    index += pattern.count
                    return true
                }
                index += 1
            }
            index = bytes.count
            return false
        }

        func isSpace(_ byte: UInt8) -> Bool {
            byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
        }

        func localName(_ name: String) -> String {
            name.split(separator: ":").last.map(String.init) ?? name
        }
    }
}
