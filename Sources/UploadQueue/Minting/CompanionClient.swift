import Foundation

/// Talks to an app backend that presigns S3 uploads the way Uppy Companion does, so an existing Companion (or a
/// backend that serves its routes) works unchanged:
///
/// | request                                              | answer                                   |
/// |------------------------------------------------------|------------------------------------------|
/// | `GET {base}/s3/params?filename=&type=&metadata[k]=`  | `{method, url, fields, headers}` (one PUT or POST) |
/// | `POST {base}/s3/multipart` `{filename, type, metadata}` | `{uploadId, key}`                     |
/// | `GET {base}/s3/multipart/{uploadId}/{part}?key=`     | `{url, expires}` (one part's presigned URL) |
/// | `GET {base}/s3/multipart/{uploadId}?key=`            | `[{PartNumber, Size, ETag}]`             |
/// | `POST {base}/s3/multipart/{uploadId}/complete?key=` `{parts: [{PartNumber, ETag}]}` | `{location}` |
/// | `DELETE {base}/s3/multipart/{uploadId}?key=`         | (anything 2xx)                           |
///
/// `[mint]`'s headers and token go to the base's origin only. Every answer is read strictly; presigned URLs are
/// secrets, named in messages without their query.
struct CompanionClient: Sendable {
    let base: String
    let destination: String
    let client: DestinationClient

    init(base: String, destination: String, settings: MintSettings, engine: TransferEngine) {
        var trimmed = base
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        self.base = trimmed
        self.destination = destination
        let origin = URLOrigin(url: trimmed)
        var client = DestinationClient(name: "[mint]", http: settings.http, engine: engine,
                                       scope: .origins(origin.map { [$0] } ?? [], secure: origin?.scheme == "https"))
        client.pagesAreForeign = true  // a Companion backend speaks JSON
        self.client = client
    }

    /// A presigned PUT or POST for a whole small file.
    func parameters(for job: Job) async throws(TransferFailure) -> MintedTarget {
        var query = [("filename", job.originalName), ("type", job.contentType)]
        for key in job.meta.keys.sorted() { query.append(("metadata[\(key)]", job.meta[key] ?? "")) }
        let answer = try await call("GET", "/s3/params", query: query)
        do {
            // Companion leaves the method out for a PUT; the target reader wants it.
            var object = try json(answer, as: [String: Any].self, request: "GET /s3/params")
            if object["method"] == nil { object["method"] = "PUT" }
            return try MintedTarget(json: Array(try JSONSerialization.data(withJSONObject: object)))
        } catch let error as MintedTarget.Invalid {
            throw badReply("GET /s3/params", error.reason)
        } catch {
            throw badReply("GET /s3/params", "not a JSON object")
        }
    }

    /// Starts a multipart upload; the backend picks the key.
    func create(for job: Job) async throws(TransferFailure) -> (uploadID: String, key: String) {
        let body: [String: Any] = ["filename": job.originalName, "type": job.contentType, "metadata": job.meta]
        let answer = try await call("POST", "/s3/multipart", body: body)
        let object = try json(answer, as: [String: Any].self, request: "POST /s3/multipart")
        guard let uploadID = object["uploadId"] as? String, !uploadID.isEmpty,
              let key = object["key"] as? String, !key.isEmpty else {
            throw badReply("POST /s3/multipart", "no uploadId and key in the answer")
        }
        return (uploadID, key)
    }

    /// The presigned URL of one part, signed now.
    func partURL(uploadID: String, key: String, number: Int) async throws(TransferFailure) -> String {
        let path = "/s3/multipart/\(segment(uploadID))/\(number)"
        let answer = try await call("GET", path, query: [("key", key)])
        let object = try json(answer, as: [String: Any].self, request: "GET /s3/multipart/…/\(number)")
        guard let url = object["url"] as? String, URLOrigin(url: url) != nil else {
            throw badReply("GET /s3/multipart/…/\(number)", "no http(s) url in the answer")
        }
        return url
    }

