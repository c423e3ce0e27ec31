import Foundation

/// Reads one `[destinations.NAME]` table: the keys common to every protocol, then the protocol's own.
enum DestinationLoader {
    static func destination(named name: String, from table: inout ConfigurationTable,
                            baseDirectory: String) throws(ConfigurationError) -> Destination {
        let supported = Destination.TransferProtocol.allCases.map(\.rawValue).joined(separator: ", ")
        guard let protocolName = try table.string("protocol") else {
            throw ConfigurationError(file: table.file, line: table.table.line, key: table.fullKey("protocol"),
                                     message: "missing (supported: \(supported))")
        }
        guard let transferProtocol = Destination.TransferProtocol(rawValue: protocolName) else {
            throw table.error("protocol", "\"\(protocolName)\" is unknown (supported: \(supported))")
        }
        let isMinted = table.has("mint_url") || table.has("mint_command")
        table.variant = switch transferProtocol {
        case .file: .file
        case .tus: .tus
        case .rufh: .rufh
        case .s3: table.has("mint_url") ? .mintedS3 : .s3
        case .httpPut: isMinted ? (table.has("mint_command") ? .mintedCommand : .minted) : .httpPut
        case .httpPost: isMinted ? (table.has("mint_command") ? .mintedCommand : .minted) : .httpPost
        }
        var destination: Destination
        switch transferProtocol {
        case .s3:
            destination = try s3(name: name, table: &table, baseDirectory: baseDirectory)
        case .file:
            return try localDirectory(name: name, url: try url(&table), table: &table, baseDirectory: baseDirectory)
        case .httpPut, .httpPost:
            // A `where` would bind to the last pattern alone: both are asked here.
            if isMinted {
                destination = try minted(name: name, transferProtocol: transferProtocol, table: &table,
                                         baseDirectory: baseDirectory)
            } else {
                destination = try network(name: name, transferProtocol: transferProtocol, url: try url(&table),
                                          table: &table, baseDirectory: baseDirectory)
            }
        case .tus, .rufh:
            destination = try network(name: name, transferProtocol: transferProtocol, url: try url(&table),
                                      table: &table, baseDirectory: baseDirectory)
        }
        destination.allowPrivateTargets = try table.boolean("allow_private_targets") ?? false
        return destination
    }

    /// `url`, which every protocol but s3 needs.
    private static func url(_ table: inout ConfigurationTable) throws(ConfigurationError) -> String {
        guard let url = try table.string("url") else {
            throw ConfigurationError(file: table.file, line: table.table.line, key: table.fullKey("url"), message: "missing")
        }
        return url
    }

    private static func localDirectory(name: String, url: String, table: inout ConfigurationTable,
                                       baseDirectory: String) throws(ConfigurationError) -> Destination {
        guard url.hasPrefix("file://") else {
            throw table.error("url", "a file destination needs a file:// URL, e.g. \"file://uploaded\" or \"file:///srv/photos\"")
        }
        let path = String(url.dropFirst("file://".count)).removingPercentEncoding ?? ""
        guard !path.isEmpty else { throw table.error("url", "names no directory") }
        var template = PathTemplate.defaultFileName
        if let text = try table.string("name_template") {
            do {
                template = try PathTemplate(text)
            } catch {
                throw table.error("name_template", error.message)
            }
        }
        let checkpointSize = try table.byteCount("chunk_size", minimum: 4096) ?? (8 << 20)
        var fileMode: UInt32?
        if let text = try table.string("file_mode") {
            guard (3...4).contains(text.count), let mode = UInt32(text, radix: 8), mode <= 0o777 else {
                throw table.error("file_mode", "\"\(text)\" is not a mode of permission bits in octal, such as \"0640\"")
            }
            fileMode = mode
        }
        let settings = LocalDirectorySettings(directory: ConfigurationLoader.absolutePath(path, base: baseDirectory),
                                              nameTemplate: template, checkpointSize: checkpointSize, fileMode: fileMode)
        // The URL of the directory in force, as `Destination.localDirectory` makes it: a relative one resolved.
        var destination = Destination(name: name, url: "file://" + settings.directory, settings: .localDirectory(settings))
        destination.hashTiming = try hashTiming(&table, templates: [("name_template", template.usesSHA256)])
        return destination
    }

