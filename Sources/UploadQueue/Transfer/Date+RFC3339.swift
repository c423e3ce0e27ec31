import Foundation

extension Date {
    /// An RFC 3339 time (`2026-11-24T10:00:00Z`, fractional seconds allowed), as S3's `ServerTime` and an app
    /// backend's `expires_at` write it; nil for anything else.
    init?(rfc3339 text: String) {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) {
            self = date
            return
        }
        formatter.formatOptions = [.withInternetDateTime]
        guard let date = formatter.date(from: text) else { return nil }
        self = date
    }

    /// The time in RFC 3339 with whole seconds, in UTC (`2026-11-24T10:00:00Z`), as the JSON outputs write it.
    public var rfc3339: String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: self)
    }
}
