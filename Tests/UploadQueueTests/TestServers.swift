import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import UploadQueue

/// The real servers `contrib/test-servers/run.sh` starts on loopback (tuspyserver, nginx DAV, the fault proxy,
/// the recorder), found through its environment variables. A test that needs one and does not find it fails
/// with a message saying how to run it: it never skips.
enum TestServers {
    static func address(_ variable: String) throws -> String {
        guard let value = ProcessInfo.processInfo.environment[variable], !value.isEmpty else {
            let hint = "run the tests through contrib/run-tests.sh (or contrib/test-servers/run.sh swift test)"
            Issue.record("\(variable) is not set: \(hint)")
            throw UploadQueueError(.invalidArgument, "test server missing: \(variable)")
        }
        return value
    }

    /// tuspyserver's creation endpoint, `http://127.0.0.1:P/files/`.
    static func tusEndpoint() throws -> String { try address("UPLOADQ_TEST_TUS_ENDPOINT") }
    /// Where tuspyserver keeps uploads: `<id>` and `<id>.info`.
    static func tusFiles() throws -> String { try address("UPLOADQ_TEST_TUS_FILES") }
    static func davURL() throws -> String { try address("UPLOADQ_TEST_DAV_URL") }
    static func davRoot() throws -> String { try address("UPLOADQ_TEST_DAV_ROOT") }
    /// nginx's log of the plain server's requests: method, URI, status, connection serial, requests on it so far.
    static func davAccessLog() throws -> String { try address("UPLOADQ_TEST_DAV_ACCESS_LOG") }
    static func proxyControl() throws -> String { try address("UPLOADQ_TEST_PROXY_CONTROL") }
    static func recorderURL() throws -> String { try address("UPLOADQ_TEST_RECORDER_URL") }

    /// `host:port` of a URL.
    static func authority(_ url: String) throws -> String {
        let parsed = try #require(URL(string: url))
        return "\(parsed.host ?? "127.0.0.1"):\(parsed.port ?? 80)"
    }

    /// The file tuspyserver stored for an upload URL.
    static func tusStoredFile(uploadURL: String) throws -> String {
        let id = try #require(uploadURL.split(separator: "/").last)
        return try tusFiles() + "/" + id
    }
}

/// Plain HTTP for test plumbing (control APIs), through Foundation rather than the engine under test.
enum TestHTTP {
    static func request(_ method: String, _ url: String, json: Any? = nil, headers: [String: String] = [:])
        async throws -> (Int, Data)
    {
        var request = URLRequest(url: try #require(URL(string: url)))
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let json {
            request.httpBody = try JSONSerialization.data(withJSONObject: json)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }

    static func json(_ method: String, _ url: String, body: Any? = nil) async throws -> Any {
        let (status, data) = try await request(method, url, json: body)
        #expect((200..<300).contains(status), "\(method) \(url) → \(status): \(String(decoding: data, as: UTF8.self))")
        return try JSONSerialization.jsonObject(with: data)
    }
}

/// One fault-injecting proxy of our own in front of a real server, with its own rules and byte counts.
final class FaultProxy: Sendable {
    let id: String
    let port: Int
    private let control: String

    private init(id: String, port: Int, control: String) {
        self.id = id
        self.port = port
        self.control = control
    }

    /// A new proxy in front of `upstream` (`host:port`); with `enforceExpiry`, presigned URLs past their
    /// `X-Amz-Expires` are refused with S3's 403 "Request has expired".
    static func start(upstream: String, enforceExpiry: Bool = false) async throws -> FaultProxy {
        let control = try TestServers.proxyControl()
        let answer = try #require(try await TestHTTP.json("POST", control + "/proxies",
                                                          body: ["upstream": upstream, "enforce_expiry": enforceExpiry])
            as? [String: Any])
        return FaultProxy(id: try #require(answer["id"] as? String), port: try #require(answer["port"] as? Int),
                          control: control)
    }

    /// The proxy's address for a path on the upstream (`/files/`).
    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    /// Adds a rule (see contrib/test-servers/fault_proxy.py).
    func add(_ rule: [String: Any]) async throws {
        _ = try await TestHTTP.json("POST", "\(control)/proxies/\(id)/rules", body: rule)
    }

    func clearRules() async throws {
        _ = try await TestHTTP.json("DELETE", "\(control)/proxies/\(id)/rules")
    }

