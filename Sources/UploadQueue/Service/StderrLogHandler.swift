import Foundation
import Logging

/// Writes one line per log message to unbuffered stderr, journald-friendly.
///
/// Under systemd (`$JOURNAL_STREAM` set) lines start with the `<N>` syslog priority and carry no timestamp
/// (journald adds its own); elsewhere they start with an RFC 3339 time and the level. Control characters in the
/// message and metadata are shown escaped (`SafeText`).
public struct StderrLogHandler: LogHandler {
    public var logLevel: Logger.Level
    public var metadata: Logger.Metadata = [:]
    private let label: String
    private let underJournald: Bool

    public init(label: String, level: Logger.Level = .info,
                environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.label = label
        self.logLevel = level
        self.underJournald = environment["JOURNAL_STREAM"] != nil
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { $1 } }
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
