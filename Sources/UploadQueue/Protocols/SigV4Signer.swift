import CUploadQueueSystem
import Foundation

/// Signs S3 requests with AWS Signature Version 4 (header-based, `AWS4-HMAC-SHA256`).
///
/// Written in Swift rather than taken from libcurl: libcurl 7.88's SigV4 does not canonicalise query strings.
/// S3 differs from other AWS services in one point: the path is encoded once (each segment, `/` kept), not
/// twice. Every retry is signed again with a fresh date.
struct SigV4Signer: Sendable {
    /// The region in the credential scope (`us-east-1`, or what MinIO/R2 expect, often `auto` or `us-east-1`).
    let region: String
    let service: String

    init(region: String, service: String = "s3") {
        self.region = region
        self.service = service
    }

    /// `x-amz-content-sha256` for a streamed body that is not hashed up front (a `Content-MD5` still checks it).
    static let unsignedPayload = "UNSIGNED-PAYLOAD"
    /// SHA-256 of nothing, for requests without a body.
    static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// One request as the signer sees it.
    struct Request: Sendable {
        var method: String
        /// The `Host` header exactly as sent (with `:port` when it is not the scheme's default).
        var host: String
        /// The path as sent: already encoded with `encodePath`.
        var path: String
        /// Query parameters, not encoded.
        var query: [(String, String)]
        /// Headers to sign besides `host`, `x-amz-date`, `x-amz-content-sha256` and `x-amz-security-token`.
        var headers: [HTTPHeader]
        /// Hex SHA-256 of the body, or `UNSIGNED-PAYLOAD`.
        var payloadHash: String
    }

    /// The headers to add to `request` (`x-amz-date`, `x-amz-content-sha256`, the session token when there is
    /// one, and `Authorization`) for a request made at `date`.
    func sign(_ request: Request, credentials: S3Credentials, date: Date) -> [HTTPHeader] {
        let stamp = Self.timestamp(date)
        var added = [HTTPHeader("x-amz-date", stamp), HTTPHeader("x-amz-content-sha256", request.payloadHash)]
        if let token = credentials.sessionToken { added.append(HTTPHeader("x-amz-security-token", token)) }
        let (canonical, signedHeaders) = Self.canonicalRequest(request, extra: added)
        let scope = "\(stamp.prefix(8))/\(region)/\(service)/aws4_request"
        let stringToSign = "AWS4-HMAC-SHA256\n\(stamp)\n\(scope)\n" + Self.sha256Hex(Array(canonical.utf8))
        var key = Self.hmac(Array("AWS4\(credentials.secretKey)".utf8), String(stamp.prefix(8)))
        for part in [region, service, "aws4_request"] { key = Self.hmac(key, part) }
        let signature = Self.hex(Self.hmac(key, stringToSign))
        added.append(HTTPHeader("Authorization", "AWS4-HMAC-SHA256 Credential=\(credentials.accessKey)/\(scope), "
            + "SignedHeaders=\(signedHeaders), Signature=\(signature)"))
        return added
    }

    /// The canonical request and the signed-header list (`host;x-amz-date;…`).
    static func canonicalRequest(_ request: Request, extra: [HTTPHeader]) -> (String, String) {
        var fields: [String: [String]] = ["host": [request.host]]
        for header in request.headers + extra {
            fields[header.name.lowercased(), default: []].append(canonicalValue(header.value))
        }
        let names = fields.keys.sorted()
        let headerLines = names.map { "\($0):\(fields[$0]!.joined(separator: ","))\n" }.joined()
        let signed = names.joined(separator: ";")
        let canonical = [request.method, request.path, canonicalQuery(request.query), headerLines, signed,
                         request.payloadHash].joined(separator: "\n")
        return (canonical, signed)
    }

    /// The query string as signed and as sent: each name and value encoded, sorted by name then value, `name=`
    /// for an empty value.
    static func canonicalQuery(_ query: [(String, String)]) -> String {
        let encoded: [(name: String, value: String)] = query.map { (encode($0.0), encode($0.1)) }
        let sorted = encoded.sorted { left, right in
            left.name == right.name ? left.value < right.value : left.name < right.name
        }
        return sorted.map { pair in pair.name + "=" + pair.value }.joined(separator: "&")
    }

    /// An object key (or any path) as a URI path: each segment encoded once, `/` kept.
    static func encodePath(_ path: String) -> String {
        PathSegments.split(path, omittingEmpty: false).map(encode).joined(separator: "/")
    }

    /// RFC 3986 encoding as SigV4 wants it: everything but `A-Z a-z 0-9 - . _ ~` as `%XX`, space as `%20`.
    static func encode(_ value: String) -> String { PercentEncoding.unreserved(value) }

    /// A header value as signed: trimmed, inner runs of spaces collapsed to one.
    static func canonicalValue(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            .trimmingCharacters(in: .whitespaces)
    }

    /// `YYYYMMDDTHHMMSSZ` in UTC.
    static func timestamp(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(format: "%04d%02d%02dT%02d%02d%02dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                      Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
    }

    static func hmac(_ key: [UInt8], _ message: String) -> [UInt8] {
        var mac = [UInt8](repeating: 0, count: 32)
        let data = Array(message.utf8)
        let status = key.withUnsafeBytes { keyBytes in
            data.withUnsafeBytes { dataBytes in
                uploadq_hmac_sha256(keyBytes.baseAddress, keyBytes.count, dataBytes.baseAddress, dataBytes.count, &mac)
            }
        }
        precondition(status == 0, "libcrypto could not compute an HMAC-SHA256")
        return mac
    }

    /// Hex SHA-256 of bytes in memory (canonical requests, small XML bodies).
    static func sha256Hex(_ bytes: [UInt8]) -> String {
        var digest = SHA256Digest()
        bytes.withUnsafeBytes { digest.update($0) }
        return digest.finish()
    }

    static func hex(_ bytes: [UInt8]) -> String { SHA256Digest.hex(bytes) }
}
