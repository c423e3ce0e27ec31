extension Destination {
    /// How a whole-file upload (`http-put`, `http-post`) proves that the destination holds the file (`verify`).
    public enum WholeFileVerification: String, Sendable, Equatable, CaseIterable {
        /// After the upload, a `HEAD` of the stored URL must answer 2xx with a `Content-Length` equal to the file's
        /// size, and a matching `Repr-Digest` or `Content-MD5` where the server sends one: the default for a PUT to a
        /// URL template. Skipped when the PUT's own answer already carries a matching digest.
        case head
        /// The answer itself must prove it: a digest or an ETag equal to the bytes' (a minted target's storage), or for
        /// a POST what the destination documents (the remote URL read from its JSON body with `remote_url_from`, a
        /// `Location` on its own origin), never an HTML page.
        case response
        /// The status code alone: a captive portal or a proxy that answers `200` passes it. An explicit opt-out, for
        /// servers that can prove nothing else.
        case status
    }
}

extension Destination {
    /// Where a POST's answer names the stored file (`remote_url_from`): `json:/pointer`, an RFC 6901 JSON pointer
    /// into the answer's JSON body.
    public struct RemoteURLSource: Sendable, Equatable, CustomStringConvertible {
        /// The pointer's reference tokens, unescaped (`/files/0/url` → `files`, `0`, `url`).
        public let tokens: [String]

        /// Reads `json:/a/b`; nil for anything else (the pointer must start with `/`; `~0` and `~1` are `~` and `/`).
        public init?(_ text: String) {
            guard text.hasPrefix("json:/") else { return nil }
            let pointer = text.dropFirst("json:".count)
            var tokens: [String] = []
            for raw in pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
                // `~` must be followed by 0 or 1.
                var token = ""
                var index = raw.startIndex
                while index < raw.endIndex {
                    let character = raw[index]
                    if character == "~" {
                        let next = raw.index(after: index)
                        guard next < raw.endIndex, raw[next] == "0" || raw[next] == "1" else { return nil }
                        token.append(raw[next] == "0" ? "~" : "/")
                        index = raw.index(after: next)
                    } else {
                        token.append(character)
                        index = raw.index(after: index)
                    }
                }
                tokens.append(token)
            }
            self.tokens = tokens
        }

        /// The string the pointer finds in `json` (parsed JSON), nil when it finds nothing or no string.
        func value(in json: Any) -> String? {
            var current = json
            for token in tokens {
                if let object = current as? [String: Any], let next = object[token] {
                    current = next
                } else if let array = current as? [Any], let index = Int(token), token == String(index), index >= 0,
                          index < array.count {
                    current = array[index]
                } else {
                    return nil
                }
            }
            return current as? String
        }

        public var description: String {
            "json:/" + tokens.map { $0.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1") }
                .joined(separator: "/")
        }
    }
}
