import Foundation
import Synchronization

/// Sends SigV4-signed requests to one S3 destination: object and bucket addresses (path-style or virtual-host),
/// a fresh signature per request, and one re-signed retry with the server's clock after `RequestTimeTooSkewed`.
struct S3Client: Sendable {
    let destination: Destination
    let settings: S3Settings
    let engine: TransferEngine
    let signer: SigV4Signer
    private let clockOffset: ClockOffset
    private let endpoint: Endpoint

    init(destination: Destination, settings: S3Settings, engine: TransferEngine) {
        self.destination = destination
        self.settings = settings
        self.engine = engine
        signer = SigV4Signer(region: settings.region)
        clockOffset = ClockOffset()
        endpoint = Endpoint(settings.endpoint)
    }

    /// Where a request goes: the `Host` header, the encoded path and the full URL.
    struct Target: Sendable {
        var host: String
        var path: String
        var query: [(String, String)]
        var url: String
    }

    /// The address of object `key` (or of the bucket when `key` is nil) with `query`.
    func target(key: String?, query: [(String, String)] = []) -> Target {
        var host = endpoint.authority
        var path = endpoint.basePath
        if settings.pathStyle {
            path += "/" + SigV4Signer.encode(settings.bucket)
            if let key { path += "/" + SigV4Signer.encodePath(key) }
        } else {
            host = settings.bucket + "." + host
            path += "/" + (key.map(SigV4Signer.encodePath) ?? "")
        }
        let queryString = SigV4Signer.canonicalQuery(query)
        return Target(host: host, path: path, query: query,
                      url: "\(endpoint.scheme)://\(host)\(path)" + (queryString.isEmpty ? "" : "?" + queryString))
    }

    /// The object's URL without query: its `remote_url` unless `public_url_template` says otherwise.
    func objectURL(_ key: String) -> String { target(key: key).url }

    /// Sends one signed request and returns the response whatever its status; throws when no response came, the
    /// credentials cannot be read, or a captive portal or a proxy answered (`PortalSignal`). `htmlExpected`: a HEAD
    /// of an object stored as HTML.
    func send(_ method: String, key: String?, query: [(String, String)] = [], headers: [HTTPHeader] = [],
              body: RequestBody = .empty, payloadHash: String = SigV4Signer.emptyPayloadHash, paced: Bool = false,
              htmlExpected: Bool = false, progress: (@Sendable (Int64) -> Void)? = nil)
        async throws(TransferFailure) -> HTTPResponse
    {
        let credentials = try S3Credentials.load(settings.credentials, destination: destination.name)
        let target = target(key: key, query: query)
        // An empty value would make libcurl drop the header after it was signed: such headers are not sent.
        var fields = destination.http.headers.sorted { $0.key < $1.key }.map { HTTPHeader($0.key, $0.value) }
        fields += headers
        fields.removeAll { $0.value.isEmpty }
        let options = TransferOptions(destination.http, paced: paced, trafficLabel: destination.name)
        var resignedForSkew = false
        while true {
            let request = SigV4Signer.Request(method: method, host: target.host, path: target.path, query: query,
                                              headers: fields, payloadHash: payloadHash)
            let signature = signer.sign(request, credentials: credentials, date: clockOffset.now())
            let sent = HTTPRequest(method: method, url: target.url,
                                   headers: [HTTPHeader("Host", target.host)] + fields + signature, body: body,
                                   options: options)
            let response: HTTPResponse
            do {
                response = try await engine.perform(sent, progress: progress)
            } catch {
                throw FailureClassifier.failure(for: error, method: "\(method) \(describe(target))")
            }
            if !resignedForSkew, response.status == 403, let reply = S3ErrorReply(response),
               reply.code == "RequestTimeTooSkewed", let serverDate = response.date ?? reply.serverTime {
                resignedForSkew = true
                clockOffset.set(serverDate.timeIntervalSinceNow)
                continue
            }
            // S3's own redirects (a bucket in another region) carry its XML error: the store's answer, not a portal's.
            if S3ErrorReply(response) == nil,
               let signal = PortalSignal.read(response, requestURL: target.url, htmlExpected: htmlExpected,
                                              pagesAreForeign: true) {
                throw signal.failure(request: "\(method) \(describe(target))", destination: destination.name)
            }
            return response
        }
    }

    /// `METHOD URL` for messages, redacted.
    func describe(_ target: Target) -> String { URLRedaction.redact(target.url) }

    /// The verdict for an answer the uploader did not expect, read from S3's `<Error>` body where there is one.
    func failure(for response: HTTPResponse, request: String) -> TransferFailure {
        S3ErrorReply.failure(for: response, request: request, destination: destination.name, bucket: settings.bucket)
    }
    /// An answer that is not what S3 sends (a missing UploadId or ETag, an unreadable list): a fault of the
    /// store, tried again later.
    func badReply(_ request: String, _ detail: String) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: "bad-reply", "bad S3 reply to \(request): \(detail)",
                        destinationFault: true)
    }

    /// A 200 whose body is an `<Error>` (S3 does that for slow operations): tried again later.
    func errorIn200(_ request: String, _ reply: S3ErrorReply) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: "s3-\(reply.code)",
                        "\(request) answered 200 with an error: \(reply.summary); trying again later",
                        destinationFault: true)
    }

    /// The multipart upload is gone from the store: the next attempt starts a new one.
    func uploadGone(_ request: String) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: "upload-gone",
            "\(request): the multipart upload is gone (NoSuchUpload: aborted, or expired by a lifecycle rule) and no "
            + "finished object matches; a new upload starts on the next attempt")
    }


    /// Whether the bucket answers at all, for the circuit breaker's probe (any status but 5xx, 408 and 429).
    func answers() async -> Bool {
        guard let response = try? await send("HEAD", key: nil) else { return false }
        return response.status < 500 && response.status != 429 && response.status != 408
    }

    /// `scheme://authority/base-path` of the endpoint, split once.
    private struct Endpoint: Sendable {
        var scheme: String
        var authority: String
        var basePath: String

        init(_ text: String) {
            let schemeEnd = text.range(of: "://")
            scheme = schemeEnd.map { String(text[..<$0.lowerBound]).lowercased() } ?? "https"
            let rest = schemeEnd.map { text[$0.upperBound...] } ?? text[...]
            let slash = rest.firstIndex(of: "/") ?? rest.endIndex
            var authority = String(rest[..<slash]).lowercased()
            // The port the scheme implies is left out, as libcurl leaves it out of `Host`.
            if scheme == "https", authority.hasSuffix(":443") { authority.removeLast(4) }
            if scheme == "http", authority.hasSuffix(":80") { authority.removeLast(3) }
            self.authority = authority
            var path = String(rest[slash...])
            while path.hasSuffix("/") { path.removeLast() }
            basePath = path
        }
    }

    /// The difference between the store's clock and ours, learnt from a `RequestTimeTooSkewed` answer.
    private final class ClockOffset: Sendable {
        private let seconds = Mutex<TimeInterval>(0)

        func now() -> Date { Date().addingTimeInterval(seconds.withLock { $0 }) }

        func set(_ offset: TimeInterval) { seconds.withLock { $0 = offset } }
    }
}
