/// A config file that cannot be used: names the file, the line and the key, and says what is wrong.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The config file, or `<embedded default>`.
    public var file: String
    /// 1-based line, or nil when the problem is not on one line (a missing section).
    public var line: Int?
    /// The full dotted key, e.g. `destinations.photos.chunk_size`, or nil for a syntax error.
    public var key: String?
    public var message: String

    public init(file: String, line: Int?, key: String?, message: String) {
        self.file = file
        self.line = line
        self.key = key
        self.message = message
    }

    public var description: String {
        var text = file
        if let line { text += ":\(line)" }
        text += ": "
        if let key { text += "key `\(key)`: " }
        return text + message
    }
}
