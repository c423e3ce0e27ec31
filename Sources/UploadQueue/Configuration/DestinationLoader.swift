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
            let later = protocolName == "s3" ? "not available in this version" : "unknown"
            throw table.error("protocol", "\"\(protocolName)\" is \(later) (supported: \(supported))")
        }
        guard let url = try table.string("url") else {
            throw ConfigurationError(file: table.file, line: table.table.line, key: table.fullKey("url"), message: "missing")
        }
        switch transferProtocol {
        case .file:
            return try localDirectory(name: name, url: url, table: &table, baseDirectory: baseDirectory)
        case .tus, .httpPut, .httpPost:
            return try network(name: name, transferProtocol: transferProtocol, url: url, table: &table,
                               baseDirectory: baseDirectory)
        }
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
        let chunkSize = try table.byteCount("chunk_size", minimum: 4096) ?? (8 << 20)
        return Destination(name: name, transferProtocol: .file, url: url,
                           directory: ConfigurationLoader.absolutePath(path, base: baseDirectory), nameTemplate: template,
                           chunkSize: chunkSize)
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
        if transferProtocol == .tus, !urlTemplate.isConstant {
            throw table.error("url", "a tus endpoint is one URL for all uploads; placeholders are not allowed here")
        }
        var destination = Destination(name: name, transferProtocol: transferProtocol, url: url, urlTemplate: urlTemplate)
        if transferProtocol == .tus {
            destination.chunkSize = try table.byteCount("chunk_size", minimum: 1024) ?? destination.chunkSize
        }
        if transferProtocol == .httpPost {
            if let field = try table.string("form_field") {
                guard !field.isEmpty, !field.contains("\""), !field.contains(where: \.isNewline) else {
                    throw table.error("form_field", "must be a plain field name")
                }
                destination.formField = field
            }
        }
        destination.http = try httpSettings(&table, baseDirectory: baseDirectory)
        if let text = try table.string("public_url_template") {
            do {
                destination.publicURLTemplate = try URLTemplate(text, extraPlaceholders: ["url", "upload_id"], anyScheme: true)
            } catch {
                throw table.error("public_url_template", error.message)
            }
        }
        var breaker = CircuitBreakerPolicy()
        breaker.threshold = Int(try table.integer("circuit_threshold", range: 0...1000) ?? Int64(breaker.threshold))
        breaker.probeInterval = try table.duration("circuit_probe_interval", minimum: .milliseconds(100))
            ?? breaker.probeInterval
        breaker.maximumProbeInterval = max(breaker.probeInterval, breaker.maximumProbeInterval)
        destination.circuitBreaker = breaker
        return destination
    }

    private static func httpSettings(_ table: inout ConfigurationTable, baseDirectory: String)
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
            settings.credentials = .file(ConfigurationLoader.absolutePath(path, base: baseDirectory))
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
            settings.credentials = .command(arguments, timeout: timeout)
        } else if table.has("token_command_timeout") {
            _ = try table.duration("token_command_timeout")
            throw table.error("token_command_timeout", "only applies with token_command")
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
        return settings
    }
}
