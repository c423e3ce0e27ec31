extension Destination {
    /// The origin of an http or https URL: scheme, host and port, as browsers and curl compare them before sending
    /// credentials.
    public struct URLOrigin: Hashable, Sendable, CustomStringConvertible {
        /// `http` or `https`.
        public let scheme: String
        /// The host, lowercased (an IPv6 address keeps its brackets).
        public let host: String
        /// The port, the scheme's default when the URL names none.
        public let port: Int

        /// The origin of `url`, which may be a template (`https://host/up/{name}`: only what comes before the path is
        /// read); nil unless it is an http or https URL with a host. User info is not part of the origin.
        public init?(url: String) {
            // Byte by byte, as curl reads a URL (its delimiters are ASCII): this runs for every request a transfer
            // makes, and Character by Character it cost more than the rest of the request's set-up.
            let bytes = Array(url.utf8)
            guard let separator = Self.schemeEnd(bytes) else { return nil }
            let scheme: String
            switch bytes[..<separator].map(Self.asciiLowercased) {
            case Array("http".utf8): scheme = "http"
            case Array("https".utf8): scheme = "https"
            default: return nil
            }
            let rest = bytes[(separator + 3)...]
            var authority = rest.prefix {
                $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#")
            }
            if let at = authority.lastIndex(of: UInt8(ascii: "@")) { authority = authority[(at + 1)...] }
            let hostPart: ArraySlice<UInt8>
            let portPart: ArraySlice<UInt8>?
            if authority.first == UInt8(ascii: "[") {
                guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { return nil }
                hostPart = authority[...close]
                let after = authority[(close + 1)...]
                guard after.isEmpty || after.first == UInt8(ascii: ":") else { return nil }
                portPart = after.isEmpty ? nil : after.dropFirst()
            } else if let colon = authority.lastIndex(of: UInt8(ascii: ":")) {
                hostPart = authority[..<colon]
                portPart = authority[(colon + 1)...]
            } else {
                hostPart = authority
                portPart = nil
            }
            guard !hostPart.isEmpty else { return nil }
            let port: Int
            if let portPart, !portPart.isEmpty {
                // Digits only (RFC 3986's `port = *DIGIT`), at most five: no sign, no overflow.
                guard portPart.count <= 5, portPart.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
                else { return nil }
                let value = portPart.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
                guard (1...65_535).contains(value) else { return nil }
                port = value
            } else {
                port = scheme == "https" ? 443 : 80
            }
            self.scheme = scheme
            // A host of ASCII (a name, an address, an IDN's punycode) lowercased byte by byte; any other as Unicode.
            host = hostPart.allSatisfy { $0 < 0x80 }
                ? String(decoding: hostPart.map(Self.asciiLowercased), as: UTF8.self)
                : String(decoding: hostPart, as: UTF8.self).lowercased()
            self.port = port
        }

        /// Where `://` starts, the first time it appears.
        private static func schemeEnd(_ bytes: [UInt8]) -> Int? {
            guard bytes.count >= 3 else { return nil }
            for index in 0...(bytes.count - 3)
            where bytes[index] == UInt8(ascii: ":") && bytes[index + 1] == UInt8(ascii: "/")
                && bytes[index + 2] == UInt8(ascii: "/") {
                return index
            }
            return nil
        }

        private static func asciiLowercased(_ byte: UInt8) -> UInt8 {
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
        }

        /// `https://host` or `http://host:8080`: the default port left out.
        public var description: String {
            "\(scheme)://\(host)\(port == (scheme == "https" ? 443 : 80) ? "" : ":\(port)")"
        }
    }
}
