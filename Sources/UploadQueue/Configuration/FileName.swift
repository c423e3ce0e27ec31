import Foundation

extension Destination {
    /// Makes names that a target cannot take fit it, the same way every time.
    ///
    /// The rule (documented in docs/operations.md): a name longer than the limit (255 bytes per path component on Linux
    /// file systems) keeps its extension (the last `.xxx`, up to 16 bytes) and the job id, and its beginning is cut
    /// at a character boundary so the whole fits. When the kept beginning already holds the job id, it is not added
    /// again. The same job always gets the same name, so a retry finds its own earlier copy.
    public enum FileName {
        /// The longest file name (one path component) Linux file systems take, in bytes.
        public static let componentLimit = 255

        /// `name` if it fits in `limit` bytes, else its shortened form (see the type's rule).
        public static func fitting(_ name: String, limit: Int = componentLimit, jobID: JobID) -> String {
            guard name.utf8.count > limit else { return name }
            let ext = Self.extensionPart(of: name)
            let stem = String(name.dropLast(ext.count))
            let id = jobID.rawValue
            // First try keeping the job id where it already is (templates such as `{job_id}-{name}` start with it).
            let plain = prefix(of: stem, bytes: limit - ext.utf8.count)
            if plain.contains(id) { return plain + ext }
            let marked = prefix(of: stem, bytes: max(0, limit - ext.utf8.count - id.utf8.count - 1))
            return marked + "~" + id + ext
        }

        /// `directory/relative` with every component of `relative` made to fit (`fitting`); the last one leaves room
        /// for `reserve` more bytes (a sidecar's suffix that may follow it).
        static func fittingPath(_ relative: String, under directory: String, jobID: JobID, reserve: Int = 0) -> String {
            var parts = PathSegments.split(relative, omittingEmpty: true)
            for index in parts.indices {
                parts[index] = fitting(parts[index], limit: componentLimit - (index == parts.count - 1 ? reserve : 0),
                                       jobID: jobID)
            }
            var base = directory
            while base.count > 1, base.hasSuffix("/") { base.removeLast() }
            return ([base] + parts).joined(separator: "/")
        }

        /// The longest path Linux takes (`PATH_MAX` less the terminating zero), in bytes.
        public static let pathLimit = 4095
        /// The longest S3 object key, in UTF-8 bytes.
        public static let objectKeyLimit = 1024
        /// The longest request URL uploadq sends, in bytes: under the 8 KiB request line of nginx's and Apache's
        /// defaults, which answer 414 beyond it.
        public static let urlLimit = 8000

        /// An object key of at most `limit` bytes: its last segment shortened by the rule (earlier segments are the
        /// template's folders and stay); nil when even the shortest last segment does not fit after them.
        static func fittingKey(_ key: String, limit: Int = objectKeyLimit, jobID: JobID) -> String? {
            guard key.utf8.count > limit else { return key }
            let slash = key.lastIndex(of: "/")
            let folders = slash.map { String(key[...$0]) } ?? ""
            let last = slash.map { String(key[key.index(after: $0)...]) } ?? key
            let room = limit - folders.utf8.count
            let ext = extensionPart(of: last)
            guard room >= jobID.rawValue.utf8.count + 1 + ext.utf8.count else { return nil }
            return folders + fitting(last, limit: room, jobID: jobID)
        }

        /// A request URL whose path segments each fit 255 bytes once decoded (a DAV server stores them as file
        /// names), shortened by the rule and encoded again, and which fits `urlLimit`; nil when it cannot be made to.
        static func fittingURL(_ url: String, jobID: JobID) -> String? {
            guard let schemeEnd = url.firstRange(of: "://")?.upperBound else { return url.utf8.count <= urlLimit ? url : nil }
            let pathStart = url[schemeEnd...].firstIndex(of: "/") ?? url.endIndex
            let queryStart = url[pathStart...].firstIndex { $0 == "?" || $0 == "#" } ?? url.endIndex
            // Decoding only shortens a segment: none can be too long when the whole path is not (the common case,
            // checked for every transfer).
            if url[pathStart..<queryStart].utf8.count <= componentLimit { return url.utf8.count <= urlLimit ? url : nil }
            let segments = PathSegments.split(url[pathStart..<queryStart], omittingEmpty: false).map { segment in
                guard segment.utf8.count > componentLimit else { return String(segment) }
                let decoded = String(segment).removingPercentEncoding ?? String(segment)
                guard decoded.utf8.count > componentLimit else { return String(segment) }
                return PercentEncoding.unreserved(fitting(decoded, jobID: jobID))
            }
            let fitted = String(url[..<pathStart]) + segments.joined(separator: "/") + String(url[queryStart...])
            return fitted.utf8.count <= urlLimit ? fitted : nil
        }

        /// The extension with its dot (`.jpg`), or empty when there is none or it is too long to be one.
        static func extensionPart(of name: String) -> String {
            guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
            let ext = String(name[dot...])
            return ext.utf8.count <= 16 && !ext.dropFirst().isEmpty ? ext : ""
        }

        /// The longest beginning of `text` of at most `bytes` UTF-8 bytes that ends at a character boundary.
        static func prefix(of text: String, bytes: Int) -> String {
            var result = ""
            var count = 0
            for character in text {
                let size = character.utf8.count
                guard count + size <= bytes else { break }
                result.append(character)
                count += size
            }
            return result
        }
    }
}
