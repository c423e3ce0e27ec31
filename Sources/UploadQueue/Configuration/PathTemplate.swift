import Foundation

extension Destination {
    /// A name template such as `{date}/{job_id}-{name}`, checked when the config is read and filled per job.
    ///
    /// Every filled-in value is escaped so that it cannot contain `/` (or start with `.`): no meta value or file name
    /// can climb out of the directory or prefix the template puts it in.
    public struct PathTemplate: Sendable, Equatable, CustomStringConvertible {
        enum Part: Sendable, Equatable {
            case literal(String)
            case jobID, name, ext, date, sha256
            case meta(String)
            /// A placeholder only some templates know (`{url}`, `{upload_id}`, `{key}`), filled by the caller.
            case extra(String)
        }

        let parts: [Part]
        public let description: String

        /// Whether the template names `{sha256}` (which a job hashed while sending does not have before it is sent).
        var usesSHA256: Bool { parts.contains(.sha256) }

        /// `{job_id}-{name}`: unique per job and still readable.
        public static let defaultFileName = try! PathTemplate("{job_id}-{name}")

        /// Parses a template; throws a message naming the bad placeholder.
        public init(_ text: String) throws(PathTemplateError) {
            let parts = try Self.parse(text, extraPlaceholders: [])
            if text.split(separator: "/").contains(where: { $0 == ".." }) {
                throw PathTemplateError(message: "template \"\(text)\" may not contain `..`")
            }
            guard !parts.isEmpty, !text.hasPrefix("/") else {
                throw PathTemplateError(message: "template \"\(text)\" must be a relative name")
            }
            self.parts = parts
            self.description = text
        }

        /// Splits a template into literals and placeholders; `extraPlaceholders` are names allowed besides the job's.
        static func parse(_ text: String, extraPlaceholders: [String]) throws(PathTemplateError) -> [Part] {
            var parts: [Part] = []
            var literal = ""
            var index = text.startIndex
            while index < text.endIndex {
                let character = text[index]
                if character == "{" {
                    guard let close = text[index...].firstIndex(of: "}") else {
                        throw PathTemplateError(message: "unclosed `{` in template \"\(text)\"")
                    }
                    let name = String(text[text.index(after: index)..<close])
                    if !literal.isEmpty { parts.append(.literal(literal)); literal = "" }
                    switch name {
                    case "job_id": parts.append(.jobID)
                    case "name": parts.append(.name)
                    case "ext": parts.append(.ext)
                    case "date": parts.append(.date)
                    case "sha256": parts.append(.sha256)
                    default:
                        if name.hasPrefix("meta."), name.count > 5 {
                            parts.append(.meta(String(name.dropFirst(5))))
                        } else if extraPlaceholders.contains(name) {
                            parts.append(.extra(name))
                        } else {
                            let known = ["{job_id}", "{name}", "{ext}", "{date}", "{sha256}", "{meta.KEY}"]
                                + extraPlaceholders.map { "{\($0)}" }
                            throw PathTemplateError(message: "unknown placeholder {\(name)} in template \"\(text)\" "
                                + "(known: \(known.joined(separator: ", ")))")
                        }
                    }
                    index = text.index(after: close)
                } else if character == "}" {
                    throw PathTemplateError(message: "stray `}` in template \"\(text)\"")
                } else {
                    literal.append(character)
                    index = text.index(after: index)
                }
            }
            if !literal.isEmpty { parts.append(.literal(literal)) }
            return parts
        }

        /// Fills the template for a job; missing meta keys become empty. `escape` keeps each value to one plain name
        /// (percent-encoding by default, for file names).
        func expand(jobID: JobID, originalName: String, sha256: String, meta: [String: String], date: Date,
                    escape: (String) -> String = PathTemplate.escape) -> String {
            var result = ""
            for part in parts {
                switch part {
                case .literal(let text): result += text
                case .jobID: result += jobID.rawValue
                case .name: result += escape(originalName)
                case .ext: result += escape((originalName as NSString).pathExtension)
                case .date: result += Self.utcDay(date)
                case .sha256: result += sha256
                case .meta(let key): result += escape(meta[key] ?? "")
                case .extra: break
                }
            }
            return result
        }

        /// `YYYY-MM-DD` in UTC.
        static func utcDay(_ date: Date) -> String {
            var seconds = time_t(date.timeIntervalSince1970)
            var parts = tm()
            gmtime_r(&seconds, &parts)
            return String(format: "%04d-%02d-%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday))
        }

        /// Percent-encodes `/`, `%`, `\`, control characters and a leading dot, so a value stays one plain name.
        static func escape(_ value: String) -> String {
            var out = ""
            for (offset, scalar) in value.unicodeScalars.enumerated() {
                let needsEscape = scalar == "/" || scalar == "%" || scalar == "\\" || scalar.value < 0x20 || scalar.value == 0x7F
                    || (offset == 0 && scalar == ".")
                if needsEscape {
                    for byte in String(scalar).utf8 { out += String(format: "%%%02X", byte) }
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
            return out
        }
    }
}

extension Destination {
    /// A template that cannot be used, with the reason.
    public struct PathTemplateError: Error, Sendable, Equatable {
        public var message: String
    }
}
