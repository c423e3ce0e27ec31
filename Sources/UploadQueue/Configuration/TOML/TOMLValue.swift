/// One value of a TOML document with the line it was defined on, so config errors can point at it.
struct TOMLValue: Sendable, Equatable {
    /// What the value is; date-times are kept as their text because no config key needs them parsed.
    enum Kind: Sendable, Equatable {
        case string(String)
        case integer(Int64)
        case float(Double)
        case boolean(Bool)
        case datetime(String)
        case array([TOMLValue])
        case table(TOMLTable)
    }

    var kind: Kind
    /// 1-based line of the key that holds this value (or of the value itself inside an array).
    var line: Int

    /// The value's type for error messages ("expected a string, found an integer").
    var typeName: String {
        switch kind {
        case .string: "a string"
        case .integer: "an integer"
        case .float: "a float"
        case .boolean: "a boolean"
        case .datetime: "a date-time"
        case .array: "an array"
        case .table: "a table"
        }
    }
}

/// A TOML table: keys in the order they were defined, values with their lines.
struct TOMLTable: Sendable, Equatable {
    /// 1-based line of the table's header or first definition; 1 for the root table.
    var line: Int
    /// Keys in definition order.
    private(set) var keys: [String] = []
    private var values: [String: TOMLValue] = [:]

    init(line: Int) {
        self.line = line
    }

    subscript(key: String) -> TOMLValue? {
        values[key]
    }

    /// Adds a key; the parser has already rejected duplicates.
    mutating func insert(_ key: String, _ value: TOMLValue) {
        if values.updateValue(value, forKey: key) == nil {
            keys.append(key)
        }
    }
}

/// A TOML syntax or structure error at a line and column.
struct TOMLSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    var line: Int
    var column: Int
    var message: String

    var description: String { "line \(line), column \(column): \(message)" }
}
