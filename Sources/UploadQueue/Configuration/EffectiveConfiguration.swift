import Foundation

/// The configuration as it is in force: every key with its default filled in and every secret redacted, in the
/// config file's own keys, ready to print as TOML or JSON (`uploadq config show`).
///
/// Built from the loaded `Configuration`, not from the file's text, so it shows what the daemon would run on:
/// paths resolved, defaults applied. Loading its TOML gives the same configuration back, except where a secret
/// was redacted (header values, URL credentials and query values, the arguments of token and mint programs and
/// hooks).
package struct EffectiveConfiguration: Sendable, Equatable {
    /// A value of the document.
    package indirect enum Value: Sendable, Equatable {
        case string(String)
        case integer(Int64)
        case float(Double)
        case boolean(Bool)
        case array([Value])
        case table(Table)
    }

    /// A table: keys in the order the configuration reference (`ConfigurationReference`) lists them.
    package struct Table: Sendable, Equatable {
        package fileprivate(set) var entries: [Entry] = []

        /// One key and its value.
        package struct Entry: Sendable, Equatable {
            package var key: String
            package var value: Value
        }

        /// The value of `key`, if set.
        package subscript(key: String) -> Value? { entries.first { $0.key == key }?.value }

        fileprivate mutating func set(_ key: String, _ value: Value?) {
            guard let value else { return }
            entries.append(Entry(key: key, value: value))
        }
    }

    /// What a redacted secret is shown as.
    package static let redacted = "<redacted>"

    /// The whole document.
    package let root: Table

    /// The document of `configuration`; `redactingSecrets` false keeps header values, URLs and arguments whole.
    package init(_ configuration: Configuration, redactingSecrets: Bool = true) {
        root = Self.ordered(Builder(redacting: redactingSecrets).document(configuration), path: "")
    }

    /// `table` with its keys in reference order, and so every table in it; a destination's keys by
    /// `destinations.NAME`, the destinations themselves by name. Keys the reference lacks go last.
    private static func ordered(_ table: Table, path: String) -> Table {
        let documented = path.hasPrefix("destinations.") ? "destinations.NAME" : path
        func rank(_ key: String) -> Int {
            if path == "destinations" { return 0 }
            if let index = ConfigurationReference.order(of: key, in: documented) { return index }
            if path.isEmpty, let index = ConfigurationReference.sections.firstIndex(where: { $0.table == key }) {
                return ConfigurationReference.keys.count + index
            }
            if path.isEmpty, key == "destinations" { return ConfigurationReference.keys.count * 2 }
            return Int.max
        }
        var result = Table()
        let ranked = table.entries.enumerated().sorted {
            (rank($0.element.key), $0.offset) < (rank($1.element.key), $1.offset)
        }
        for (_, entry) in ranked {
            if case .table(let inner) = entry.value, path.isEmpty || path == "destinations" {
                result.set(entry.key, .table(ordered(inner, path: path.isEmpty ? entry.key : path + "." + entry.key)))
            } else {
                result.set(entry.key, entry.value)
            }
        }
        return result
    }

    /// The document as TOML that `ConfigurationLoader` reads back.
    package func toml() -> String {
        var out = ""
        Self.writeTOML(root, path: [], into: &out)
        return out
    }

    /// The document as one JSON object (keys in document order), with a final newline.
    package func json() -> String {
        Self.jsonText(.table(root)) + "\n"
    }

    // MARK: TOML

    private static func writeTOML(_ table: Table, path: [String], into out: inout String) {
        var plain: [Table.Entry] = []
        var tables: [(String, Table)] = []
        for entry in table.entries {
            if case .table(let inner) = entry.value {
                tables.append((entry.key, inner))
            } else {
                plain.append(entry)
            }
        }
        if !path.isEmpty, !plain.isEmpty || tables.isEmpty {
            if !out.isEmpty { out += "\n" }
            out += "[" + path.map(tomlKey).joined(separator: ".") + "]\n"
        }
        for entry in plain { out += "\(tomlKey(entry.key)) = \(tomlValue(entry.value))\n" }
        for (key, inner) in tables { writeTOML(inner, path: path + [key], into: &out) }
    }

    private static func tomlKey(_ key: String) -> String {
        let bare = !key.isEmpty && key.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }
        return bare ? key : SafeText.jsonString(key)
    }

    private static func tomlValue(_ value: Value) -> String {
        switch value {
        case .string(let text): return SafeText.jsonString(text)
        case .integer(let number): return "\(number)"
        case .float(let number): return number == number.rounded() && abs(number) < 1e15 ? String(format: "%.1f", number) : "\(number)"
        case .boolean(let flag): return flag ? "true" : "false"
        case .array(let items): return "[" + items.map(tomlValue).joined(separator: ", ") + "]"
        case .table(let table):
            return "{ " + table.entries.map { "\(tomlKey($0.key)) = \(tomlValue($0.value))" }.joined(separator: ", ") + " }"
        }
    }

    // MARK: JSON

    private static func jsonText(_ value: Value) -> String {
        switch value {
        case .string(let text): return SafeText.jsonString(text)
        case .integer(let number): return "\(number)"
        case .float(let number): return "\(number)"
        case .boolean(let flag): return flag ? "true" : "false"
        case .array(let items): return "[" + items.map(jsonText).joined(separator: ",") + "]"
        case .table(let table):
            return "{" + table.entries.map { SafeText.jsonString($0.key) + ":" + jsonText($0.value) }.joined(separator: ",") + "}"
        }
    }
}

