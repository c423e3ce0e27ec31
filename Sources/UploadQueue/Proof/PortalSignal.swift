import Foundation

/// What shows that an answer came from something between uploadq and the destination, a captive portal or an
/// intercepting proxy, and not from the destination: such an answer is no verdict on the upload, only a sign that
/// the network does not reach the server yet.
///
/// | answer                                                          | reading                                    |
/// |-----------------------------------------------------------------|--------------------------------------------|
/// | `511 Network Authentication Required` (RFC 6585)                | a portal wants a login first               |
/// | a redirect (3xx) to another host, not one the destination trusts | a portal sends the client to its login page |
/// | a 2xx HTML page where the exchange expects none                 | a portal or a proxy answered in the server's place |
///
/// A redirect to the same host (another path, or an `http` → `https` upgrade) or to an origin the destination
/// trusts, and an HTML error page (4xx, 5xx), are the server's own answers and keep their usual verdicts; but for
/// a server that never answers in HTML (S3 answers in XML, an app's minting backend in JSON: `pagesAreForeign`), a
/// 4xx page is a portal's too (a `413` stays a body cap, whoever answers it).
struct PortalSignal: Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        /// 511.
        case networkAuthentication
        /// A redirect to `origin`.
        case redirect(origin: String)
        /// A 2xx HTML page, with its title when it has one.
        case htmlPage(title: String?)
    }

    let kind: Kind
    let status: Int

    /// The signal in `response` to a request for `requestURL`; nil when the answer may be the server's.
    /// `htmlExpected`: the exchange may rightly carry an HTML page (a HEAD of an uploaded `.html` file, a form
    /// endpoint the admin declared as answering in HTML).
    /// `trusted`: origins the destination itself sends to (its `trusted_origins`), whose redirects are its own.
    static func read(_ response: HTTPResponse, requestURL: String, htmlExpected: Bool = false,
                     trusted: Set<URLOrigin> = [], pagesAreForeign: Bool = false) -> PortalSignal? {
        if response.status == 511 { return PortalSignal(kind: .networkAuthentication, status: 511) }
        if (300..<400).contains(response.status), let location = response.location(resolvedAgainst: requestURL),
           let target = URLOrigin(url: location), target.host != URLOrigin(url: requestURL)?.host,
           !trusted.contains(target) {
            return PortalSignal(kind: .redirect(origin: target.description), status: response.status)
        }
        if response.isSuccess, !htmlExpected, isHTML(response) {
            return PortalSignal(kind: .htmlPage(title: title(of: response.body)), status: response.status)
        }
        if pagesAreForeign, (400..<500).contains(response.status), response.status != 413, isHTML(response) {
            return PortalSignal(kind: .htmlPage(title: title(of: response.body)), status: response.status)
        }
        return nil
    }

    /// Whether the answer is an HTML page: a body, that its `Content-Type` or, without one, its first bytes say is
    /// HTML. An empty body is no page, whatever its type says (moto and some frameworks label every empty answer
    /// `text/html`); a portal's answer to a `HEAD` is caught by what the HEAD must show instead.
    static func isHTML(_ response: HTTPResponse) -> Bool {
        guard response.body.contains(where: { !($0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D) }) else {
            return false
        }
        if let type = response.header("Content-Type") {
            let media = type.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            return media == "text/html" || media == "application/xhtml+xml"
        }
        let start = String(decoding: response.body.prefix(512), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        return start.hasPrefix("<!doctype html") || start.hasPrefix("<html")
    }

    /// The page's `<title>`, cut to 80 characters of plain text (a portal's words are not trusted: escaped when
    /// shown); nil without one.
    static func title(of body: [UInt8]) -> String? {
        let text = String(decoding: body.prefix(64 << 10), as: UTF8.self)
        guard let open = text.range(of: "<title", options: .caseInsensitive),
              let tagEnd = text[open.upperBound...].firstIndex(of: ">"),
              let close = text[tagEnd...].range(of: "</title", options: .caseInsensitive) else { return nil }
        let words = text[text.index(after: tagEnd)..<close.lowerBound]
            .split(whereSeparator: { $0.isWhitespace || $0.isNewline }).joined(separator: " ")
        guard !words.isEmpty else { return nil }
        // Cut before escaping, so no escape is cut in half.
        return SafeText.escaped(words.count > 80 ? String(words.prefix(80)) + "…" : words)
    }

    /// What answered, in words: `HTTP 200, an HTML page ("Hotel WiFi login")`.
    var account: String {
        switch kind {
        case .networkAuthentication:
            return "HTTP 511 Network Authentication Required"
        case .redirect(let origin):
            return "HTTP \(status), a redirect to \(origin)"
        case .htmlPage(let title):
            return "HTTP \(status), an HTML page" + (title.map { " (\"\($0)\")" } ?? "")
        }
    }

    /// The verdict: no verdict. The destination's jobs wait as `unverified-answer`, and the message says what
    /// answered for `request` (`PUT https://…`, redacted) and what to do.
    func failure(request: String, destination: String) -> TransferFailure {
        .unverified("""
            a captive portal or a proxy answered \(request) for destination "\(destination)" (\(account)), not the \
            server: log in on the network, or wait; the upload goes on by itself once the server answers
            """, portal: true)
    }
}