    /// Request-body bytes received from uploadq so far.
    func bodyBytes() async throws -> Int {
        try await stats()["body_bytes"] as? Int ?? -1
    }

    /// Every request seen, oldest first: method, path, headers, body_bytes, status, action, sha1.
    func requests() async throws -> [[String: Any]] {
        try await stats()["requests"] as? [[String: Any]] ?? []
    }

    func stats() async throws -> [String: Any] {
        try #require(try await TestHTTP.json("GET", "\(control)/proxies/\(id)/stats") as? [String: Any])
    }
}

/// A server of its own on our strict IETF resumable-upload server (contrib/test-servers/rufh_server.py), with the
/// interop version and limits a test asks for.
struct RUFHTestServer: Sendable {
    let id: String
    /// The creation endpoint.
    let endpoint: String
    private let control: String

    /// The endpoint's path (`/s/ID/files/`), to reach it through a proxy.
    var path: String { String(endpoint.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" }) }

    /// A new server: `interop` 6, 7 or 8 and settings such as `max_append_size`, `min_append_size`, `max_size`,
    /// `max_age`, `body_cap`, `quota_full`.
    static func make(interop: Int, _ settings: [String: Any] = [:]) async throws -> RUFHTestServer {
        let control = try TestServers.address("UPLOADQ_TEST_RUFH_CONTROL")
        var body = settings
        body["interop"] = interop
        let answer = try #require(try await TestHTTP.json("POST", control + "/servers", body: body) as? [String: Any])
        return RUFHTestServer(id: try #require(answer["id"] as? String),
                              endpoint: try #require(answer["endpoint"] as? String), control: control)
    }

    /// Changes settings or arms faults (`lose_appends`, `conflict_appends`, `expire_all`).
    func update(_ settings: [String: Any]) async throws {
        _ = try await TestHTTP.json("POST", "\(control)/servers/\(id)", body: settings)
    }

    /// Every request: method, path, headers (names as sent), body_bytes, status.
    func requests() async throws -> [[String: Any]] {
        try #require(try await TestHTTP.json("GET", "\(control)/servers/\(id)/requests") as? [[String: Any]])
    }

    /// Every upload by its id: offset, length, complete, sha256, deleted.
    func uploads() async throws -> [String: [String: Any]] {
        try #require(try await TestHTTP.json("GET", "\(control)/servers/\(id)/uploads") as? [String: [String: Any]])
    }
}

/// An app backend of its own on our minting server (contrib/test-servers/mint_backend.py): it presigns uploads
/// with botocore against an S3 endpoint, as an app's server does.
struct MintBackend: Sendable {
    let id: String
    /// Where its endpoints are: `{base}/sign`.
    let base: String
    private let control: String

    /// A backend presigning `method` (`PUT` or `POST`) uploads into `bucket` at `s3Endpoint`, valid `expires`
    /// seconds, wanting `Bearer token` when one is given.
    static func make(s3Endpoint: String, bucket: String, method: String = "PUT", expires: Int = 60,
                     token: String? = nil) async throws -> MintBackend {
        let control = try TestServers.address("UPLOADQ_TEST_MINT_CONTROL")
        var body: [String: Any] = ["s3_endpoint": s3Endpoint, "bucket": bucket, "method": method, "expires": expires]
        if let token { body["token"] = token }
        let answer = try #require(try await TestHTTP.json("POST", control + "/backends", body: body) as? [String: Any])
        return MintBackend(id: try #require(answer["id"] as? String), base: try #require(answer["base"] as? String),
                           control: control)
    }

    /// Answers given before the real ones: `[{"status": 500}, {"garbage": true}, …]`.
    func script(_ answers: [[String: Any]]) async throws {
        _ = try await TestHTTP.json("POST", "\(control)/backends/\(id)/script", body: answers)
    }

    /// Every request it got: method, path, headers (lowercased), json.
    func requests() async throws -> [[String: Any]] {
        try #require(try await TestHTTP.json("GET", "\(control)/backends/\(id)/requests") as? [[String: Any]])
    }
}

/// A session on the recording server: the requests it got and the answers it gives.
struct RecorderSession: Sendable {
    let name: String
    let base: String

    init() throws {
        name = "s" + UUID().uuidString.prefix(8).lowercased()
        base = try TestServers.recorderURL()
    }

    /// A URL under this session, recorded when requested.
    func url(_ path: String = "/upload") -> String { "\(base)/record/\(name)\(path)" }

    /// Queues answers given in order before the default `201 Created`.
    func script(_ responses: [[String: Any]]) async throws {
        _ = try await TestHTTP.json("POST", "\(base)/control/\(name)/responses", body: responses)
    }

    /// The requests the session got, oldest first; the `HEAD`s that prove a PUT stored its file (`verify =
    /// "head"`) only with `includingHEAD`, so a test about the uploads themselves sees those alone.
    func requests(includingHEAD: Bool = false) async throws -> [[String: Any]] {
        let all = try #require(try await TestHTTP.json("GET", "\(base)/control/\(name)/requests") as? [[String: Any]])
        return includingHEAD ? all : all.filter { $0["method"] as? String != "HEAD" }
    }
}

/// A bucket of its own on moto_server (which accepts any signature), read back through plain HTTP and the aws cli.
struct S3TestBucket: Sendable {
    let endpoint: String
    let name: String

    /// A new, empty bucket on the permissive moto.
    static func make() async throws -> S3TestBucket {
        let endpoint = try TestServers.address("UPLOADQ_TEST_S3_ENDPOINT")
        for (name, value) in environment { setenv(name, value, 1) }
        let bucket = S3TestBucket(endpoint: endpoint, name: "t-" + UUID().uuidString.prefix(12).lowercased())
        let (status, body) = try await TestHTTP.request("PUT", "\(endpoint)/\(bucket.name)")
        #expect(status == 200, "create bucket: \(String(decoding: body, as: UTF8.self))")
        return bucket
    }

    /// Destination lines for this bucket (path style, throwaway keys), with `extra` TOML lines.
    func destination(endpoint: String? = nil, _ extra: String = "") -> String {
        """
        protocol = "s3"
        endpoint = "\(endpoint ?? self.endpoint)"
        bucket = "\(name)"
        region = "us-east-1"
        access_key_env = "UPLOADQ_TEST_MOTO_ACCESS"
        secret_key_env = "UPLOADQ_TEST_MOTO_SECRET"
        stall_timeout = "3s"
        \(extra)
        """
    }

    /// The keys in the bucket, decoded, sorted.
    func keys() async throws -> [String] {
        let (status, body) = try await TestHTTP.request("GET", "\(endpoint)/\(name)?list-type=2")
        #expect(status == 200)
        let root = try #require(S3XMLElement.parse(Array(body)))
        return root.children("Contents").compactMap { $0.value("Key") }.sorted()
    }

    /// Multipart uploads still open in the bucket (ListMultipartUploads).
    func openUploads() async throws -> [String] {
        let (status, body) = try await TestHTTP.request("GET", "\(endpoint)/\(name)?uploads")
        #expect(status == 200)
        let root = try #require(S3XMLElement.parse(Array(body)))
        return root.children("Upload").compactMap { $0.value("UploadId") }
    }

    /// HEAD of an object: status and headers (lowercased names).
    func head(_ key: String) async throws -> (Int, [String: String]) {
        var request = URLRequest(url: try #require(URL(string: "\(endpoint)/\(name)/\(SigV4Signer.encodePath(key))")))
        request.httpMethod = "HEAD"
        // moto answers anonymous HEADs with 403; it checks no signature, so any will do.
        request.setValue("AWS4-HMAC-SHA256 Credential=AKIDTEST/20260101/us-east-1/s3/aws4_request, "
            + "SignedHeaders=host, Signature=00", forHTTPHeaderField: "Authorization")
        let (_, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        var headers: [String: String] = [:]
        for (field, value) in http.allHeaderFields {
            if let field = field as? String, let value = value as? String { headers[field.lowercased()] = value }
        }
        return (http.statusCode, headers)
    }

    /// Downloads an object with the aws cli into `path` and returns the path.
    func download(_ key: String, to path: String) async throws -> String {
        let aws = try TestServers.address("UPLOADQ_TEST_AWS")
        let result = try await BinaryRunner.run(
            ["aws", "s3api", "get-object", "--endpoint-url", endpoint, "--bucket", name, "--key", key, path],
            environment: ["AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                          "AWS_DEFAULT_REGION": "us-east-1"],
            executable: aws)
        #expect(result.status == 0, "aws s3api get-object: \(result.stderr)")
        return path
    }

    /// Environment for a daemon that signs with moto's throwaway keys.
    static let environment = ["UPLOADQ_TEST_MOTO_ACCESS": "AKIDTESTUPLOADQ", "UPLOADQ_TEST_MOTO_SECRET": "moto/secret+key"]
}