    private static func network(name: String, transferProtocol: Destination.TransferProtocol, url: String,
                                table: inout ConfigurationTable, baseDirectory: String) throws(ConfigurationError)
        -> Destination
    {
        let urlTemplate: URLTemplate
        do {
            urlTemplate = try URLTemplate(url)
        } catch {
            throw table.error("url", error.message)
        }
        // The origin is where the destination's credentials may go (`CredentialScope`): one, fixed by the admin.
        let authority = url.range(of: "://").map { url[$0.upperBound...].prefix { !"/?#".contains($0) } } ?? ""
        if authority.contains("{") || URLOrigin(url: url) == nil {
            throw table.error("url", """
                "\(URLRedaction.redact(url))" must name its host (and port) itself: placeholders may fill the path \
                and the query, not the host, as the destination's credentials go to that origin alone \
                (list others in trusted_origins)
                """)
        }
        if transferProtocol == .tus || transferProtocol == .rufh, !urlTemplate.isConstant {
            throw table.error("url", "a \(transferProtocol.rawValue) endpoint is one URL for all uploads; placeholders "
                + "are not allowed here")
        }
        let settings: Destination.ProtocolSettings
        switch transferProtocol {
        case .tus:
            var tus = TusSettings(endpoint: url)
            tus.chunkSize = try table.byteCount("chunk_size", minimum: 1024) ?? tus.chunkSize
            tus.creationWithUpload = try table.boolean("creation_with_upload") ?? false
            settings = .tus(tus)
        case .rufh:
            var rufh = RUFHSettings(endpoint: url)
            rufh.interopVersion = Int(try table.integer("interop_version", range: 6...8) ?? 6)
            rufh.chunkSize = try table.byteCount("chunk_size", minimum: 1024) ?? rufh.chunkSize
            rufh.creationWithUpload = try table.boolean("creation_with_upload") ?? false
            settings = .rufh(rufh)
        case .httpPost:
            var post = HTTPPostSettings(url: urlTemplate)
            post.formField = try formField(&table) ?? post.formField
            post.verify = try verification(&table, allowed: [.response, .status]) ?? .response
            if let text = try table.string("remote_url_from") {
                guard let source = RemoteURLSource(text) else {
                    throw table.error("remote_url_from", "\"\(text)\" is not json:/POINTER (an RFC 6901 pointer into the "
                        + "answer's JSON body, such as \"json:/url\" or \"json:/files/0/location\")")
                }
                post.remoteURLFrom = source
            }
            settings = .httpPost(post)
        default:
            settings = .httpPut(HTTPPutSettings(url: urlTemplate, verify: try verification(&table) ?? .head))
        }
        var destination = Destination(name: name, url: url, settings: settings)
        destination.http = try httpSettings(&table, baseDirectory: baseDirectory)
        destination.trustedOrigins = try trustedOrigins(&table)
        destination.publicURLTemplate = try publicURLTemplate(&table, placeholders: ["url", "upload_id"])
        destination.circuitBreaker = try circuitBreaker(&table)
        destination.onMetered = try onMetered(&table)
        destination.hashTiming = try hashTiming(&table, templates: [
            ("url", urlTemplate.usesSHA256),
            ("public_url_template", destination.publicURLTemplate?.usesSHA256 ?? false),
        ])
        return destination
    }

