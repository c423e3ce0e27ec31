import Foundation

/// One upload target the backend minted for a file: where to send it, how, and until when.
///
/// The backend answers `{"method": "PUT", "url": "…", "headers": {…}, "fields": {…}, "expires_at": "…",
/// "remote_url": "…"}`. The URL carries its own authorization (a signature in its query), so it is a secret: it is
/// never stored, shown or logged, and the job's `remote_url` is `remote_url`, else the server's `Location`, else the
/// URL without its query.
struct MintedTarget: Sendable, Equatable {
    /// `PUT` (the file is the body) or `POST` (a `multipart/form-data` form: `fields`, then the file as `file`).
    var method: String
    var url: String
    /// Sent with the upload (a presigned PUT's signed `Content-Type`, a Supabase `x-upsert`…).
    var headers: [HTTPHeader]
    /// For `POST`: the form's fields (a presigned POST's key, policy and signature), before the file.
    var fields: [(String, String)]
    var expiresAt: Date?
    var remoteURL: String?

    static func == (lhs: MintedTarget, rhs: MintedTarget) -> Bool {
        lhs.method == rhs.method && lhs.url == rhs.url && lhs.headers == rhs.headers
            && lhs.fields.map { "\($0.0)=\($0.1)" } == rhs.fields.map { "\($0.0)=\($0.1)" }
            && lhs.expiresAt == rhs.expiresAt && lhs.remoteURL == rhs.remoteURL
    }

    /// Headers a backend may not set: they belong to the transfer itself.
    static let reservedHeaders: Set<String> = ["host", "content-length", "transfer-encoding", "connection", "expect",
                                               "upgrade", "te", "trailer", "keep-alive"]

    /// Why a backend's answer is not a target.
    struct Invalid: Error, Sendable {
        var reason: String
    }

    /// Reads the backend's JSON; throws with what is wrong (never with the URL itself).
    init(json bytes: [UInt8]) throws(Invalid) {
        guard bytes.count <= 64 << 10,
              let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else {
            throw Invalid(reason: "not a JSON object")
        }
        guard let method = (object["method"] as? String)?.uppercased(), method == "PUT" || method == "POST" else {
            throw Invalid(reason: "\"method\" must be \"PUT\" or \"POST\"")
        }
        guard let url = object["url"] as? String, URLOrigin(url: url) != nil,
              !url.contains(where: { $0.isWhitespace || $0.isNewline }) else {
            throw Invalid(reason: "\"url\" must be an http:// or https:// URL")
        }
        var headers: [HTTPHeader] = []
        if let given = object["headers"], !(given is NSNull) {
            guard let table = given as? [String: Any] else { throw Invalid(reason: "\"headers\" must be an object") }
            for (name, value) in table.sorted(by: { $0.key < $1.key }) {
                guard let text = value as? String, Self.isToken(name), !text.contains(where: \.isNewline),
                      !text.contains("\0") else {
                    throw Invalid(reason: "header \"\(name.prefix(40))\" is not a header name with a one-line string value")
                }
                guard !Self.reservedHeaders.contains(name.lowercased()) else {
                    throw Invalid(reason: "header \"\(name)\" belongs to the transfer; a backend may not set it")
                }
                headers.append(HTTPHeader(name, text))
            }
        }
        var fields: [(String, String)] = []
        if let given = object["fields"], !(given is NSNull) {
            guard let table = given as? [String: Any] else { throw Invalid(reason: "\"fields\" must be an object") }
            for (name, value) in table.sorted(by: { $0.key < $1.key }) {
                guard let text = value as? String, !name.isEmpty, !name.contains("\""),
                      !name.contains(where: \.isNewline) else {
                    throw Invalid(reason: "form field \"\(name.prefix(40))\" must have a plain name and a string value")
                }
                fields.append((name, text))
            }
        }
        if method == "PUT", !fields.isEmpty { throw Invalid(reason: "\"fields\" only go with \"POST\"") }
        var expiresAt: Date?
        if let given = object["expires_at"], !(given is NSNull) {
            if let seconds = given as? NSNumber, !(given is Bool) {
                expiresAt = Date(timeIntervalSince1970: seconds.doubleValue)
            } else if let text = given as? String, let date = Date(rfc3339: text) {
                expiresAt = date
            } else {
                throw Invalid(reason: "\"expires_at\" must be an RFC 3339 time or seconds since 1970")
            }
        }
        var remoteURL: String?
        if let given = object["remote_url"], !(given is NSNull) {
            guard let text = given as? String, !text.isEmpty, !text.contains(where: \.isNewline) else {
                throw Invalid(reason: "\"remote_url\" must be a string")
            }
            remoteURL = text
        }
        self.method = method
        self.url = url
        self.headers = headers
        self.fields = fields
        self.expiresAt = expiresAt
        self.remoteURL = remoteURL
    }

    /// The URL as it may be kept and shown: without its query (where a presigned URL keeps its signature).
    var publicURL: String {
        String(url.prefix { $0 != "?" && $0 != "#" })
    }

    private static func isToken(_ name: String) -> Bool {
        !name.isEmpty && name.unicodeScalars.allSatisfy {
            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "!#$%&'*+-.^_`|~".unicodeScalars.contains($0))
        }
    }
}
