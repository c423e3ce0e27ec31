import Foundation

extension PatchTarget {
    /// The body template of a metadata patch, such as `{"photo_url": "{{url}}"}`: checked when it is given (config,
    /// enqueue, sidecar) and filled per job with JSON-escaped values.
    ///
    /// Placeholders: `{{url}}` (the remote URL), `{{job_id}}`, `{{sha256}}`, `{{size}}`, `{{content_type}}`,
    /// `{{name}}` and `{{meta.KEY}}`.
    public struct Body: Sendable, Equatable, CustomStringConvertible {
        enum Part: Sendable, Equatable {
            case literal(String)
            case url, jobID, sha256, size, contentType, name
            case meta(String)
            /// A group's: its name, its members' remote URLs (a JSON array), its members (an array of objects).
            case group, urls, members
        }

        let parts: [Part]
        public let description: String

        /// `{"photo_url": "{{url}}"}`, what CONTRACT.md names as the default.
        public static let standard = try! Body(#"{"photo_url": "{{url}}"}"#)
        /// A group's patch unless its close names a body: the group's name and its members' remote URLs.
        public static let standardGroup = try! Body(#"{"group": "{{group}}", "remote_urls": {{urls}}}"#)

        /// Whether the template fits a group's patch: no placeholder of one job's (`{{url}}`, `{{meta.KEY}}`…).
        public var isGroupTemplate: Bool {
            parts.allSatisfy { part in
                switch part {
                case .literal, .group, .urls, .members: true
                default: false
                }
            }
        }

        /// Parses a template; throws naming the unknown placeholder or the unclosed `{{`.
        public init(_ text: String) throws(Destination.PathTemplateError) {
            var parts: [Part] = []
            var rest = Substring(text)
            while let open = rest.range(of: "{{") {
                if open.lowerBound > rest.startIndex { parts.append(.literal(String(rest[..<open.lowerBound]))) }
                guard let close = rest[open.upperBound...].range(of: "}}") else {
                    throw PathTemplateError(message: "unclosed `{{` in patch body \"\(text)\"")
                }
                let name = rest[open.upperBound..<close.lowerBound].trimmingCharacters(in: .whitespaces)
                switch name {
                case "url": parts.append(.url)
                case "job_id": parts.append(.jobID)
                case "sha256": parts.append(.sha256)
                case "size": parts.append(.size)
                case "content_type": parts.append(.contentType)
                case "name": parts.append(.name)
                case "group": parts.append(.group)
                case "urls": parts.append(.urls)
                case "members": parts.append(.members)
                default:
                    guard name.hasPrefix("meta."), name.count > 5 else {
                        throw PathTemplateError(message: "unknown placeholder {{\(name)}} in patch body \"\(text)\" (known: "
                            + "{{url}}, {{job_id}}, {{sha256}}, {{size}}, {{content_type}}, {{name}}, {{meta.KEY}}, and for a "
                            + "group's patch {{group}}, {{urls}}, {{members}})")
                    }
                    parts.append(.meta(String(name.dropFirst(5))))
                }
                rest = rest[close.upperBound...]
            }
            if !rest.isEmpty { parts.append(.literal(String(rest))) }
            self.parts = parts
            description = text
        }

        /// The body for `job`, uploaded to `remoteURL`; every value JSON-escaped (the template supplies the quotes).
        func render(for job: Job, remoteURL: String) -> String {
            var out = ""
            for part in parts {
                switch part {
                case .literal(let text): out += text
                case .url: out += Self.escape(remoteURL)
                case .jobID: out += job.id.rawValue
                case .sha256: out += job.sha256
                case .size: out += String(job.size)
                case .contentType: out += Self.escape(job.contentType)
                case .name: out += Self.escape(job.originalName)
                case .meta(let key): out += Self.escape(job.meta[key] ?? "")
                case .group: out += Self.escape(job.group ?? "")
                case .urls: out += Self.jsonArray([remoteURL])
                case .members:
                    out += Self.members([JobGroup.Member(jobID: job.id, originalName: job.originalName,
                                                         size: job.size, sha256: job.sha256, remoteURL: remoteURL)])
                }
            }
            return out
        }

        /// The body for a group's completion (a template that `isGroupTemplate`).
        func render(for group: JobGroup) -> String {
            var out = ""
            for part in parts {
                switch part {
                case .literal(let text): out += text
                case .group: out += Self.escape(group.name)
                case .urls: out += Self.jsonArray(group.completion.map(\.remoteURL))
                case .members: out += Self.members(group.completion)
                default: break
                }
            }
            return out
        }

        private static func jsonArray(_ values: [String]) -> String {
            "[" + values.map { "\"" + escape($0) + "\"" }.joined(separator: ", ") + "]"
        }

        private static func members(_ members: [JobGroup.Member]) -> String {
            "[" + members.map { member in
                "{\"id\": \"\(member.jobID.rawValue)\", \"name\": \"\(escape(member.originalName))\", \"remote_url\": "
                    + "\"\(escape(member.remoteURL))\", \"sha256\": \"\(member.sha256)\", \"size\": \(member.size)}"
            }.joined(separator: ", ") + "]"
        }

        /// The inside of a JSON string: `"`, `\` and control characters escaped.
        static func escape(_ value: String) -> String {
            var out = ""
            for scalar in value.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                default:
                    if scalar.value < 0x20 || scalar.value == 0x2028 || scalar.value == 0x2029 {
                        out += String(format: "\\u%04x", scalar.value)
                    } else {
                        out.unicodeScalars.append(scalar)
                    }
                }
            }
            return out
        }
    }
}

extension Configuration {
    /// `[patch]`: how uploaded files' URLs are patched into the app's records by default.
    public struct PatchSettings: Sendable, Equatable {
        /// The HTTP method (a job's `patch.method` overrides it).
        public var method: String
        /// The body template (a job's `patch.body` overrides it).
        public var body: PatchTarget.Body
        /// Headers, bearer token, CAs and timeouts for the patch requests.
        public var http: Destination.HTTPSettings
        /// Patches are tiny: by default they go on a metered link too.
        public var onMetered: Destination.MeteredPolicy
        /// `allowed_urls`: the prefixes under which a spool sidecar may name a patch target (none by default: a
        /// sidecar's patch target is refused). The CLI and the library may name any URL.
        public var allowedURLs: [PatchURLPrefix] = []
        /// `sidecar_headers`: the headers a spool sidecar's patch may set, lowercased (none by default). Credentials,
        /// the host and the request's framing are never among them.
        public var sidecarHeaders: Set<String> = []

        /// `PATCH` with `{"photo_url": "{{url}}"}`, no credentials, allowed on metered links.
        public init(method: String = "PATCH", body: PatchTarget.Body = .standard, http: Destination.HTTPSettings = Destination.HTTPSettings(),
                    onMetered: Destination.MeteredPolicy = .allow) {
            self.method = method
            self.body = body
            self.http = http
            self.onMetered = onMetered
        }

        /// Whether `method` is an HTTP method token.
        static func isMethod(_ method: String) -> Bool {
            !method.isEmpty && method.allSatisfy { $0.isASCII && ($0.isUppercase || $0 == "-") }
        }
    }
}