    /// `mint_url = "https://api.example.com/uploads/sign"` or `mint_command = [...]` on `http-put`/`http-post`: the
    /// app's backend mints each file's target, so the destination has no `url` and no credentials of its own (the
    /// backend's are `[mint]`'s; a minted URL carries its own authorization).
    private static func minted(name: String, transferProtocol: Destination.TransferProtocol,
                               table: inout ConfigurationTable, baseDirectory: String) throws(ConfigurationError)
        -> Destination
    {
        if table.has("mint_url"), table.has("mint_command") {
            throw table.error("mint_command", "set either mint_url or mint_command")
        }
        for key in ["url", "token_env", "token_file", "token_command", "trusted_origins", "public_url_template",
                    "headers"] where table.has(key) {
            throw table.error(key, key == "url"
                ? "a minted destination gets each file's URL from its backend: use mint_url or url, not both"
                : "a minted target carries its own authorization (and headers from the backend); the backend's own "
                    + "credentials and headers go in [mint]")
        }
        let source: MintSource
        let shown: String
        if let url = try table.string("mint_url") {
            let afterScheme = url.range(of: "://").map { url[$0.upperBound...] } ?? ""
            guard URLOrigin(url: url) != nil, !afterScheme.prefix(while: { !"/?#".contains($0) }).contains("@"),
                  !url.contains("{") else {
                throw table.error("mint_url", "\"\(URLRedaction.redact(url))\" is not an http:// or https:// URL "
                    + "(no user info, no placeholders)")
            }
            source = .url(url)
            shown = url
        } else {
            guard let command = try table.stringArray("mint_command"), let program = command.first, !program.isEmpty
            else {
                throw table.error("mint_command", "must name a program: [\"/usr/local/bin/mint-upload\", \"--arg\"]")
            }
            var arguments = command
            if !program.hasPrefix("/") && program.contains("/") {
                arguments[0] = ConfigurationLoader.absolutePath(program, base: baseDirectory)
            }
            let timeout = try table.duration("mint_command_timeout", minimum: .milliseconds(100)) ?? .seconds(10)
            let passed = try table.stringArray("pass_env") ?? []
            for variable in passed where variable.isEmpty || variable.contains("=") || variable.contains("\0") {
                throw table.error("pass_env", "\"\(variable)\" is not an environment variable's name")
            }
            source = .command(arguments, timeout: timeout, passEnvironment: passed)
            shown = "mint-command:" + arguments[0]
        }
        // A minted URL is signed for its one request: the storage's answer is the proof, or the status alone.
        let verify = try verification(&table, allowed: [.response, .status]) ?? .response
        var settings: Destination.ProtocolSettings
        if transferProtocol == .httpPost {
            var post = HTTPPostSettings(target: .minted(source))
            post.verify = verify
            settings = .httpPost(post)
        } else {
            settings = .httpPut(HTTPPutSettings(target: .minted(source), verify: verify))
        }
        var destination = Destination(name: name, url: shown, settings: settings)
        destination.http = try httpSettings(&table, baseDirectory: baseDirectory, passEnvTaken: true)
        destination.circuitBreaker = try circuitBreaker(&table)
        destination.onMetered = try onMetered(&table)
        destination.hashTiming = try hashTiming(&table, templates: [])
        return destination
    }

    /// `form_field = "file"` of an http-post destination: the form field that carries the file.
    private static func formField(_ table: inout ConfigurationTable) throws(ConfigurationError) -> String? {
        guard let field = try table.string("form_field") else { return nil }
        guard !field.isEmpty, !field.contains("\""), !field.contains(where: \.isNewline) else {
            throw table.error("form_field", "must be a plain field name")
        }
        return field
    }

    /// `verify = "head" | "response" | "status"` of a whole-file destination, among `allowed`; nil when not set.
    private static func verification(_ table: inout ConfigurationTable,
                                     allowed: [WholeFileVerification] = WholeFileVerification.allCases)
        throws(ConfigurationError) -> WholeFileVerification?
    {
        guard let text = try table.string("verify") else { return nil }
        guard let value = WholeFileVerification(rawValue: text), allowed.contains(value) else {
            let names = allowed.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
            let why = text == "head" ? " (a POST's stored URL is not known to ask about, and a minted URL is signed "
                + "for its one request)" : ""
            throw table.error("verify", "\"\(text)\" is not one of \(names) here\(why)")
        }
        return value
    }