    /// The parts the store holds for the upload; nil when the backend says the upload is gone (404).
    func parts(uploadID: String, key: String) async throws(TransferFailure) -> [Int: (etag: String, size: Int64)]? {
        let path = "/s3/multipart/\(segment(uploadID))"
        let response = try await client.send("GET", url(path, query: [("key", key)]))
        if response.status == 404 { return nil }
        let answer = try checked(response, request: "GET /s3/multipart/…")
        let list = try json(answer, as: [Any].self, request: "GET /s3/multipart/…")
        var parts: [Int: (etag: String, size: Int64)] = [:]
        for item in list {
            guard let part = item as? [String: Any], let number = (part["PartNumber"] as? NSNumber)?.intValue,
                  let etag = part["ETag"] as? String, let size = (part["Size"] as? NSNumber)?.int64Value,
                  number >= 1, size >= 0 else {
                throw badReply("GET /s3/multipart/…", "a part without PartNumber, ETag or Size")
            }
            parts[number] = (etag, size)
        }
        return parts
    }

    /// Completes the upload; returns the object's location, without any query.
    func complete(uploadID: String, key: String, parts: [S3ResumeState.Part]) async throws(TransferFailure) -> String? {
        let body: [String: Any] = ["parts": parts.map { ["PartNumber": $0.number, "ETag": $0.etag] as [String: Any] }]
        let answer = try await call("POST", "/s3/multipart/\(segment(uploadID))/complete", query: [("key", key)],
                                    body: body)
        let object = try json(answer, as: [String: Any].self, request: "POST /s3/multipart/…/complete")
        return (object["location"] as? String).map { String($0.prefix { $0 != "?" }) }
    }

    /// Aborts the upload; true when it is gone afterwards.
    func abort(uploadID: String, key: String) async -> Bool {
        guard let response = try? await client.send("DELETE", url("/s3/multipart/\(segment(uploadID))",
                                                                     query: [("key", key)])) else { return false }
        return response.isSuccess || response.status == 404
    }

    /// Whether the backend answers at all (the circuit breaker's probe).
    func answers() async -> Bool {
        await client.answers("GET", base + "/s3/params")
    }

    // MARK: Pieces

    private func call(_ method: String, _ path: String, query: [(String, String)] = [], body: [String: Any]? = nil)
        async throws(TransferFailure) -> HTTPResponse
    {
        var headers = [HTTPHeader("Accept", "application/json")]
        var payload = RequestBody.empty
        if let body {
            headers.append(HTTPHeader("Content-Type", "application/json"))
            payload = .bytes(Array((try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])) ?? Data()))
        }
        let response = try await client.send(method, url(path, query: query), headers: headers, body: payload)
        return try checked(response, request: "\(method) \(path)")
    }

    private func checked(_ response: HTTPResponse, request: String) throws(TransferFailure) -> HTTPResponse {
        guard response.isSuccess else {
            let failure = FailureClassifier.failure(for: response, request: "the minting backend's \(request)",
                                                    destination: destination)
            guard failure.kind == .permanent else { throw failure }
            let said = response.bodySummary
            throw .permanent("mint-refused", """
                the minting backend of destination "\(destination)" refused \(request): HTTP \(response.status)\
                \(said.isEmpty ? "" : ": \(said)"); fix it at the backend (or [mint]'s credentials), then `uploadq retry`
                """)
        }
        return response
    }

    private func json<T>(_ response: HTTPResponse, as type: T.Type, request: String) throws(TransferFailure) -> T {
        guard response.body.count <= 1 << 20, let value = try? JSONSerialization.jsonObject(with: Data(response.body)),
              let typed = value as? T else {
            throw badReply(request, "not the JSON \(T.self == [Any].self ? "array" : "object") Companion answers")
        }
        return typed
    }

    private func url(_ path: String, query: [(String, String)] = []) -> String {
        guard !query.isEmpty else { return base + path }
        let encoded = query.map { "\(PercentEncoding.unreserved($0.0))=\(PercentEncoding.unreserved($0.1))" }
        return base + path + "?" + encoded.joined(separator: "&")
    }

    private func segment(_ text: String) -> String { PercentEncoding.unreserved(text) }

    private func badReply(_ request: String, _ detail: String) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: "bad-reply",
                        "the minting backend's answer to \(request) for destination \"\(destination)\": \(detail)",
                        destinationFault: true)
    }
}