/// Turns each part of a `Configuration` into the keys the loader reads.
private struct Builder {
    let redacting: Bool
    typealias Value = EffectiveConfiguration.Value
    typealias Table = EffectiveConfiguration.Table

    func document(_ configuration: Configuration) -> Table {
        var root = Table()
        root.set("state_dir", .string(configuration.stateDirectory))
        root.set("limits", .table(limits(configuration.limits)))
        root.set("retry", .table(retry(configuration.retry)))
        root.set("link", .table(link(configuration.link)))
        root.set("bandwidth", .table(bandwidth(configuration.bandwidth)))
        root.set("power", .table(power(configuration.power)))
        root.set("schedule", .table(schedule(configuration.schedule)))
        if let spool = configuration.spool { root.set("spool", .table(self.spool(spool))) }
        root.set("patch", .table(patch(configuration.patch)))
        root.set("mint", .table(http(configuration.mint.http)))
        root.set("metrics", .table(metrics(configuration.metrics)))
        root.set("retention", .table(retention(configuration.retention)))
        root.set("hooks", .table(hooks(configuration.hooks)))
        var lanes = Table()
        lanes.set("on_failure", .string(configuration.lanes.onFailure.rawValue))
        lanes.set("skip", .array(configuration.lanes.skip.sorted().map(Value.string)))
        root.set("lanes", .table(lanes))
        var events = Table()
        events.set("reader_buffer", Self.size(configuration.events.readerBuffer))
        root.set("events", .table(events))
        var api = Table()
        api.set("socket", .string(configuration.apiSocketPath))
        api.set("group", configuration.api.group.map(Value.string))
        api.set("max_connections", .integer(Int64(configuration.api.maxConnections)))
        api.set("admin_connections", .integer(Int64(configuration.api.adminConnections)))
        api.set("max_connections_per_user", .integer(Int64(configuration.api.maxConnectionsPerUser)))
        api.set("request_timeout", Self.duration(configuration.api.requestTimeout))
        api.set("idle_timeout", Self.duration(configuration.api.idleTimeout))
        root.set("api", .table(api))
        var destinations = Table()
        for name in configuration.destinations.keys.sorted() {
            guard let destination = configuration.destinations[name] else { continue }
            destinations.set(name, .table(self.destination(destination, power: configuration.power)))
        }
        root.set("destinations", .table(destinations))
        return root
    }

    private func limits(_ limits: Configuration.Limits) -> Table {
        var table = Table()
        table.set("concurrency", .integer(Int64(limits.concurrency)))
        for (key, value) in [("min_free_space", limits.minFreeSpace), ("owner_pending_bytes", limits.ownerPendingBytes)] {
            switch value {
            case .bytes(let bytes): table.set(key, Self.size(bytes))
            case .percent: table.set(key, .string(value.description))
            }
        }
        table.set("owner_pending_jobs", .integer(Int64(limits.ownerPendingJobs)))
        return table
    }

