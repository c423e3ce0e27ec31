/// Classifies a bare TOML token: boolean, integer, float or date-time.
enum TOMLScalar {
    static func parse(_ token: String) -> TOMLValue.Kind? {
        switch token {
        case "true": return .boolean(true)
        case "false": return .boolean(false)
        case "inf", "+inf": return .float(.infinity)
        case "-inf": return .float(-.infinity)
        case "nan", "+nan", "-nan": return .float(.nan)
        default: break
        }
        let chars = Array(token.utf8)
        if isDateTime(chars) { return .datetime(token) }
        if let integer = integer(chars) { return .integer(integer) }
        if let float = float(chars) { return .float(float) }
        return nil
    }

    // MARK: Integers

    private static func integer(_ chars: [UInt8]) -> Int64? {
        if chars.count > 2, chars[0] == UInt8(ascii: "0") {
            let radix: Int
            switch chars[1] {
            case UInt8(ascii: "x"): radix = 16
            case UInt8(ascii: "o"): radix = 8
            case UInt8(ascii: "b"): radix = 2
            default: return nil
            }
            guard let digits = digitsWithUnderscores(Array(chars[2...]), radix: radix) else { return nil }
            return Int64(digits, radix: radix)
        }
        var body = chars[...]
        var sign = ""
        if let first = body.first, first == .plus || first == .minus {
            sign = first == .minus ? "-" : ""
            body = body.dropFirst()
        }
        guard let digits = digitsWithUnderscores(Array(body), radix: 10) else { return nil }
        guard digits == "0" || !digits.hasPrefix("0") else { return nil }
        return Int64(sign + digits)
    }

    /// The digits with underscores removed, when every underscore sits between two digits.
    private static func digitsWithUnderscores(_ chars: [UInt8], radix: Int) -> String? {
        guard let first = chars.first, let last = chars.last, first != .underscore, last != .underscore else { return nil }
        var out = ""
        var previousUnderscore = false
        for char in chars {
            if char == .underscore {
                if previousUnderscore { return nil }
                previousUnderscore = true
                continue
            }
            previousUnderscore = false
            guard let scalar = Character(Unicode.Scalar(char)).hexDigitValue, scalar < radix else { return nil }
            out.append(Character(Unicode.Scalar(char)))
        }
        return out
    }

    // MARK: Floats

    private static func float(_ chars: [UInt8]) -> Double? {
        var body = chars[...]
        var sign = ""
        if let first = body.first, first == .plus || first == .minus {
            sign = first == .minus ? "-" : ""
            body = body.dropFirst()
        }
        let exponentIndex = body.firstIndex { $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") }
        let mantissa = exponentIndex.map { body[..<$0] } ?? body
        let dotIndex = mantissa.firstIndex(of: .dot)
        guard exponentIndex != nil || dotIndex != nil else { return nil }

        guard let whole = digitsWithUnderscores(Array(dotIndex.map { mantissa[..<$0] } ?? mantissa), radix: 10),
              whole == "0" || !whole.hasPrefix("0")
        else { return nil }
        var text = sign + whole
        if let dotIndex {
            guard let fraction = digitsWithUnderscores(Array(mantissa[(dotIndex + 1)...]), radix: 10) else { return nil }
            text += "." + fraction
        }
        if let exponentIndex {
            var exponent = body[(exponentIndex + 1)...]
            var exponentSign = ""
            if let first = exponent.first, first == .plus || first == .minus {
                exponentSign = first == .minus ? "-" : "+"
                exponent = exponent.dropFirst()
            }
            guard let digits = digitsWithUnderscores(Array(exponent), radix: 10) else { return nil }
            text += "e" + exponentSign + digits
        }
        return Double(text)
    }

    // MARK: Date-times

    /// Offset date-time, local date-time, local date or local time (RFC 3339 shapes TOML allows).
    private static func isDateTime(_ chars: [UInt8]) -> Bool {
        var rest = chars[...]
        var sawDate = false
        if rest.count >= 10, matches(rest.prefix(10), "dddd-dd-dd") {
            sawDate = true
            rest = rest.dropFirst(10)
            guard let separator = rest.first else { return true }
            guard separator == UInt8(ascii: "T") || separator == UInt8(ascii: "t") || separator == .space else { return false }
            rest = rest.dropFirst()
        }
        guard rest.count >= 8, matches(rest.prefix(8), "dd:dd:dd") else { return false }
        rest = rest.dropFirst(8)
        if rest.first == .dot {
            rest = rest.dropFirst()
            let digits = rest.prefix { TOMLScanner.isDigit($0) }
            guard !digits.isEmpty else { return false }
            rest = rest.dropFirst(digits.count)
        }
        guard let offset = rest.first else { return true }
        guard sawDate else { return false }
        if rest.count == 1, offset == UInt8(ascii: "Z") || offset == UInt8(ascii: "z") { return true }
        return (offset == .plus || offset == .minus) && rest.count == 6 && matches(rest.dropFirst(), "dd:dd")
    }

    /// `pattern` uses `d` for a digit; other characters must match exactly.
    private static func matches(_ chars: ArraySlice<UInt8>, _ pattern: String) -> Bool {
        let pattern = Array(pattern.utf8)
        guard chars.count == pattern.count else { return false }
        return zip(chars, pattern).allSatisfy { char, expected in
            expected == UInt8(ascii: "d") ? TOMLScanner.isDigit(char) : char == expected
        }
    }
}