    /// `etag = "md5" | "opaque"` of an s3 destination.
    private static func etags(_ table: inout ConfigurationTable) throws(ConfigurationError) -> S3Settings.ETags {
        guard let text = try table.string("etag") else { return .md5 }
        guard let value = S3Settings.ETags(rawValue: text) else {
            throw table.error("etag", "\"\(text)\" is not \"md5\" (the store's ETags are the MD5 of the bytes, as "
                + "AWS makes them) or \"opaque\" (SSE-KMS, SSE-C, stores whose ETags are not MD5s)")
        }
        return value
    }

    /// `trusted_origins = ["https://files.example.com"]`: each an origin alone (a scheme, a host, a port), no path.
    private static func trustedOrigins(_ table: inout ConfigurationTable) throws(ConfigurationError) -> [URLOrigin] {
        var origins: [URLOrigin] = []
        for text in try table.stringArray("trusted_origins") ?? [] {
            let afterScheme = text.range(of: "://").map { text[$0.upperBound...] } ?? ""
            let path = afterScheme.drop { !"/?#".contains($0) }
            guard let origin = URLOrigin(url: text), path.isEmpty || path == "/", !afterScheme.contains("@") else {
                throw table.error("trusted_origins", """
                    "\(URLRedaction.redact(text))" is not an origin: write the scheme, the host and a port if not the \
                    default, such as "https://files.example.com:8443", nothing after it
                    """)
            }
            origins.append(origin)
        }
        return origins
    }

    /// `sha256 = "at-intake" | "while-sending"`. A template that names `{sha256}` needs the digest before the
    /// first byte goes out, so it keeps the hash at intake.
    private static func hashTiming(_ table: inout ConfigurationTable, templates: [(key: String, usesSHA256: Bool)])
        throws(ConfigurationError) -> Destination.HashTiming
    {
        guard let text = try table.string("sha256") else { return .atIntake }
        guard let timing = Destination.HashTiming(rawValue: text) else {
            throw table.error("sha256", "\"\(text)\" is not one of at-intake, while-sending")
        }
        if timing == .whileSending, let template = templates.first(where: \.usesSHA256) {
            throw table.error("sha256", """
                while-sending leaves a job without its SHA-256 until it is sent, and \(template.key) names {sha256}: \
                use sha256 = "at-intake", or take {sha256} out of \(template.key)
                """)
        }
        return timing
    }

    /// `source_after_upload = "keep" | "delete" | "move:DIR"` (a relative `DIR` against the config's folder).
    static func sourceAfterUpload(_ table: inout ConfigurationTable, baseDirectory: String)
        throws(ConfigurationError) -> SourceAfterUpload {
        guard let text = try table.string("source_after_upload") else { return .keep }
        guard let choice = SourceAfterUpload(text, base: baseDirectory) else {
            throw table.error("source_after_upload", "\"\(text)\" is not one of keep, delete, move:DIR")
        }
        return choice
    }

    /// `on_metered = "defer" | "allow" | "allow-below:SIZE"`.
    static func onMetered(_ table: inout ConfigurationTable, default fallback: MeteredPolicy = .defer)
        throws(ConfigurationError) -> MeteredPolicy {
        guard let text = try table.string("on_metered") else { return fallback }
        guard let policy = MeteredPolicy(text) else {
            throw table.error("on_metered", "\"\(text)\" is not one of defer, allow, always, allow-below:SIZE (e.g. allow-below:1MiB)")
        }
        return policy
    }