    private func retry(_ retry: RetryPolicy) -> Table {
        var table = Table()
        table.set("backoff", .string(retry.backoff.rawValue))
        table.set("initial_interval", Self.duration(retry.initialInterval))
        table.set("initial_attempts", .integer(Int64(retry.initialAttempts)))
        table.set("later_interval", Self.duration(retry.laterInterval))
        table.set("jitter", .float(retry.jitter))
        return table
    }

    private func link(_ link: Configuration.Link) -> Table {
        var table = Table()
        table.set("mode", .string(link.mode))
        table.set("metered_interfaces", .array(link.meteredInterfaces.map(Value.string)))
        if let budget = link.meteredBudget {
            table.set("metered_budget", .string(ConfigurationValues.sizeText(budget.bytes) + "/" + budget.period.rawValue))
            switch budget.period {
            case .day: break
            case .week: table.set("budget_reset", .string(LocalWeek.dayNames[((budget.resetDay % 7) + 7) % 7]))
            case .month: table.set("budget_reset", .integer(Int64(budget.resetDay)))
            }
        }
        table.set("connectivity_check", link.connectivityCheck.map { url($0) })
        return table
    }

    private func bandwidth(_ bandwidth: Configuration.Bandwidth) -> Table {
        var table = Table()
        table.set("metered", Self.size(bandwidth.metered))
        table.set("unmetered", Self.size(bandwidth.unmetered))
        table.set("timetable", .array(bandwidth.timetable.texts.map(Value.string)))
        return table
    }

    private func power(_ power: PowerSettings) -> Table {
        var table = Table()
        table.set("require", .string(Self.requirement(power.require)))
        table.set("low_battery", .string("\(power.lowBattery)%"))
        table.set("source", .string(power.source.rawValue))
        table.set("supply_dir", .string(power.supplyDirectory))
        return table
    }

    private func schedule(_ schedule: Configuration.Schedule) -> Table {
        var table = Table()
        table.set("windows", .array(schedule.windows.texts.map(Value.string)))
        table.set("urgent_priority", schedule.urgentPriority.map { .integer(Int64($0)) })
        table.set("time_zone", .string(schedule.timeZone.identifier))
        return table
    }

    private func spool(_ spool: Configuration.Spool) -> Table {
        var table = Table()
        table.set("dir", .string(spool.directory))
        table.set("destination", .string(spool.destination))
        table.set("quiet_period", Self.duration(spool.quietPeriod))
        table.set("rescan_interval", Self.duration(spool.rescanInterval))
        table.set("network_quiet_period", Self.duration(spool.networkQuietPeriod))
        table.set("sidecar_destinations", spool.sidecarDestinations.map { .array($0.sorted().map(Value.string)) })
        table.set("sidecar_may_allow_metered", .boolean(spool.sidecarMayAllowMetered))
        table.set("sidecar_meta_keys", .array(spool.sidecarMetaKeys.sorted().map(Value.string)))
        table.set("sidecar_lanes", .array(spool.sidecarLanes.map(Value.string)))
        table.set("sidecar_groups", .array(spool.sidecarGroups.map(Value.string)))
        // Unset, the cap follows urgent_priority (`SidecarPolicy.priorityCap`): shown only when set.
        table.set("sidecar_max_priority", spool.sidecarMaxPriority.map { .integer(Int64($0)) })
        table.set("max_file_size", Self.size(spool.maxFileSize))
        return table
    }

    private func patch(_ patch: PatchSettings) -> Table {
        var table = Table()
        table.set("method", .string(patch.method))
        table.set("body", .string(patch.body.description))
        table.set("on_metered", .string(Self.metered(patch.onMetered)))
        table.set("allowed_urls", .array(patch.allowedURLs.map { .string($0.description) }))
        table.set("sidecar_headers", .array(patch.sidecarHeaders.sorted().map(Value.string)))
        table.entries += http(patch.http).entries
        return table
    }

    private func metrics(_ metrics: Configuration.Metrics) -> Table {
        var table = Table()
        table.set("textfile", metrics.textfile.map(Value.string))
        table.set("interval", Self.duration(metrics.interval))
        return table
    }

