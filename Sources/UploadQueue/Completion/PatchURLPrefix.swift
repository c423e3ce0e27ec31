import Foundation

extension Configuration {
    /// One entry of `[patch] allowed_urls`: a scheme, host, port and path prefix under which a spool sidecar may name
    /// its patch target.
    ///
    /// The sidecar's URL must have the same scheme, host and port, and a path that lies under the prefix's path at a
    /// segment boundary (`/photos/` admits `/photos/7`, and `/photos` admits `/photos/7` but not `/photos-old/7`).
    /// A URL that could leave the prefix once a server or proxy normalises it is refused: dot segments, encoded
    /// dots, slashes, backslashes or percent signs, `;` path parameters, user info.
    public struct PatchURLPrefix: Sendable, Equatable, CustomStringConvertible {
        /// `http` or `https`.
        public let scheme: String
        /// The host, lowercased.
        public let host: String
        /// The port, the scheme's default when the text names none.
        public let port: Int
        /// The path prefix, as written (percent-encoded); `/` when the text has none.
        public let path: String

        /// Parses `https://api.example.com/photos/` (no user info, query or fragment); nil when `text` is not such a
        /// URL.
        public init?(_ text: String) {
            guard let parts = Self.parts(of: text), parts.query == nil else { return nil }
            scheme = parts.scheme
            host = parts.host
            port = parts.port
            path = parts.path
        }

        public var description: String {
            let defaultPort = scheme == "https" ? 443 : 80
            return "\(scheme)://\(host)\(port == defaultPort ? "" : ":\(port)")\(path)"
        }

        /// Whether `url` lies under this prefix: same scheme, host and port, and a path under the prefix's path that
        /// no normalisation can take out of it. Its query is not looked at.
        public func admits(_ url: String) -> Bool {
            guard let parts = Self.parts(of: url), parts.scheme == scheme, parts.host == host, parts.port == port,
                  parts.path.hasPrefix(path)
            else { return false }
            // At a segment boundary: the prefix ends with `/`, or the path goes on with one (or ends).
            if path.hasSuffix("/") || parts.path.count == path.count { return true }
            return parts.path.dropFirst(path.count).hasPrefix("/")
        }

        private struct Parts {
            var scheme: String
            var host: String
            var port: Int
            var path: String
            var query: String?
        }

        /// The parts of an `http` or `https` URL that has a host and no user info, fragment, dot segment or encoded
        /// dot, slash or backslash in its path; nil for anything else.
        private static func parts(of text: String) -> Parts? {
            guard !text.contains(where: { $0.isWhitespace || $0 == "\\" }),
                  let components = URLComponents(string: text),
                  let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
                  let host = components.host?.lowercased(), !host.isEmpty,
                  components.user == nil, components.password == nil, components.fragment == nil
            else { return nil }
            let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
            guard path.hasPrefix("/") else { return nil }
            // Encoded dots and slashes, and what servers also normalise: `;` parameters (`..;/` on Tomcat) and `%25`
            // (decoded twice by some proxies).
            let lowered = path.lowercased()
            guard !["%2e", "%2f", "%5c", "%25", ";"].contains(where: lowered.contains) else { return nil }
            let segments = path.split(separator: "/", omittingEmptySubsequences: false)
            guard !segments.contains(where: { $0 == "." || $0 == ".." }) else { return nil }
            let port = components.port ?? (scheme == "https" ? 443 : 80)
            guard (1...65_535).contains(port) else { return nil }
            // The origin as the credential rules read it must be the same: a port Foundation cannot read (too large)
            // it leaves out, and would take for the default (found by the templates fuzzer).
            func bare(_ host: String) -> Substring { host.drop { $0 == "[" }.prefix { $0 != "]" } }  // IPv6 brackets
            guard let origin = URLOrigin(url: text), origin.scheme == scheme, bare(origin.host) == bare(host),
                  origin.port == port else {
                return nil
            }
            return Parts(scheme: scheme, host: host, port: port, path: path, query: components.percentEncodedQuery)
        }
    }
}
