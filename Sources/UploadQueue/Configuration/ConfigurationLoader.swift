import Foundation

extension Configuration {
    /// Finds, reads and validates the TOML config; every problem names the file, the line and the key.
    public enum Loader {
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
                limits.ownerPendingJobs = Int(try table.integer("owner_pending_jobs", range: 0...100_000_000)
                    ?? Int64(limits.ownerPendingJobs))
                limits.ownerPendingBytes = try table.freeSpaceThreshold("owner_pending_bytes") ?? limits.ownerPendingBytes
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
                if let url = try table.string("connectivity_check") {
                    guard URLOrigin(url: url) != nil, !url.contains("{"),
                          !(url.range(of: "://").map { url[$0.upperBound...].prefix { !"/?#".contains($0) } } ?? "")
                              .contains("@") else {
                        throw table.error("connectivity_check", """
                            "\(URLRedaction.redact(url))" is not an http:// or https:// URL (no user info, no placeholders) \
                            of a page that answers 204 with nothing in it, such as http://connectivitycheck.gstatic.com/generate_204
                            """)
                    }
                    link.connectivityCheck = url
                }
                // A weekday (a string) for /week, a day of the month (an integer) for /month.
                var reset: String?
                if table.has("budget_reset") {
                    if let text = try? table.string("budget_reset") {
                        reset = text
                    } else {
                        reset = try table.integer("budget_reset", range: 1...28).map { "\($0)" }
                    }
                }
                if let text = try table.string("metered_budget") {
                    guard let budget = MeteredBudget(text, reset: reset) else {
                        throw table.error("metered_budget", """
                            "\(text)" is not a budget: write a size above 0 and a period, "200MiB/day", "1GiB/week" or "5GiB/month" \
                            (budget_reset: a weekday for /week, a day 1-28 for /month, none for /day)
                            """)
                    }
                    link.meteredBudget = budget
                } else if reset != nil {
                    throw table.error("budget_reset", "has no metered_budget to reset")
                }
                try table.rejectUnknownKeys()
            }

            var bandwidth = Configuration.Bandwidth()
            if var table = try root.table("bandwidth") {
                bandwidth.metered = try table.byteCount("metered") ?? 0
                bandwidth.unmetered = try table.byteCount("unmetered") ?? 0
                if let entries = try table.stringArray("timetable") {
                    do {
                        bandwidth.timetable = try BandwidthTimetable(entries)
                    } catch {
                        throw table.error("timetable", "\"\(error.entry)\": \(error.reason)")
                    }
                }
                try table.rejectUnknownKeys()
            }

            var power = PowerSettings()
            if var table = try root.table("power") {
                if let percent = try table.string("low_battery") {
                    guard percent.hasSuffix("%"), let value = Int(percent.dropLast()), (1...100).contains(value) else {
                        throw table.error("low_battery", "\"\(percent)\" is not a percentage from 1% to 100%")
                    }
                    power.lowBattery = value
                }
                power.require = try Self.powerRequirement(&table, key: "require", lowBattery: power.lowBattery) ?? .any
                if let source = try table.string("source") {
                    guard let value = PowerSettings.Source(rawValue: source) else {
                        throw table.error("source", "must be one of: \(PowerSettings.Source.allCases.map(\.rawValue).joined(separator: ", "))")
                    }
                    power.source = value
                }
                if let directory = try table.string("supply_dir") {
                    power.supplyDirectory = absolutePath(directory, base: baseDirectory)
                    if !table.has("source") { power.source = .sysfs }
                }
                try table.rejectUnknownKeys()
            }
            var schedule = Configuration.Schedule()
            if var table = try root.table("schedule") {
                schedule.windows = try Self.windows(&table) ?? schedule.windows
                schedule.urgentPriority = (try table.integer("urgent_priority", range: -1_000_000...1_000_000)).map { Int($0) }
                if let name = try table.string("time_zone") {
                    guard let zone = TimeZone(identifier: name) else {
                        throw table.error("time_zone", "\"\(name)\" is not a time zone (an IANA name: \"Europe/Berlin\", \"UTC\")")
                    }
                    schedule.timeZone = zone
                }
                try table.rejectUnknownKeys()
            }

