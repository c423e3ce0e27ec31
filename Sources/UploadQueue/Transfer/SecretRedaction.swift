import Foundation

/// Hides what looks secret in text that came from elsewhere (a server's error page, a hook's output) before it is
/// logged, stored as `last_error` or sent as an event.
///
/// A proxy that echoes the request puts the request's credentials in its answer; a hook may print the presigned URL
/// it was given. So: every URL's user info and query values, the word after `Bearer` or `Basic`, the value of any
/// key naming a token, secret, password, key, signature or credential (`token=…`, `"api_key": "…"`,
/// `X-Api-Key: …`), and any of the `known` secrets (a destination's configured header values) wherever they appear.
enum SecretRedaction {
    /// What replaces a secret.
    static let mark = "<redacted>"

    /// The first `limit` characters of `text` as words on one line, secrets redacted (see the type).
    static func redacted(_ text: String, known: [String] = [], limit: Int = 4096) -> String {
        var hideNext = false
        let words = text.prefix(limit).split(whereSeparator: \.isWhitespace).map { word -> String in
            // `"Bearer` as JSON echoes it, quote and all.
            defer { hideNext = ["bearer", "basic"].contains(word.lowercased().trimmingCharacters(in: .punctuationCharacters)) }
            if hideNext { return mark }
            return word.contains("://") ? URLRedaction.redact(String(word)) : String(word)
        }
        var line = words.joined(separator: " ")
        // Values of 6 characters or more: a shorter one (`1`, `yes`) would hide ordinary words.
        for secret in known where secret.count >= 6 {
            line = line.replacingOccurrences(of: secret, with: mark)
        }
        let range = NSRange(line.startIndex..., in: line)
        return secretValue.stringByReplacingMatches(in: line, range: range, withTemplate: "$1\(mark)")
    }

    /// A key naming a secret, its separator, and the value after it (group 1 is what is kept).
    private static let secretValue = try! NSRegularExpression(pattern: #"""
        (?i)((?:token|secret|passw(?:or)?d|api[-_]?key|access[-_]?key|authorization|signature|credential|cookie)[a-z0-9_-]*["']?\s*[:=]\s*["']?)(?!<redacted>)[^\s"',;}&]+
        """#)
}
