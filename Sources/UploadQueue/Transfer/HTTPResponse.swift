import Foundation

/// A server's answer: status, header fields, the start of the body, and how many bytes were sent.
struct HTTPResponse: Sendable {
    var status: Int
    /// Header fields of the final response (those of `100 Continue` and other interim responses are dropped).
    var headers: [HTTPHeader]
    /// The body, up to the request's `maximumResponseBody`.
    var body: [UInt8]
    /// Request body bytes libcurl sent in this exchange.
    var bytesSent: Int64

    /// The first value of a header field, by case-insensitive name, trimmed.
    func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    var isSuccess: Bool { (200..<300).contains(status) }

    /// The `Location` header as an absolute http(s) URL, resolved against `base` when it is relative; nil when
    /// there is none or it is not usable.
    func location(resolvedAgainst base: String) -> String? {
        guard let location = header("Location"), !location.isEmpty, let baseURL = URL(string: base),
              let resolved = URL(string: location, relativeTo: baseURL)?.absoluteURL,
              let scheme = resolved.scheme?.lowercased(), scheme == "http" || scheme == "https" else { return nil }
        return resolved.absoluteString
    }

    /// The body as text, for XML and JSON replies.
    var bodyText: String { String(decoding: body, as: UTF8.self) }

    /// A short, single-line account of the body for error messages: tags of an HTML page dropped, whitespace
    /// collapsed, cut at 200 characters.
    var bodySummary: String {
        var text = bodyText
        if text.contains("<") {
            text = text.replacingOccurrences(of: "<script[^>]*>[\\s\\S]*?</script>", with: " ", options: .regularExpression)
            text = text.replacingOccurrences(of: "<style[^>]*>[\\s\\S]*?</style>", with: " ", options: .regularExpression)
            text = text.replacingOccurrences(of: "<[^>]*>", with: " ", options: .regularExpression)
        }
        let words = text.split(whereSeparator: { $0.isWhitespace || $0.isNewline })
        let joined = words.joined(separator: " ")
        return joined.count > 200 ? String(joined.prefix(200)) + "…" : joined
    }

    /// `Retry-After` as a duration: delta seconds or an HTTP date; nil when absent or unreadable.
    func retryAfter(now: Date = Date()) -> Duration? {
        guard let value = header("Retry-After") else { return nil }
        return Self.parseRetryAfter(value, now: now)
    }

    static func parseRetryAfter(_ value: String, now: Date) -> Duration? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(trimmed), seconds >= 0 {
            return .seconds(min(seconds, 86_400))
        }
        guard let date = parseHTTPDate(trimmed) else { return nil }
        let seconds = max(0, min(date.timeIntervalSince(now), 86_400))
        return .milliseconds(Int64(seconds * 1000))
    }

    /// The server's clock from its `Date` header; nil when absent or unreadable.
    var date: Date? { header("Date").flatMap(Self.parseHTTPDate) }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
    static func parseHTTPDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text.trimmingCharacters(in: .whitespaces))
    }
}
