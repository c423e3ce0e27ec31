import Foundation

extension Destination {
    /// A URL with placeholders, such as `https://dav.example.com/photos/{date}/{job_id}-{name}`.
    ///
    /// Job values (`{name}`, `{meta.KEY}`…) stay inside one path segment even on servers that decode `%2F` and `%2E`
    /// before mapping paths (nginx does): `/` and `\` become `_`, a leading `.` becomes `_`, and the rest is
    /// percent-encoded, so no value can climb out of the prefix the template puts it under. Extra placeholders
    /// (`{url}`, `{upload_id}`, `{key}`) are filled by the uploader: `{url}` and `{key}` verbatim (a URL, and an S3
    /// key encoded as a path), the others like job values.
    public struct URLTemplate: Sendable, Equatable, CustomStringConvertible {
        let parts: [PathTemplate.Part]
        public let description: String

        /// Parses a template that must be an absolute `http://` or `https://` URL (any scheme with `anyScheme`).
        public init(_ text: String, extraPlaceholders: [String] = [], anyScheme: Bool = false) throws(PathTemplateError) {
            let lowered = text.lowercased()
            if anyScheme {
                guard let scheme = lowered.range(of: "://"), !lowered[..<scheme.lowerBound].isEmpty else {
                    throw PathTemplateError(message: "\"\(text)\" is not an absolute URL (scheme://host/…)")
                }
            } else {
                guard lowered.hasPrefix("http://") || lowered.hasPrefix("https://") else {
                    throw PathTemplateError(message: "\"\(text)\" must start with http:// or https://")
                }
            }
            parts = try PathTemplate.parse(text, extraPlaceholders: extraPlaceholders)
            description = text
            guard Self.hasHost(parts) else { throw PathTemplateError(message: "\"\(text)\" names no host") }
        }

        /// Extra placeholders the uploader fills already encoded: `{url}` (a URL) and `{key}` (an S3 key as a path,
        /// each segment encoded, `/` kept).
        static let verbatimExtras: Set<String> = ["url", "key"]

        /// Whether the template names `{sha256}`.
        var usesSHA256: Bool { parts.contains(.sha256) }

        /// True when the template has no placeholder: the same URL for every job.
        var isConstant: Bool { parts.allSatisfy { if case .literal = $0 { true } else { false } } }

        /// Fills the template for `job`; `extra` supplies the uploader's own placeholders.
        func expand(for job: Job, extra: [String: String] = [:]) -> String {
            var result = ""
            for part in parts {
                switch part {
                case .literal(let text): result += text
                case .jobID: result += job.id.rawValue
                case .name: result += Self.encode(job.originalName)
                case .ext: result += Self.encode((job.originalName as NSString).pathExtension)
                case .date: result += PathTemplate.utcDay(job.createdAt)
                case .sha256: result += job.sha256
                case .meta(let key): result += Self.encode(job.meta[key] ?? "")
                case .extra(let name):
                    result += Self.verbatimExtras.contains(name) ? (extra[name] ?? "") : Self.encode(extra[name] ?? "")
                }
            }
            return result
        }

        /// The URL up to the first placeholder's path segment: where a probe can ask whether the server is up.
        var staticPrefix: String {
            var prefix = ""
            for part in parts {
                guard case .literal(let text) = part else { break }
                prefix += text
            }
            if !isConstant, let slash = prefix.lastIndex(of: "/") {
                let schemeEnd = prefix.range(of: "://")?.upperBound ?? prefix.startIndex
                if slash >= schemeEnd { return String(prefix[...slash]) }
                return prefix + "/"
            }
            return prefix
        }

        /// One safe path segment from a value: no `/`, `\` or leading `.`, everything but RFC 3986's unreserved
        /// characters percent-encoded.
        static func encode(_ value: String) -> String {
            // Per scalar (as Foundation's `replacingOccurrences` did, without its CFString search per call): every
            // upload expands its URL, and a slash with a combining mark after it is still a slash.
            var text = String(String.UnicodeScalarView(value.unicodeScalars.map { $0 == "/" || $0 == "\\" ? "_" : $0 }))
            if text.hasPrefix(".") { text = "_" + text.dropFirst() }
            return PercentEncoding.unreserved(text)
        }

        /// Whether something follows `scheme://` before the path: a literal host or a placeholder.
        private static func hasHost(_ parts: [PathTemplate.Part]) -> Bool {
            guard case .literal(let first)? = parts.first, let scheme = first.range(of: "://") else { return true }
            let rest = first[scheme.upperBound...]
            guard let start = rest.first else { return parts.count > 1 }
            return start != "/" && start != "?" && start != "#"
        }
    }
}