    private func retention(_ retention: RetentionPolicy) -> Table {
        var table = Table()
        switch retention.uploadedCopies {
        case .delete:
            table.set("uploaded_copies", .string("delete"))
        case .keep(let duration):
            table.set("uploaded_copies", .string("keep"))
            table.set("keep_for", Self.duration(duration))
        case .archive(let directory, let template):
            table.set("uploaded_copies", .string("archive"))
            table.set("archive_dir", .string(directory))
            table.set("archive_template", .string(template.description))
        }
        table.set("history", retention.history.map(Self.duration) ?? .string("forever"))
        return table
    }

    private func hooks(_ hooks: HookSettings) -> Table {
        var table = Table()
        for event in HookEvent.allCases {
            table.set(event.key, hooks.command(for: event).map(command))
        }
        table.set("timeout", Self.duration(hooks.timeout))
        table.set("pass_env", .array(hooks.passEnvironment.map(Value.string)))
        table.set("max_attempts", .integer(Int64(hooks.maximumAttempts)))
        return table
    }

    // MARK: Destinations

    private func destination(_ destination: Destination, power: PowerSettings) -> Table {
        var table = Table()
        table.set("protocol", .string(destination.transferProtocol.rawValue))
        var connection = true
        switch destination.settings {
        case .localDirectory(let local):
            connection = false
            table.set("url", .string("file://" + local.directory))
            table.set("name_template", .string(local.nameTemplate.description))
            table.set("chunk_size", Self.size(local.checkpointSize))
            if let mode = local.fileMode { table.set("file_mode", .string("0" + String(mode, radix: 8))) }
        case .tus(let tus):
            table.set("url", url(tus.endpoint))
            table.set("chunk_size", Self.size(tus.chunkSize))
            table.set("creation_with_upload", .boolean(tus.creationWithUpload))
        case .rufh(let rufh):
            table.set("url", url(rufh.endpoint))
            table.set("interop_version", .integer(Int64(rufh.interopVersion)))
            table.set("chunk_size", Self.size(rufh.chunkSize))
            table.set("creation_with_upload", .boolean(rufh.creationWithUpload))
        case .httpPut(let put):
            table.entries += target(put.target).entries
            table.set("verify", .string(put.verify.rawValue))
        case .httpPost(let post):
            table.entries += target(post.target).entries
            // A minted POST's form is the backend's: the file goes as `file`, and form_field is not read.
            if case .template = post.target { table.set("form_field", .string(post.formField)) }
            table.set("verify", .string(post.verify.rawValue))
            table.set("remote_url_from", post.remoteURLFrom.map { .string($0.description) })
        case .s3(let s3):
            table.set("endpoint", url(s3.endpoint))
            table.set("bucket", .string(s3.bucket))
            table.set("region", .string(s3.region))
            table.set("path_style", .boolean(s3.pathStyle))
            table.set("key_template", .string(s3.keyTemplate.description))
            table.set("multipart_threshold", Self.size(s3.multipartThreshold))
            table.set("part_size", Self.size(s3.partSize))
            table.set("part_concurrency", .integer(Int64(s3.partConcurrency)))
            table.set("etag", .string(s3.etags.rawValue))
            switch s3.credentials {
            case .environment(let access, let secret, let token):
                table.set("access_key_env", .string(access))
                table.set("secret_key_env", .string(secret))
                table.set("session_token_env", token.map(Value.string))
            case .sharedFile(let path, let profile):
                table.set("credentials_file", .string(path))
                table.set("profile", .string(profile))
            case .standard(let profile):
                table.set("profile", profile.map(Value.string))
            }
        case .mintedS3(let minted):
            table.set("mint_url", url(minted.base))
            table.set("multipart_threshold", Self.size(minted.multipartThreshold))
            table.set("part_size", Self.size(minted.partSize))
            table.set("part_concurrency", .integer(Int64(minted.partConcurrency)))
            table.set("etag", .string(minted.etags.rawValue))
        }
        if connection {
            table.entries += http(destination.http).entries
            if Self.hasOwnURL(destination.settings) {
                table.set("trusted_origins", .array(destination.trustedOrigins.map { .string($0.description) }))
            }
            table.set("allow_private_targets", .boolean(destination.allowPrivateTargets))
            if let template = destination.publicURLTemplate {
                table.set("public_url_template", url(template.description))
            }
            table.set("circuit_threshold", .integer(Int64(destination.circuitBreaker.threshold)))
            table.set("circuit_probe_interval", Self.duration(destination.circuitBreaker.probeInterval))
            table.set("on_metered", .string(Self.metered(destination.onMetered)))
        }
        if Self.takesHashTiming(destination.settings) {
            table.set("sha256", .string(destination.hashTiming.rawValue))
        }
        table.set("source_after_upload", .string(destination.sourceAfterUpload.description))
        table.set("power", destination.power.map { .string(Self.requirement($0)) })
        table.set("windows", destination.windows.map { .array($0.texts.map(Value.string)) })
        return table
    }

