import Foundation

/// Finds, reads and validates the TOML config; every problem names the file, the line and the key.
public enum ConfigurationLoader {
    /// The name shown in errors about the built-in default.
    public static let embeddedName = "<embedded default>"

    /// Where the config comes from, by the contract's order: `--config`, `$UPLOADQ_CONFIG`,
    /// `./Config/uploadq.toml`, `/etc/uploadq/uploadq.toml`, else the embedded default (nil).
    public static func locate(explicit: String?, environment: [String: String] = ProcessInfo.processInfo.environment,
                              workingDirectory: String = FileManager.default.currentDirectoryPath) -> String? {
        if let explicit { return explicit }
        if let fromEnvironment = environment["UPLOADQ_CONFIG"], !fromEnvironment.isEmpty { return fromEnvironment }
        let local = (workingDirectory as NSString).appendingPathComponent("Config/uploadq.toml")
        if FileManager.default.fileExists(atPath: local) { return local }
        if FileManager.default.fileExists(atPath: "/etc/uploadq/uploadq.toml") { return "/etc/uploadq/uploadq.toml" }
        return nil
    }

    /// Loads the config at `path`, or the embedded default (relative paths then resolve against the working
    /// directory).
    public static func load(path: String?, workingDirectory: String = FileManager.default.currentDirectoryPath)
        throws(ConfigurationError) -> Configuration
    {
        guard let path else {
            return try parse(DefaultConfiguration.text, file: embeddedName, baseDirectory: workingDirectory)
        }
        let absolute = absolutePath(path, base: workingDirectory)
        guard let data = FileManager.default.contents(atPath: absolute) else {
            throw ConfigurationError(file: path, line: nil, key: nil, message: "cannot read the config file (missing or not readable)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigurationError(file: path, line: nil, key: nil, message: "the config file is not UTF-8 text")
        }
        var configuration = try parse(text, file: absolute, baseDirectory: (absolute as NSString).deletingLastPathComponent)
        configuration.file = absolute
        return configuration
    }

    /// Parses config text; relative paths resolve against `baseDirectory`.
    public static func parse(_ text: String, file: String, baseDirectory: String) throws(ConfigurationError) -> Configuration {
        let document: TOMLTable
        do {
            document = try TOMLParser.parse(text)
        } catch {
            throw ConfigurationError(file: file, line: error.line, key: nil, message: "TOML syntax: \(error.message) (column \(error.column))")
        }
        var root = ConfigurationTable(document, path: "", file: file)
        let stateDirectory = absolutePath(try root.string("state_dir") ?? ".uploadq", base: baseDirectory)

        var limits = Configuration.Limits()
        if var table = try root.table("limits") {
            limits.concurrency = Int(try table.integer("concurrency", range: 1...256) ?? 4)
            limits.minFreeSpace = try table.freeSpaceThreshold("min_free_space") ?? limits.minFreeSpace
            try table.rejectUnknownKeys()
        }

        var retry = RetryPolicy()
        if var table = try root.table("retry") {
            if let text = try table.string("backoff") {
                guard let backoff = RetryPolicy.Backoff(rawValue: text) else {
                    throw table.error("backoff", "must be one of: \(RetryPolicy.Backoff.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                retry.backoff = backoff
            }
            retry.initialInterval = try table.duration("initial_interval", minimum: .milliseconds(10)) ?? retry.initialInterval
            retry.initialAttempts = Int(try table.integer("initial_attempts", range: 0...1_000_000) ?? Int64(retry.initialAttempts))
            retry.laterInterval = try table.duration("later_interval", minimum: .milliseconds(10)) ?? retry.laterInterval
            retry.jitter = try table.float("jitter", range: 0...1) ?? retry.jitter
            try table.rejectUnknownKeys()
        }

        var link = Configuration.Link()
        if var table = try root.table("link") {
            if let mode = try table.string("mode") {
                guard LinkOverride(rawValue: mode) != nil else {
                    throw table.error("mode", "\"\(mode)\" is not one of auto, metered, unmetered, offline")
                }
                link.mode = mode
            }
            link.meteredInterfaces = try table.stringArray("metered_interfaces") ?? link.meteredInterfaces
            try table.rejectUnknownKeys()
        }

        var bandwidth = Configuration.Bandwidth()
        if var table = try root.table("bandwidth") {
            bandwidth.metered = try table.byteCount("metered") ?? 0
            bandwidth.unmetered = try table.byteCount("unmetered") ?? 0
            try table.rejectUnknownKeys()
        }

        var destinations: [String: Destination] = [:]
        if var table = try root.table("destinations") {
            for name in table.table.keys {
                guard var entry = try table.table(name) else { continue }
                var destination = try DestinationLoader.destination(named: name, from: &entry, baseDirectory: baseDirectory)
                destination.sourceAfterUpload = try DestinationLoader.sourceAfterUpload(&entry, baseDirectory: baseDirectory)
                destinations[name] = destination
                try entry.rejectUnknownKeys()
            }
        }

        var spool: Configuration.Spool?
        if var table = try root.table("spool") {
            let directory = absolutePath(try table.string("dir") ?? "spool", base: baseDirectory)
            var value = Configuration.Spool(directory: directory)
            if let name = try table.string("destination") {
                guard destinations[name] != nil else {
                    throw table.error("destination", "no destination named \"\(name)\" (define [destinations.\(name)])")
                }
                value.destination = name
            } else if destinations[value.destination] == nil {
                throw ConfigurationError(file: file, line: table.table.line, key: "spool.destination",
                                         message: "not set, and there is no destination named \"default\"")
            }
            value.quietPeriod = try table.duration("quiet_period") ?? value.quietPeriod
            value.rescanInterval = try table.duration("rescan_interval", minimum: .milliseconds(100)) ?? value.rescanInterval
            value.networkQuietPeriod = try table.duration("network_quiet_period") ?? value.networkQuietPeriod
            if let names = try table.stringArray("sidecar_destinations") {
                for name in names where destinations[name] == nil {
                    throw table.error("sidecar_destinations", "no destination named \"\(name)\" (define [destinations.\(name)])")
                }
                value.sidecarDestinations = Set(names)
            }
            value.sidecarMayAllowMetered = try table.boolean("sidecar_may_allow_metered") ?? false
            spool = value
            try table.rejectUnknownKeys()
        }
        var patch = PatchSettings()
        if var table = try root.table("patch") {
            if let method = try table.string("method") {
                guard PatchSettings.isMethod(method) else {
                    throw table.error("method", "\"\(method)\" is not an HTTP method (PATCH, PUT, POST…)")
                }
                patch.method = method
            }
            if let body = try table.string("body") {
                do {
                    patch.body = try PatchBody(body)
                } catch {
                    throw table.error("body", error.message)
                }
            }
            patch.http = try DestinationLoader.httpSettings(&table, baseDirectory: baseDirectory)
            patch.onMetered = try DestinationLoader.onMetered(&table, default: .allow)
            for text in try table.stringArray("allowed_urls") ?? [] {
                guard let prefix = PatchURLPrefix(text) else {
                    throw table.error("allowed_urls", "\"\(URLRedaction.redact(text))\" is not an http:// or https:// "
                        + "URL prefix (a scheme, a host, an optional port and path; no user, query, fragment or dot segments)")
                }
                patch.allowedURLs.append(prefix)
            }
            try table.rejectUnknownKeys()
        }
        var mint = MintSettings()
        if var table = try root.table("mint") {
            mint.http = try DestinationLoader.httpSettings(&table, baseDirectory: baseDirectory)
            try table.rejectUnknownKeys()
        }
        var metrics = Configuration.Metrics()
        if var table = try root.table("metrics") {
            if let path = try table.string("textfile") {
                guard !path.isEmpty else { throw table.error("textfile", "is empty") }
                metrics.textfile = absolutePath(path, base: baseDirectory)
            }
            metrics.interval = try table.duration("interval", minimum: .milliseconds(100)) ?? metrics.interval
            try table.rejectUnknownKeys()
        }
        var retention = RetentionPolicy()
        if var table = try root.table("retention") {
            retention = try RetentionPolicy.load(&table, baseDirectory: baseDirectory)
            try table.rejectUnknownKeys()
        }
        try root.rejectUnknownKeys()

        var configuration = Configuration(file: nil, stateDirectory: stateDirectory, spool: spool, limits: limits,
                                          retry: retry, link: link, bandwidth: bandwidth, destinations: destinations)
        configuration.patch = patch
        configuration.mint = mint
        configuration.metrics = metrics
        configuration.retention = retention
        return configuration
    }

    /// A duration written as in the config (`500ms`, `30s`, `5m`, `1h`, `90d`), for command-line options.
    public static func duration(_ text: String) -> Duration? { ConfigurationValues.duration(text) }

    static func absolutePath(_ path: String, base: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        let joined = expanded.hasPrefix("/") ? expanded : base + "/" + expanded
        return lexicallyNormalized(joined)
    }

    /// Removes `.`, `..` and repeated slashes without touching the file system: Foundation's `standardizingPath`
    /// resolves symbolic links, which would turn a link the user named into the file it points to.
    static func lexicallyNormalized(_ absolutePath: String) -> String {
        var parts: [Substring] = []
        for part in absolutePath.split(separator: "/", omittingEmptySubsequences: true) {
            switch part {
            case ".": continue
            case "..": _ = parts.popLast()
            default: parts.append(part)
            }
        }
        return "/" + parts.joined(separator: "/")
    }
}
