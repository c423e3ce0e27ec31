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
            // The standard library's search, not Foundation's (which goes through CFString): this runs for every
            // request a transfer makes.
            guard let separator = url.firstRange(of: "://") else { return nil }
            let scheme = url[..<separator.lowerBound].lowercased()
            guard scheme == "http" || scheme == "https" else { return nil }
            let rest = url[separator.upperBound...]
            var authority = rest.prefix { !"/?#".contains($0) }
            if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
            let hostPart: Substring
            let portPart: Substring?
            if authority.hasPrefix("[") {
                guard let close = authority.firstIndex(of: "]") else { return nil }
                hostPart = authority[...close]
                let after = authority[authority.index(after: close)...]
                guard after.isEmpty || after.hasPrefix(":") else { return nil }
                portPart = after.isEmpty ? nil : after.dropFirst()
            } else if let colon = authority.lastIndex(of: ":") {
                hostPart = authority[..<colon]
                portPart = authority[authority.index(after: colon)...]
            } else {
                hostPart = authority
                portPart = nil
            }
            guard !hostPart.isEmpty else { return nil }
            let defaultPort = scheme == "https" ? 443 : 80
            let port: Int
            if let portPart, !portPart.isEmpty {
                guard portPart.allSatisfy(\.isASCII), let value = Int(portPart), (1...65_535).contains(value) else {
                    return nil
                }
                port = value
            } else {
                port = defaultPort
            }
            self.scheme = scheme
            host = hostPart.lowercased()
            self.port = port
        }

        /// `https://host` or `http://host:8080`: the default port left out.
        public var description: String {
            "\(scheme)://\(host)\(port == (scheme == "https" ? 443 : 80) ? "" : ":\(port)")"
        }
    }
}