    /// `url`, or `mint_url` / `mint_command` of a minted whole-file destination.
    private func target(_ target: WholeFileTarget) -> Table {
        var table = Table()
        switch target {
        case .template(let template):
            table.set("url", url(template.description))
        case .minted(.url(let mintURL)):
            table.set("mint_url", url(mintURL))
        case .minted(.command(let arguments, let timeout, let passed)):
            table.set("mint_command", command(arguments))
            table.set("mint_command_timeout", Self.duration(timeout))
            table.set("pass_env", .array(passed.map(Value.string)))
        }
        return table
    }

    /// tus, rufh and template http-put/post name their server in `url` and may list `trusted_origins`.
    private static func hasOwnURL(_ settings: Destination.ProtocolSettings) -> Bool {
        switch settings {
        case .tus, .rufh: true
        case .httpPut(let put): if case .template = put.target { true } else { false }
        case .httpPost(let post): if case .template = post.target { true } else { false }
        case .localDirectory, .s3, .mintedS3: false
        }
    }

    /// Every destination but a minted s3 one (its backend signs each part) chooses when its SHA-256 is taken.
    private static func takesHashTiming(_ settings: Destination.ProtocolSettings) -> Bool {
        switch settings {
        case .mintedS3: false
        case .localDirectory, .tus, .rufh, .s3, .httpPut, .httpPost: true
        }
    }

    /// The connection keys of a destination, `[patch]` or `[mint]`.
    private func http(_ settings: HTTPSettings) -> Table {
        var table = Table()
        if !settings.headers.isEmpty {
            var headers = Table()
            for name in settings.headers.keys.sorted() {
                headers.set(name, .string(redacting ? EffectiveConfiguration.redacted : settings.headers[name] ?? ""))
            }
            table.set("headers", .table(headers))
        }
        switch settings.credentials {
        case nil: break
        case .environment(let variable): table.set("token_env", .string(variable))
        case .file(let path): table.set("token_file", .string(path))
        case .command(let arguments, let timeout, let passed):
            table.set("token_command", command(arguments))
            table.set("token_command_timeout", Self.duration(timeout))
            table.set("pass_env", .array(passed.map(Value.string)))
        }
        table.set("ca_file", settings.caFile.map(Value.string))
        table.set("connect_timeout", Self.duration(settings.connectTimeout))
        table.set("stall_timeout", Self.duration(settings.stall.window))
        table.set("stall_min_rate", Self.size(settings.stall.minimumRate))
        table.set("min_rate", Self.size(settings.stall.minimumAverageRate))
        table.set("min_rate_window", Self.duration(settings.stall.averageWindow))
        return table
    }

    /// A URL with its user info and query values redacted.
    private func url(_ text: String) -> Value {
        .string(redacting ? URLRedaction.redact(text) : text)
    }

    /// A program and its arguments; the arguments may hold secrets, so only the program is shown.
    private func command(_ arguments: [String]) -> Value {
        .array(arguments.enumerated().map { index, argument in
            .string(redacting && index > 0 ? EffectiveConfiguration.redacted : argument)
        })
    }

    // MARK: Value forms

    private static func requirement(_ requirement: PowerRequirement) -> String {
        switch requirement {
        case .any: "any"
        case .ac: "ac"
        case .batteryNotLow: "battery-not-low"
        }
    }

    private static func metered(_ policy: MeteredPolicy) -> String {
        if case .allowBelow(let bytes) = policy { return "allow-below:" + ConfigurationValues.sizeText(bytes) }
        return policy.description
    }

    private static func size(_ bytes: Int64) -> Value {
        let text = ConfigurationValues.sizeText(bytes)
        return Int64(text) == bytes ? .integer(bytes) : .string(text)
    }

    private static func duration(_ duration: Duration) -> Value { .string(ConfigurationValues.durationText(duration)) }
}
