/// Reads typed values out of one TOML table and remembers which keys were read, and how, so unknown keys are
/// errors and every key read is one `ConfigurationReference` documents.
struct ConfigurationTable {
    /// How a key was read: its reader and, for numbers, the range it accepts.
    enum Reader: Equatable {
        case string, integer(ClosedRange<Int64>), float(ClosedRange<Double>), boolean, stringArray, stringTable
        case byteCount, freeSpace, duration, table
    }

    let table: TOMLTable
    /// Dotted path of this table (`destinations.photos`), empty for the root.
    let path: String
    let file: String
    private(set) var used: Set<String> = []
    /// Every read, in order: the key and its reader.
    private(set) var reads: [(key: String, reader: Reader)] = []
    /// The kind of destination this table is, once its protocol is known.
    var variant: ConfigurationKey.Variant?

    init(_ table: TOMLTable, path: String, file: String) {
        self.table = table
        self.path = path
        self.file = file
    }

    func fullKey(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    func error(_ key: String, _ message: String, line: Int? = nil) -> ConfigurationError {
        ConfigurationError(file: file, line: line ?? table[key]?.line ?? table.line, key: fullKey(key), message: message)
    }

    private mutating func value(_ key: String, _ reader: Reader) -> TOMLValue? {
        used.insert(key)
        reads.append((key, reader))
        return table[key]
    }

    /// The table as the reference names it: `destinations.NAME` for every destination.
    var documentedPath: String {
        let parts = path.split(separator: ".", maxSplits: 1)
        return parts.count == 2 && parts[0] == "destinations" ? "destinations.NAME" : path
    }

    private func typeError(_ key: String, expected: String, got value: TOMLValue) -> ConfigurationError {
        error(key, "expected \(expected), found \(value.typeName)")
    }

    mutating func string(_ key: String) throws(ConfigurationError) -> String? {
        guard let value = value(key, .string) else { return nil }
        guard case .string(let text) = value.kind else { throw typeError(key, expected: "a string", got: value) }
        return text
    }

    mutating func integer(_ key: String, range: ClosedRange<Int64>) throws(ConfigurationError) -> Int64? {
        guard let value = value(key, .integer(range)) else { return nil }
        guard case .integer(let number) = value.kind else { throw typeError(key, expected: "an integer", got: value) }
        guard range.contains(number) else {
            throw error(key, "\(number) is out of range (\(range.lowerBound)…\(range.upperBound))")
        }
        return number
    }

    mutating func float(_ key: String, range: ClosedRange<Double>) throws(ConfigurationError) -> Double? {
        guard let value = value(key, .float(range)) else { return nil }
        let number: Double
        switch value.kind {
        case .float(let x): number = x
        case .integer(let x): number = Double(x)
        default: throw typeError(key, expected: "a number", got: value)
        }
        guard range.contains(number) else {
            throw error(key, "\(number) is out of range (\(range.lowerBound)…\(range.upperBound))")
        }
        return number
    }

    mutating func stringArray(_ key: String) throws(ConfigurationError) -> [String]? {
        guard let value = value(key, .stringArray) else { return nil }
        guard case .array(let items) = value.kind else { throw typeError(key, expected: "an array of strings", got: value) }
        var strings: [String] = []
        for item in items {
            guard case .string(let text) = item.kind else {
                throw typeError(key, expected: "an array of strings", got: item)
            }
            strings.append(text)
        }
        return strings
    }

    /// An inline table of strings, such as `headers = { "X-Client" = "uploadq" }`.
    mutating func stringTable(_ key: String) throws(ConfigurationError) -> [String: String]? {
        guard let value = value(key, .stringTable) else { return nil }
        guard case .table(let inner) = value.kind else { throw typeError(key, expected: "a table of strings", got: value) }
        var result: [String: String] = [:]
        for name in inner.keys {
            guard let item = inner[name], case .string(let text) = item.kind else {
                throw error(key, "value of \"\(name)\" must be a string", line: inner[name]?.line)
            }
            result[name] = text
        }
        return result
    }

    /// True when the key is present (without reading it).
    func has(_ key: String) -> Bool { table[key] != nil }

    /// A boolean.
    mutating func boolean(_ key: String) throws(ConfigurationError) -> Bool? {
        guard let value = value(key, .boolean) else { return nil }
        guard case .boolean(let flag) = value.kind else { throw typeError(key, expected: "true or false", got: value) }
        return flag
    }

    /// A size: an integer number of bytes or a text like `8MiB`.
    mutating func byteCount(_ key: String, minimum: Int64 = 0) throws(ConfigurationError) -> Int64? {
        guard let value = value(key, .byteCount) else { return nil }
        let bytes: Int64?
        switch value.kind {
        case .integer(let number): bytes = number >= 0 ? number : nil
        case .string(let text): bytes = ConfigurationValues.byteCount(text)
        default: throw typeError(key, expected: "a size such as \"8MiB\" or a number of bytes", got: value)
        }
        guard let bytes else {
            throw error(key, "not a size: use a number of bytes or a number with B, KiB, MiB, GiB, KB, MB or GB")
        }
        guard bytes >= minimum else { throw error(key, "must be at least \(minimum) bytes") }
        return bytes
    }

    /// A free-space threshold: a size (`"256MiB"`, a number of bytes, 0 for none) or a percentage (`"5%"`).
    mutating func freeSpaceThreshold(_ key: String) throws(ConfigurationError) -> FreeSpaceThreshold? {
        guard let value = value(key, .freeSpace) else { return nil }
        let threshold: FreeSpaceThreshold?
        switch value.kind {
        case .integer(let number): threshold = number >= 0 ? .bytes(number) : nil
        case .string(let text): threshold = FreeSpaceThreshold(text)
        default: throw typeError(key, expected: "a size such as \"256MiB\" or a percentage such as \"5%\"", got: value)
        }
        guard let threshold else {
            throw error(key, "not a size (\"256MiB\", a number of bytes) or a percentage from 0% to 100% (\"5%\")")
        }
        return threshold
    }

    /// A duration: a text like `30s`, `5m`, `500ms`, `1h`.
    mutating func duration(_ key: String, minimum: Duration = .zero) throws(ConfigurationError) -> Duration? {
        guard let value = value(key, .duration) else { return nil }
        guard case .string(let text) = value.kind else {
            throw typeError(key, expected: "a duration such as \"30s\"", got: value)
        }
        guard let duration = ConfigurationValues.duration(text) else {
            throw error(key, "not a duration: \"\(text)\" (use a number with ms, s, m, h or d)")
        }
        guard duration >= minimum else { throw error(key, "must be at least \(minimum)") }
        return duration
    }

    /// A sub-table; a value of another type is an error.
    mutating func table(_ key: String) throws(ConfigurationError) -> ConfigurationTable? {
        guard let value = value(key, .table) else { return nil }
        guard case .table(let inner) = value.kind else { throw typeError(key, expected: "a table", got: value) }
        return ConfigurationTable(inner, path: fullKey(key), file: file)
    }

    /// Throws for the first key that no reader asked for. In debug builds (the tests) it also throws for a read
    /// the reference does not document, with that type and range, or (a key the file sets) for that kind of
    /// destination: a loader that drifts from the reference fails every test that loads that table. Release
    /// builds skip that check, so a slip can never keep a daemon from starting.
    func rejectUnknownKeys() throws(ConfigurationError) {
        for key in table.keys where !used.contains(key) {
            throw error(key, "unknown key (known here: \(used.sorted().joined(separator: ", ")))")
        }
        #if DEBUG
        for read in reads {
            let present = table[read.key] != nil
            if let problem = ConfigurationReference.problem(reading: read.key, in: documentedPath, with: read.reader,
                                                            variant: present ? variant : nil) {
                throw error(read.key, "uploadq reads this key, but its reference \(problem): a bug in uploadq")
            }
        }
        #endif
    }
}