    /// `protocol = "s3"`: endpoint, bucket, region, keys, part sizes and credentials, then the connection keys
    /// every network destination has.
    private static func s3(name: String, table: inout ConfigurationTable, baseDirectory: String)
        throws(ConfigurationError) -> Destination
    {
        if table.has("url") {
            throw table.error("url", "an s3 destination is given by endpoint and bucket, not url")
        }
        if table.has("mint_url") { return try mintedS3(name: name, table: &table, baseDirectory: baseDirectory) }

        for key in ["token_env", "token_file", "token_command"] where table.has(key) {
            throw table.error(key, "s3 destinations sign with access keys: use access_key_env and secret_key_env, "
                + "or credentials_file and profile")
        }
        guard let bucket = try table.string("bucket") else {
            throw ConfigurationError(file: table.file, line: table.table.line, key: table.fullKey("bucket"),
                                     message: "missing")
        }
        guard S3Settings.isValidBucketName(bucket) else {
            throw table.error("bucket", "\"\(bucket)\" is not a bucket name (3–63 of a-z, 0-9, `.` and `-`)")
        }
        let region = try table.string("region") ?? "us-east-1"
        guard !region.isEmpty, region.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
            throw table.error("region", "\"\(region)\" is not a region name (like us-east-1, or auto for R2)")
        }
        let endpoint = try table.string("endpoint") ?? "https://s3.\(region).amazonaws.com"
        let lowered = endpoint.lowercased()
        guard lowered.hasPrefix("http://") || lowered.hasPrefix("https://"),
              let parsed = URL(string: endpoint), let host = parsed.host, !host.isEmpty, parsed.user == nil,
              !endpoint.contains("?"), !endpoint.contains("#"),
              parsed.path.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "/-._~".contains($0)) })
        else {
            let shown = URL(string: endpoint)?.user == nil ? "\"\(endpoint)\"" : "the value"
            throw table.error("endpoint", "\(shown) is not an http:// or https:// address of an S3 service "
                + "(no user:password@, query or special characters in its path)")
        }
        let hostIsAddress = host == "localhost" || host.contains(":") || host.allSatisfy { $0.isNumber || $0 == "." }
        let hasPath = !(URL(string: endpoint)?.path ?? "").trimmingCharacters(in: CharacterSet(charactersIn: "/")).isEmpty
        let pathStyle = try table.boolean("path_style") ?? (hostIsAddress || hasPath)
        if !pathStyle, hostIsAddress {
            throw table.error("path_style", "virtual-host addressing needs a DNS name; \(host) is an address")
        }
        if !pathStyle, hasPath {
            throw table.error("path_style", "an endpoint with a path (\(endpoint)) is addressed path-style")
        }
        var settings = S3Settings(endpoint: endpoint, bucket: bucket, region: region, pathStyle: pathStyle)
        if let text = try table.string("key_template") {
            do {
                settings.keyTemplate = try PathTemplate(text)
            } catch {
                throw table.error("key_template", error.message)
            }
            if text.split(separator: "/", omittingEmptySubsequences: false).contains(where: { $0 == "." || $0.isEmpty }) {
                throw table.error("key_template", "\"\(text)\" has an empty or `.` segment, which URLs lose")
            }
        }
        settings.partSize = try table.byteCount("part_size", minimum: S3Settings.minimumPartSize) ?? settings.partSize
        guard settings.partSize <= S3Settings.maximumPartSize else {
            throw table.error("part_size", "S3 parts are at most 5GiB")
        }
        settings.multipartThreshold = try table.byteCount("multipart_threshold", minimum: S3Settings.minimumPartSize)
            ?? settings.multipartThreshold
        guard settings.multipartThreshold <= S3Settings.maximumPartSize else {
            throw table.error("multipart_threshold", "a single PutObject holds at most 5GiB; use a smaller threshold")
        }
        settings.partConcurrency = Int(try table.integer("part_concurrency", range: 1...16) ?? Int64(settings.partConcurrency))
        settings.etags = try etags(&table)
        settings.credentials = try s3Credentials(&table, baseDirectory: baseDirectory)
        let http = try httpSettings(&table, baseDirectory: baseDirectory)
        var destination = Destination.s3(name: name, settings: settings, http: http)
        destination.publicURLTemplate = try publicURLTemplate(&table, placeholders: ["url", "key"])
        destination.circuitBreaker = try circuitBreaker(&table)
        destination.onMetered = try onMetered(&table)
        destination.hashTiming = try hashTiming(&table, templates: [
            ("key_template", settings.keyTemplate.usesSHA256),
            ("public_url_template", destination.publicURLTemplate?.usesSHA256 ?? false),
        ])
        return destination
    }

    /// `protocol = "s3"` with `mint_url`: the backend presigns every request and names the keys, so the
    /// destination has no endpoint, bucket, keys or credentials of its own (the backend's are `[mint]`'s).
    private static func mintedS3(name: String, table: inout ConfigurationTable, baseDirectory: String)
        throws(ConfigurationError) -> Destination
    {
        for key in ["endpoint", "bucket", "region", "path_style", "key_template", "access_key_env", "secret_key_env",
                    "session_token_env", "credentials_file", "profile", "token_env", "token_file", "token_command",
                    "trusted_origins", "public_url_template", "sha256", "headers"] where table.has(key) {
            throw table.error(key, "a minted s3 destination gets its bucket, keys and signatures from its backend "
                + "(mint_url); the backend's credentials and headers go in [mint]")
        }
        guard let base = try table.string("mint_url"), URLOrigin(url: base) != nil, !base.contains("?"),
              !base.contains("{"), !(base.range(of: "://").map { base[$0.upperBound...] } ?? "")
                  .prefix(while: { $0 != "/" }).contains("@") else {
            throw table.error("mint_url", "must be the http:// or https:// base URL of a backend serving /s3/params and "
                + "/s3/multipart (Uppy Companion's routes), without user info or query")
        }
        var settings = MintedS3Settings(base: base)
        settings.partSize = try table.byteCount("part_size", minimum: S3Settings.minimumPartSize) ?? settings.partSize
        guard settings.partSize <= S3Settings.maximumPartSize else { throw table.error("part_size", "S3 parts are at most 5GiB") }
        settings.multipartThreshold = try table.byteCount("multipart_threshold", minimum: S3Settings.minimumPartSize)
            ?? settings.multipartThreshold
        guard settings.multipartThreshold <= S3Settings.maximumPartSize else {
            throw table.error("multipart_threshold", "a single presigned PUT holds at most 5GiB; use a smaller threshold")
        }
        settings.partConcurrency = Int(try table.integer("part_concurrency", range: 1...16)
            ?? Int64(settings.partConcurrency))
        settings.etags = try etags(&table)
        var destination = Destination(name: name, url: base, settings: .mintedS3(settings))
        destination.http = try httpSettings(&table, baseDirectory: baseDirectory)
        destination.circuitBreaker = try circuitBreaker(&table)
        destination.onMetered = try onMetered(&table)
        return destination
    }

    /// A secret's file: `%d/NAME` in systemd's credentials directory (`CredentialPath`), kept as it is until it
    /// is read; any other path made absolute.
    private static func credentialFile(_ path: String, key: String, in table: ConfigurationTable,
                                       base: String) throws(ConfigurationError) -> String {
        guard CredentialPath.isCredential(path) else { return ConfigurationLoader.absolutePath(path, base: base) }
        if let problem = CredentialPath.problem(path) { throw table.error(key, problem) }
        return path
    }

    private static func s3Credentials(_ table: inout ConfigurationTable, baseDirectory: String)
        throws(ConfigurationError) -> S3CredentialSource
    {
        let access = try table.string("access_key_env")
        let secret = try table.string("secret_key_env")
        let token = try table.string("session_token_env")
        let file = try table.string("credentials_file")
        let profile = try table.string("profile")
        for (key, value) in [("access_key_env", access), ("secret_key_env", secret), ("session_token_env", token),
                             ("credentials_file", file), ("profile", profile)] where value?.isEmpty == true {
            throw table.error(key, "is empty")
        }
        if access != nil || secret != nil || token != nil {
            guard let access, let secret else {
                throw table.error(access == nil ? "access_key_env" : "secret_key_env",
                                  "set both access_key_env and secret_key_env")
            }
            if file != nil || profile != nil {
                throw table.error(file != nil ? "credentials_file" : "profile",
                                  "use either the *_env keys or credentials_file/profile")
            }
            return .environment(accessKey: access, secretKey: secret, sessionToken: token)
        }
        if let file {
            return .sharedFile(path: try credentialFile(file, key: "credentials_file", in: table, base: baseDirectory),
                               profile: profile ?? "default")
        }
        return .standard(profile: profile)
    }

    private static func publicURLTemplate(_ table: inout ConfigurationTable, placeholders: [String])
        throws(ConfigurationError) -> URLTemplate?
    {
        guard let text = try table.string("public_url_template") else { return nil }
        do {
            return try URLTemplate(text, extraPlaceholders: placeholders, anyScheme: true)
        } catch {
            throw table.error("public_url_template", error.message)
        }
    }

    private static func circuitBreaker(_ table: inout ConfigurationTable) throws(ConfigurationError)
        -> CircuitBreakerPolicy
    {
        var breaker = CircuitBreakerPolicy()
        breaker.threshold = Int(try table.integer("circuit_threshold", range: 0...1000) ?? Int64(breaker.threshold))
        breaker.probeInterval = try table.duration("circuit_probe_interval", minimum: .milliseconds(100))
            ?? breaker.probeInterval
        breaker.maximumProbeInterval = max(breaker.probeInterval, breaker.maximumProbeInterval)
        return breaker
    }

    /// `passEnvTaken`: `pass_env` was read already (a `mint_command`'s).
    static func httpSettings(_ table: inout ConfigurationTable, baseDirectory: String, passEnvTaken: Bool = false)
        throws(ConfigurationError) -> HTTPSettings
    {
        var settings = HTTPSettings()
        if let headers = try table.stringTable("headers") {
            for (field, value) in headers {
                let valid = !field.isEmpty && field.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_".contains($0)) }
                guard valid, !value.contains(where: \.isNewline) else {
                    throw table.error("headers", "\"\(field)\" is not a valid header (names are letters, digits, `-`; "
                        + "values are one line)")
                }
            }
            settings.headers = headers
        }
        let sources = ["token_env", "token_file", "token_command"].filter { table.has($0) }
        if sources.count > 1 {
            throw table.error(sources[1], "set only one of token_env, token_file and token_command")
        }
        if let variable = try table.string("token_env") {
            guard !variable.isEmpty else { throw table.error("token_env", "names no environment variable") }
            settings.credentials = .environment(variable)
        }
        if let path = try table.string("token_file") {
            settings.credentials = .file(try credentialFile(path, key: "token_file", in: table, base: baseDirectory))
        }
        if let command = try table.stringArray("token_command") {
            guard let program = command.first, !program.isEmpty else {
                throw table.error("token_command", "must name a program: [\"/usr/local/bin/get-token\", \"--arg\"]")
            }
            var arguments = command
            if !program.hasPrefix("/") && program.contains("/") {
                arguments[0] = ConfigurationLoader.absolutePath(program, base: baseDirectory)
            }
            let timeout = try table.duration("token_command_timeout", minimum: .milliseconds(100)) ?? .seconds(10)
            let passed = try table.stringArray("pass_env") ?? []
            for name in passed where name.isEmpty || name.contains("=") || name.contains("\0") {
                throw table.error("pass_env", "\"\(name)\" is not an environment variable's name")
            }
            settings.credentials = .command(arguments, timeout: timeout, passEnvironment: passed)
        } else if table.has("token_command_timeout") {
            _ = try table.duration("token_command_timeout")
            throw table.error("token_command_timeout", "only applies with token_command")
        } else if table.has("pass_env"), !passEnvTaken {
            _ = try table.stringArray("pass_env")
            throw table.error("pass_env", "only applies with token_command")
        }
        if let path = try table.string("ca_file") {
            let absolute = ConfigurationLoader.absolutePath(path, base: baseDirectory)
            guard FileManager.default.isReadableFile(atPath: absolute) else {
                throw table.error("ca_file", "cannot read \(absolute)")
            }
            settings.caFile = absolute
        }
        settings.connectTimeout = try table.duration("connect_timeout", minimum: .milliseconds(100)) ?? settings.connectTimeout
        settings.stall.window = try table.duration("stall_timeout", minimum: .seconds(1)) ?? settings.stall.window
        settings.stall.minimumRate = try table.byteCount("stall_min_rate", minimum: 1) ?? settings.stall.minimumRate
        settings.stall.minimumAverageRate = try table.byteCount("min_rate") ?? settings.stall.minimumAverageRate
        settings.stall.averageWindow = try table.duration("min_rate_window", minimum: .seconds(1))
            ?? settings.stall.averageWindow
        return settings
    }
}
