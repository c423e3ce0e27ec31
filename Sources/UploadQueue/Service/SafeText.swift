/// Text from outside (file names, metadata, server answers) made safe to print: control characters and the
/// characters that reorder text are shown as escapes, so a name cannot end a log line and forge the next one (a
/// journald `<0>` priority), move a terminal's cursor or recolour it, or hide what follows it.
package enum SafeText {
    /// `text` with every C0 and C1 control character, DEL and bidirectional formatting character escaped: `\n`,
    /// `\r` and `\t` by name, bytes below 0x80 as `\x1b`, the others as `\u{202e}`. Everything else is kept as it is.
    package static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                out.append(scalar)
                continue
            }
            let escape: String
            switch scalar {
            case "\n": escape = "\\n"
            case "\r": escape = "\\r"
            case "\t": escape = "\\t"
            default:
                let hex = String(scalar.value, radix: 16)
                escape = scalar.value < 0x80 ? "\\x" + (hex.count < 2 ? "0" + hex : hex) : "\\u{\(hex)}"
            }
            out.append(contentsOf: escape.unicodeScalars)
        }
        return String(out)
    }

    /// `text` as a quoted JSON string that is also a TOML basic string: `"` and `\` escaped, `\n`, `\r` and `\t`
    /// by name, and every other character `needsEscape` names as `\uXXXX`, so the line cannot break or reorder.
    package static func jsonString(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        out.append("\"")
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out.append(contentsOf: #"\""#.unicodeScalars)
            case "\\": out.append(contentsOf: #"\\"#.unicodeScalars)
            case "\n": out.append(contentsOf: #"\n"#.unicodeScalars)
            case "\r": out.append(contentsOf: #"\r"#.unicodeScalars)
            case "\t": out.append(contentsOf: #"\t"#.unicodeScalars)
            default:
                if needsEscape(scalar) {
                    out.append(contentsOf: String(format: "\\u%04x", scalar.value).unicodeScalars)
                } else {
                    out.append(scalar)
                }
            }
        }
        out.append("\"")
        return String(out)
    }

    /// Whether a character must not reach a terminal or a log as it is.
    package static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: return true
        // Bidirectional marks, embeddings, overrides and isolates (the "Trojan Source" characters).
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }

    /// Bytes that are not valid UTF-8 (a file name from another system), shown with printable ASCII as it is and
    /// every other byte as `\xff`.
    package static func escaped(bytes: [UInt8]) -> String {
        bytes.map { byte in
            (0x20..<0x7F).contains(byte) && byte != UInt8(ascii: "\\")
                ? String(UnicodeScalar(byte)) : "\\x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16)
        }.joined()
    }
}
