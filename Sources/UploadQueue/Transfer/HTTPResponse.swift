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
    /// The `Location` of a `104 Upload Resumption Supported` interim response before this one (RUFH): the upload a
    /// creation request made, named before its body went.
    var resumptionLocation: String? = nil

    /// The first value of a header field, by case-insensitive name, trimmed.
    func header(_ name: String) -> String? {
        headers.first { $0.hasName(name) }?.value
    }

    var isSuccess: Bool { (200..<300).contains(status) }

    /// The `Location` header as an absolute http(s) URL, resolved against `base` when it is relative; nil when
    /// there is none or it is not usable.
    func location(resolvedAgainst base: String) -> String? {
        Self.absoluteURL(header("Location"), against: base)
    }

    /// `resumptionLocation` as an absolute http(s) URL, resolved against `base` when it is relative.
    func resumptionLocation(resolvedAgainst base: String) -> String? {
        Self.absoluteURL(resumptionLocation, against: base)
    }

    private static func absoluteURL(_ location: String?, against base: String) -> String? {
        guard let location, !location.isEmpty, let baseURL = URL(string: base),
              let resolved = URL(string: location, relativeTo: baseURL)?.absoluteURL,
              let scheme = resolved.scheme?.lowercased(), scheme == "http" || scheme == "https" else { return nil }
        return resolved.absoluteString
    }

    /// The body as text, for XML and JSON replies.
    var bodyText: String { String(decoding: body, as: UTF8.self) }

    /// A short, single-line account of the body for error messages: tags of an HTML page dropped (with what
    /// `<script>` and `<style>` hold), whitespace collapsed, cut at 200 characters, secrets redacted
    /// (`SecretRedaction`: a proxy may echo the request's credentials).
    ///
    /// One pass over at most the first 16 KiB, with no pattern: a hostile body (a megabyte of `<script>`) costs
    /// no more than a plain one.
    var bodySummary: String { summary(redacting: []) }

    /// `bodySummary`, with the `known` secrets (a destination's header values) redacted too.
    func summary(redacting known: [String]) -> String {
        let text = Array(body.prefix(Self.summarySpan))
        var out: [UInt8] = []
        var index = 0
        var space = false
        func skip(past closing: [UInt8]) {
            // Case-insensitive search for `closing` from `index`; to the end when it is not there.
            while index < text.count {
                if text[index] == UInt8(ascii: "<"), index + closing.count <= text.count,
                   zip(text[index..<index + closing.count], closing).allSatisfy({ $0 | 0x20 == $1 | 0x20 }) {
                    index += closing.count
                    return
                }
                index += 1
            }
        }
        while index < text.count, out.count < 1024 {
            let byte = text[index]
            if byte == UInt8(ascii: "<") {
                let rest = text[index...].prefix(8).map { $0 | 0x20 }
                if rest.starts(with: Array("<script".utf8)) { skip(past: Array("</script>".utf8)) }
                else if rest.starts(with: Array("<style".utf8)) { skip(past: Array("</style>".utf8)) }
                else {
                    while index < text.count, text[index] != UInt8(ascii: ">") { index += 1 }
                    index += 1
                }
                space = true
                continue
            }
            if byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D || byte == 0x0C || byte == 0x0B {
                space = true
            } else {
                if space && !out.isEmpty { out.append(0x20) }
                space = false
                out.append(byte)
            }
            index += 1
        }
        let joined = SecretRedaction.redacted(String(decoding: out, as: UTF8.self), known: known)
        return joined.count > 200 ? String(joined.prefix(200)) + "…" : joined
    }

    /// How much of a body `bodySummary` looks at.
    static let summarySpan = 16 << 10

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

    /// An HTTP date in any of the three forms a recipient must accept (RFC 9110 §5.6.7): the IMF-fixdate
    /// `Sun, 06 Nov 1994 08:49:37 GMT`, the obsolete RFC 850 `Sunday, 06-Nov-94 08:49:37 GMT` and asctime
    /// `Sun Nov  6 08:49:37 1994`; nil for anything else, an impossible day included.
    ///
    /// Read by hand: Foundation's `DateFormatter` went through ICU for each header, and leaked memory on some
    /// inputs (found by the HTTP headers fuzzer).
    static func parseHTTPDate(_ text: String) -> Date? {
        let words = text.trimmingCharacters(in: .whitespaces).split(separator: " ", omittingEmptySubsequences: true)
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func number(_ text: Substring, digits: ClosedRange<Int>) -> Int? {
            guard digits.contains(text.count), text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return Int(text)
        }
        func month(_ text: Substring) -> Int? { months.firstIndex(of: String(text)).map { $0 + 1 } }
        var year: Int?, monthNumber: Int?, day: Int?, clock: Substring?
        if words.count == 6, words[0].hasSuffix(","), words[5] == "GMT" {
            // IMF-fixdate.
            (day, monthNumber, year, clock) = (number(words[1], digits: 2...2), month(words[2]),
                                               number(words[3], digits: 4...4), words[4])
        } else if words.count == 4, words[0].hasSuffix(","), words[3] == "GMT" {
            // RFC 850: a two-digit year; 00–69 are read as 20xx, 70–99 as 19xx.
            let parts = words[1].split(separator: "-", omittingEmptySubsequences: false)
            if parts.count == 3, let short = number(parts[2], digits: 2...2) {
                (day, monthNumber, year, clock) = (number(parts[0], digits: 2...2), month(parts[1]),
                                                   short < 70 ? 2000 + short : 1900 + short, words[2])
            }
        } else if words.count == 5 {
            // asctime: the day padded with a space, which the split took away.
            (monthNumber, day, clock, year) = (month(words[1]), number(words[2], digits: 1...2), words[3],
                                               number(words[4], digits: 4...4))
        }
        guard let year, let monthNumber, let day, let clock else { return nil }
        let time = clock.split(separator: ":", omittingEmptySubsequences: false)
        guard time.count == 3, let hour = number(time[0], digits: 2...2), let minute = number(time[1], digits: 2...2),
              let second = number(time[2], digits: 2...2), hour < 24, minute < 60, second < 61
        else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let lengths = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...lengths[monthNumber - 1]).contains(day) else { return nil }
        // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
        let y = monthNumber <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (monthNumber + (monthNumber > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3600 + minute * 60 + second))
    }
}
