/// RFC 3986 percent-encoding of everything but the unreserved characters (`A-Z a-z 0-9 - . _ ~`): UTF-8 bytes one
/// by one as uppercase `%XX`, a space as `%20` (never `+`). URL-template values and SigV4 both want exactly this.
enum PercentEncoding {
    static func unreserved(_ value: String) -> String {
        var out = ""
        out.reserveCapacity(value.utf8.count)
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"):
                out.unicodeScalars.append(UnicodeScalar(byte))
            default:
                out.append("%")
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            }
        }
        return out
    }

    private static let hexDigits: [Character] = Array("0123456789ABCDEF")
}
