import Foundation
import Logging

/// Writes one line per log message to unbuffered stderr, journald-friendly.
///
/// Under systemd (`$JOURNAL_STREAM` set) lines start with the `<N>` syslog priority and carry no timestamp
/// (journald adds its own); elsewhere they start with an RFC 3339 time and the level. Control characters in the
/// message and metadata are shown escaped (`SafeText`).
///
/// With `Format.json` each line is one JSON object for log shippers (Vector, Fluent Bit, Promtail): `time`,
/// `level`, `message`, `job` and `destination` when the message is about one, and every other field under
/// `fields`. Under journald the `<N>` prefix stays in front of the object, so priorities still filter.
package struct StderrLogHandler: LogHandler {
    /// How a line is written.
    package enum Format: String, Sendable, CaseIterable {
        /// `TIME LEVEL label: message key=value…`, for people.
        case text
        /// One JSON object per line, for machines.
        case json
    }

    package var logLevel: Logger.Level
    package var metadata: Logger.Metadata = [:]
    private let label: String
    private let underJournald: Bool
    private let format: Format

    package init(label: String, level: Logger.Level = .info, format: Format = .text,
                environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.label = label
        self.logLevel = level
        self.format = format
        self.underJournald = environment["JOURNAL_STREAM"] != nil
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        if format == .json {
            let object = Self.jsonLine(time: Self.timestamp(), level: event.level, message: "\(event.message)",
                                       metadata: merged)
            let line = (underJournald ? "<\(Self.priority(event.level))>" : "") + object + "\n"
            line.withCString { _ = write(STDERR_FILENO, $0, strlen($0)) }
            return
        }
        let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        // One line whatever the message holds: a file name with a newline cannot start a forged line (a journald
        // `<0>` priority), nor an escape sequence reach a terminal.
        let text = SafeText.escaped(fields.isEmpty ? "\(event.message)" : "\(event.message) \(fields)")
        let line: String
        if underJournald {
            line = "<\(Self.priority(event.level))>\(text)\n"
        } else {
            line = "\(Self.timestamp()) \(event.level.rawValue.uppercased()) \(label): \(text)\n"
        }
        line.withCString { _ = write(STDERR_FILENO, $0, strlen($0)) }
    }

    /// `{"time":…,"level":…,"message":…,"job":…,"destination":…,"fields":{…}}`: every string JSON-escaped, so a
    /// file name cannot break the line or forge a field.
    static func jsonLine(time: String, level: Logger.Level, message: String, metadata: Logger.Metadata) -> String {
        var fields = metadata
        var out = "{\"time\":\(SafeText.jsonString(time)),\"level\":\(SafeText.jsonString(level.rawValue))"
        out += ",\"message\":\(SafeText.jsonString(message))"
        for (key, name) in [("uploadq.job", "job"), ("uploadq.destination", "destination")] {
            if let value = fields.removeValue(forKey: key) { out += ",\"\(name)\":\(SafeText.jsonString("\(value)"))" }
        }
        if !fields.isEmpty {
            let pairs = fields.sorted { $0.key < $1.key }.map {
                SafeText.jsonString($0.key.hasPrefix("uploadq.") ? String($0.key.dropFirst(8)) : $0.key) + ":"
                    + SafeText.jsonString("\($0.value)")
            }
            out += ",\"fields\":{" + pairs.joined(separator: ",") + "}"
        }
        return out + "}"
    }

    private static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: return 7
        case .info: return 6
        case .notice: return 5
        case .warning: return 4
        case .error: return 3
        case .critical: return 2
        }
    }

    private static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                      Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(now.tv_nsec / 1_000_000))
    }
}