            var destinations: [String: Destination] = [:]
            if var table = try root.table("destinations") {
                for name in table.table.keys {
                    guard var entry = try table.table(name) else { continue }
                    var destination = try DestinationLoader.destination(named: name, from: &entry, baseDirectory: baseDirectory)
                    destination.sourceAfterUpload = try DestinationLoader.sourceAfterUpload(&entry, baseDirectory: baseDirectory)
                    destination.power = try Self.powerRequirement(&entry, key: "power", lowBattery: power.lowBattery)
                    destination.windows = try Self.windows(&entry)
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
                } else if let implicit = Configuration.implicitDestination(among: Set(destinations.keys)) {
                    value.destination = implicit
                } else {
                    throw ConfigurationError(file: file, line: table.table.line, key: "spool.destination", message: """
                        not set, and there is no destination named "default" to take its place: name one of \
                        \(destinations.keys.sorted().map { "\"\($0)\"" }.joined(separator: ", "))
                        """)
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
                value.sidecarMetaKeys = Set(try table.stringArray("sidecar_meta_keys") ?? [])
                value.sidecarLanes = try table.stringArray("sidecar_lanes") ?? []
                if value.sidecarLanes.contains("") {
                    throw table.error("sidecar_lanes", "an empty prefix would allow every lane; list the prefixes")
                }
                value.sidecarGroups = try table.stringArray("sidecar_groups") ?? []
                if value.sidecarGroups.contains("") {
                    throw table.error("sidecar_groups", "an empty prefix would allow every group; list the prefixes")
                }
                value.sidecarMaxPriority = (try table.integer("sidecar_max_priority", range: -1_000_000...1_000_000))
                    .map { Int($0) }
                value.maxFileSize = try table.byteCount("max_file_size", minimum: 1) ?? value.maxFileSize
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
                for name in try table.stringArray("sidecar_headers") ?? [] {
                    guard PatchAuthority.mayListForSidecars(name) else {
                        throw table.error("sidecar_headers", "\"\(name)\" is not a header a sidecar may set (credentials, "
                            + "the host, the request's framing and rerouting headers are the config's alone)")
                    }
                    patch.sidecarHeaders.insert(name.lowercased())
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
            var hooks = HookSettings()
            if var table = try root.table("hooks") {
                for event in HookEvent.allCases {
                    guard let command = try table.stringArray(event.key) else { continue }
                    guard let program = command.first, !program.isEmpty else {
                        throw table.error(event.key, "must name a program: [\"/usr/local/bin/notify\", \"--arg\"]")
                    }
                    guard program.contains("/") else {
                        throw table.error(event.key, "\"\(program)\" is not a path: give the program's absolute path "
                            + "(hooks run without a shell and without searching PATH)")
                    }
                    var arguments = command
                    arguments[0] = absolutePath(program, base: baseDirectory)
                    switch event {
                    case .uploaded: hooks.onUploaded = arguments
                    case .failed: hooks.onFailed = arguments
                    case .groupUploaded: hooks.onGroupUploaded = arguments
                    }
                }
                hooks.timeout = try table.duration("timeout", minimum: .milliseconds(100)) ?? hooks.timeout
                let passed = try table.stringArray("pass_env") ?? []
                for name in passed where name.isEmpty || name.contains("=") || name.contains("\0") {
                    throw table.error("pass_env", "\"\(name)\" is not an environment variable's name")
                }
                hooks.passEnvironment = passed
                hooks.maximumAttempts = Int(try table.integer("max_attempts", range: 0...1_000_000) ?? Int64(hooks.maximumAttempts))
                try table.rejectUnknownKeys()
            }
            var events = EventSettings()
            if var table = try root.table("events") {
                // The event stream's own socket is gone (it is the control API's route): its keys still load, and
                // the daemon says they do nothing.
                let (socket, group) = try socketKeys(&table, base: baseDirectory)
                events.retiredKeys = [socket.map { _ in "socket" }, group.map { _ in "group" }].compactMap { $0 }
                events.readerBuffer = try table.byteCount("reader_buffer", minimum: 4096) ?? events.readerBuffer
                try table.rejectUnknownKeys()
            }
            var api = ControlSettings()
            if var table = try root.table("api") {
                (api.socket, api.group) = try socketKeys(&table, base: baseDirectory)
                api.maxConnections = Int(try table.integer("max_connections", range: 2...4096) ?? Int64(api.maxConnections))
                api.adminConnections = Int(try table.integer("admin_connections", range: 1...4095)
                    ?? Int64(min(api.adminConnections, api.maxConnections / 2)))
                guard api.adminConnections < api.maxConnections else {
                    throw table.error("admin_connections", "must leave droppers some of max_connections "
                        + "(\(api.maxConnections)): at most \(api.maxConnections - 1)")
                }
                api.maxConnectionsPerUser = Int(try table.integer("max_connections_per_user", range: 1...4096)
                    ?? Int64(api.maxConnectionsPerUser))
                api.requestTimeout = try table.duration("request_timeout", minimum: .milliseconds(100)) ?? api.requestTimeout
                api.idleTimeout = try table.duration("idle_timeout", minimum: .milliseconds(100)) ?? api.idleTimeout
                try table.rejectUnknownKeys()
            }
            api.socket = api.socket ?? (stateDirectory as NSString).appendingPathComponent("api.sock")
            var lanes = Configuration.Lanes()
            if var table = try root.table("lanes") {
                if let text = try table.string("on_failure") {
                    guard let policy = Configuration.LaneFailure(rawValue: text) else {
                        throw table.error("on_failure", "\"\(text)\" is not \"hold\" or \"skip\"")
                    }
                    lanes.onFailure = policy
                }
                lanes.skip = Set(try table.stringArray("skip") ?? [])
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
            configuration.power = power
            configuration.schedule = schedule
            configuration.hooks = hooks
            configuration.lanes = lanes
            configuration.events = events
            configuration.api = api
            return configuration
        }

        /// `require = "ac"` in `[power]`, or `power = "ac"` in a destination.
        /// A daemon socket's `socket` (an absolute path short enough for a Unix socket) and `group` (a group name):
        /// `[events]`'s and `[api]`'s.
        private static func socketKeys(_ table: inout ConfigurationTable, base: String) throws(ConfigurationError)
            -> (socket: String?, group: String?)
        {
            var socket: String?
            if let path = try table.string("socket") {
                let absolute = absolutePath(path, base: base)
                guard absolute.utf8.count < 108 else {
                    throw table.error("socket", "\(absolute) is longer than a Unix socket's path may be (107 bytes)")
                }
                socket = absolute
            }
            let group = try table.string("group")
            if let group, group.isEmpty || group.contains(where: { $0 == ":" || $0.isWhitespace }) {
                throw table.error("group", "\"\(group)\" is not a group name")
            }
            return (socket, group)
        }

        private static func powerRequirement(_ table: inout ConfigurationTable, key: String, lowBattery: Int)
            throws(ConfigurationError) -> PowerRequirement?
        {
            guard let text = try table.string(key) else { return nil }
            guard let requirement = PowerRequirement(text, lowBattery: lowBattery) else {
                throw table.error(key, "\"\(text)\" is not one of any, ac, battery-not-low")
            }
            return requirement
        }

        /// `windows = ["22:00-06:00", "sat 00:00-24:00"]` in `[schedule]` or a destination.
        private static func windows(_ table: inout ConfigurationTable) throws(ConfigurationError) -> UploadWindows? {
            guard let entries = try table.stringArray("windows") else { return nil }
            do {
                return try UploadWindows(entries)
            } catch {
                throw table.error("windows", "\"\(error.entry)\": \(error.reason)")
            }
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
}
