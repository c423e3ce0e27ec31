import Foundation

/// Where a whole-file uploader sends each file: the config's URL template, or what the app's backend mints.
enum WholeFileRoute: Sendable {
    case template(URLTemplate)
    case minted(Minter)

    /// The route of `target`, with the backend's client made for a minted one.
    init(_ target: WholeFileTarget, destination: Destination, mint: MintSettings, engine: TransferEngine) {
        switch target {
        case .template(let url): self = .template(url)
        case .minted(let source):
            self = .minted(Minter(source: source, destination: destination.name, settings: mint, engine: engine))
        }
    }
}

/// Sends a whole file in one request (plain HTTP has no resume): what `HTTPPutUploader` and `HTTPPostUploader`
/// share. An interrupted transfer is simply sent again whole; `Content-Range` is never used.
///
/// Proof of receipt (`verify`), before the job is `uploaded`:
///
/// | verify     | PUT to a template                                  | POST to a template                     | a minted target                   |
/// |------------|----------------------------------------------------|----------------------------------------|-----------------------------------|
/// | `head`     | the answer's `Repr-Digest`, else a `HEAD`: 2xx, the size, a matching digest if given | —      | —                                 |
/// | `response` | a matching digest in the answer                    | `remote_url_from`'s URL, else a `Location` on its origin, else a 2xx with a body that is not a page | a matching digest or MD5 ETag |
/// | `status`   | any 2xx                                            | any 2xx, an HTML page included         | any 2xx                           |
///
/// An answer that proves nothing is `unverified`: the destination waits, nothing fails for good.
struct WholeFileSender: Sendable {
    let destination: Destination
    let client: DestinationClient
    /// The smallest body the server refused with 413, shared by the destination's transfers.
    let bodyLimit: RequestBodyLimit
    /// How a success is proven.
    var verify: WholeFileVerification = .head
    /// Where a POST's answer names the stored file.
    var remoteURLFrom: RemoteURLSource?
    /// What a minted target's storage ETags are (a Companion destination's `etag`): MD5s, or its word alone.
    var etags: S3Settings.ETags = .md5
    /// How many freshly minted targets one attempt tries when each is refused as expired or forbidden.
    static let mintsPerAttempt = 3

    /// What one request looks like, given the job and its open file.
    struct Request {
        var method: String
        var url: String
        var headers: [HTTPHeader]
        var body: RequestBody
    }

    func upload(_ context: TransferContext, build: (Job, SourceFile) -> Request) async throws(TransferFailure)
        -> UploadOutcome
    {
        let job = context.job
        let source = try SourceFile(job: job)
        try context.checkConstraints()
        try await context.resumed(0)
        var request = build(job, source)
        // A name that does not fit a path segment (255 bytes, what a DAV server stores it as) is shortened by the
        // name rule; a URL that stays too long for a server's request line fails for good instead of a 414 loop.
        guard let fitted = FileName.fittingURL(request.url, jobID: job.id) else {
            throw .permanent("name-too-long", """
                the URL for this file is \(request.url.utf8.count) bytes, more than the \(FileName.urlLimit) servers \
                take in a request line even with its names shortened: shorten the url template or the metadata it \
                uses, then `uploadq retry \(job.id)`
                """)
        }
        request.url = fitted
        // A server that refused a body this large before refuses this one too: nothing is sent.
        let length = request.body.length
        if let refused = bodyLimit.refusedAt, length >= refused {
            throw tooLarge(length, refused: refused, sent: false)
        }
        // The job id lets servers that deduplicate retries recognise a re-sent file.
        request.headers.append(HTTPHeader("Idempotency-Key", job.id.rawValue))
        if request.method == "PUT", verify != .status {
            // A server that answers with the digest of what it stored (RFC 9530) proves it at once: no HEAD.
            request.headers.append(HTTPHeader("Want-Repr-Digest", "sha-256=10"))
        }
        // A PUT's answer may be a page (Apache's mod_dav answers 201 with one): what proves it is the digest or the
        // HEAD, not the page. A POST's answer is its proof: a page is none, unless the admin said `status`.
        let response = try await client.send(request.method, request.url, headers: request.headers, body: request.body,
                                             paced: true, htmlExpected: request.method == "PUT" || verify == .status,
                                             progress: { context.sent($0) })
        guard response.isSuccess else {
            if response.status == 413 {
                bodyLimit.refused(length)
                throw tooLarge(length, refused: length, sent: true)
            }
            throw client.failure(for: response, request: "\(request.method) \(URLRedaction.redact(request.url))")
        }
        // The digest of the bytes sent (recorded for a job hashed while sending, checked against intake's for the
        // others): read once more only for what the request did not read itself (nothing, unless it was cut short).
        let sha256: String
        do {
            sha256 = try await source.sentDigest()
            try source.verifyUnchanged()
        } catch {
            if request.method == "PUT", error.code == "source-changed" {
                // The server holds a mix of two versions under the job's own URL: remove it rather than keep it.
                _ = try? await client.send("DELETE", request.url)
            }
            throw error
        }
        // Said only in an error: the redaction is not paid for on every upload.
        let shown = { "\(request.method) \(URLRedaction.redact(request.url))" }
        let stored = try await prove(response, request: request, shown: shown, source: source,
                                     sha256: sha256)
        try await context.confirmed(job.size, nil)
        return UploadOutcome(remoteURL: destination.remoteURL(for: job, serverURL: stored), sha256: sha256)
    }

    /// Proves a template upload's success as `verify` says; returns the stored file's URL.
    private func prove(_ response: HTTPResponse, request: Request, shown: () -> String, source: SourceFile, sha256: String)
        async throws(TransferFailure) -> String
    {
        let job = source.job
        let fileMD5 = { () async throws(TransferFailure) -> [UInt8] in
            try await FileRangeDigest.digest(.md5, of: source, offset: 0, length: job.size)
        }
        let located = response.location(resolvedAgainst: request.url)
        switch (verify, request.method) {
        case (.status, _):
            return located ?? request.url
        case (_, "POST"):
            if let remoteURLFrom {
                let json = try? JSONSerialization.jsonObject(with: Data(response.body), options: [.fragmentsAllowed])
                guard let found = json.flatMap(remoteURLFrom.value(in:)), let url = Self.absoluteURL(found, base: request.url)
                else {
                    throw .unverified("""
                        \(shown()) answered HTTP \(response.status) without a URL at \(remoteURLFrom) in a JSON body \
                        (remote_url_from): not the answer destination "\(destination.name)" documents (a proxy \
                        answered?); the file is sent again later
                        """)
                }
                return url
            }
            if let located {
                guard case .withCredentials = client.scope.verdict(for: located) else {
                    throw .unverified("""
                        \(shown()) answered HTTP \(response.status) with a Location on another origin \
                        (\(URLOrigin(url: located)?.description ?? "?")): not destination "\(destination.name)"'s own \
                        (list it in trusted_origins if it is); the file is sent again later
                        """)
                }
                return located
            }
            // Nothing names the stored file: the answer must at least say something (a portal's page was refused
            // already; an empty 2xx is what a proxy answers as readily as a server).
            guard response.body.contains(where: { $0 > 0x20 }) else {
                throw .unverified("""
                    \(shown()) answered HTTP \(response.status) with nothing in it: no Location, no body that names the \
                    stored file; set remote_url_from for an answer that does, or verify = "status" if this server \
                    never answers more; the file is sent again later
                    """)
            }
            return request.url
        case (.response, _):
            guard let verdict = try await AnswerDigests(response, etagIsMD5: false).agree(sha256: sha256, fileMD5: fileMD5),
                  verdict.0 else {
                throw .unverified("""
                    \(shown()) answered HTTP \(response.status) without a digest of the bytes it stored that matches the \
                    file's (verify = "response"); the file is sent again later
                    """)
            }
            return located ?? request.url
        case (.head, _):
            // An answer that names a matching digest needs no HEAD; one that names another is no proof at all.
            if let verdict = try await AnswerDigests(response, etagIsMD5: false).agree(sha256: sha256, fileMD5: fileMD5) {
                guard verdict.0 else {
                    throw .unverified("""
                        \(shown()) answered HTTP \(response.status) naming \(verdict.1), not the digest of the bytes sent: \
                        the server holds other bytes (or a proxy answered); the file is sent again later
                        """)
                }
                return located ?? request.url
            }
            let stored = located.flatMap { URLOrigin(url: $0) == URLOrigin(url: request.url) ? $0 : nil } ?? request.url
            try await proveByHead(stored, size: job.size, contentType: job.contentType, shown: shown, sha256: sha256,
                                  fileMD5: fileMD5)
            return located ?? request.url
        }
    }

    /// A `HEAD` of the stored file must answer 2xx with the file's size, and a digest that matches where it
    /// names one; anything else is `unverified`.
    private func proveByHead(_ url: String, size: Int64, contentType: String, shown: () -> String, sha256: String,
                             fileMD5: () async throws(TransferFailure) -> [UInt8]) async throws(TransferFailure)
    {
        let head = { "HEAD \(URLRedaction.redact(url))" }
        let pageExpected = contentType.lowercased().hasPrefix("text/html")
        let response = try await client.send("HEAD", url, htmlExpected: pageExpected)
        if !pageExpected, response.isSuccess, let type = response.header("Content-Type"),
           type.lowercased().hasPrefix("text/html") {
            // The file is no page, yet a page answers for it: a portal's login page, as like as not.
            throw .unverified("""
                \(shown()) was answered as done, but \(head()) answers with an HTML page (HTTP \(response.status)), not the \
                file: a captive portal or a proxy answered, not the server (log in on the network, or wait); the file \
                is sent again later
                """, portal: true)
        }
        guard response.isSuccess else {
            throw .unverified("""
                \(shown()) was answered as done, but \(head()) answers HTTP \(response.status): the server does not show the \
                file it took (if it cannot answer HEAD, set verify = "status" on destination "\(destination.name)"); \
                the file is sent again later
                """)
        }
        let length = response.header("Content-Length").flatMap { Int64($0) }
        guard length == size else {
            throw .unverified("""
                \(head()) shows \(length.map { "\($0) bytes" } ?? "no Content-Length"), not the \(size) bytes sent: the \
                server did not keep the file whole (or a proxy answered); the file is sent again later
                """)
        }
        if let verdict = try await AnswerDigests(response, etagIsMD5: false).agree(sha256: sha256, fileMD5: fileMD5),
           !verdict.0 {
            throw .unverified("""
                \(head()) names \(verdict.1), not the digest of the bytes sent: the server holds other bytes; the file \
                is sent again later
                """)
        }
    }

    /// `text` as an absolute http(s) URL, resolved against `base` when relative; nil for anything else.
    static func absoluteURL(_ text: String, base: String) -> String? {
        guard let baseURL = URL(string: base), let resolved = URL(string: text, relativeTo: baseURL)?.absoluteURL,
              let scheme = resolved.scheme?.lowercased(), scheme == "http" || scheme == "https", resolved.host != nil
        else { return nil }
        return resolved.absoluteString
    }

    /// Sends the file to a target the app's backend mints for it (`mint_url`, `mint_command`): minted just before
    /// the request, and minted again when the storage refuses it (401/403: expired, or not yet valid), at most
    /// `mintsPerAttempt` times per attempt, apart from the retry schedule. The minted URL is a secret: messages name
    /// it without its query, and it is never kept.
    func uploadMinted(_ context: TransferContext, minter: Minter) async throws(TransferFailure) -> UploadOutcome {
        try await uploadMinted(context) { job async throws(TransferFailure) in try await minter.mint(for: job) }
    }

    /// `uploadMinted` with any source of targets (a Companion backend's `/s3/params`).
    func uploadMinted(_ context: TransferContext,
                      mint: @Sendable (Job) async throws(TransferFailure) -> MintedTarget) async throws(TransferFailure)
        -> UploadOutcome
    {
        let job = context.job
        let source = try SourceFile(job: job)
        try context.checkConstraints()
        try await context.resumed(0)
        var refusals: [String] = []
        while true {
            // A file the server refused at this size less than an hour ago waits: no target is minted for it.
            if let refused = bodyLimit.refusedAt, job.size >= refused {
                throw tooLarge(job.size, refused: refused, sent: false)
            }
            let target = try await mint(job)
            // Before anything is sent: https → http is refused, and no credential goes to the minted origin.
            do {
                try client.check(target.url)
            } catch {
                throw error.hiding(target.url, as: target.publicURL)
            }
            var request = Request(method: target.method, url: target.url, headers: target.headers,
                                  body: .source(source, offset: 0, length: job.size))
            if target.method == "POST" {
                let form = MultipartForm(boundary: "uploadq-\(job.id.rawValue)-\(UInt64.random(in: 0...UInt64.max))")
                request.body = form.body(fields: target.fields.map { (key: $0.0, value: $0.1) }, fileField: "file",
                                         fileName: job.originalName, contentType: job.contentType,
                                         file: .source(source, offset: 0, length: job.size))
                request.headers.append(HTTPHeader("Content-Type", "multipart/form-data; boundary=\(form.boundary)"))
            }
            let length = request.body.length
            if let refused = bodyLimit.refusedAt, length >= refused {
                throw tooLarge(length, refused: refused, sent: false)
            }
            let shown = "\(request.method) \(target.publicURL)"
            let response: HTTPResponse
            do {
                response = try await client.send(request.method, request.url, headers: request.headers,
                                                 body: request.body, paced: true, htmlExpected: verify == .status,
                                                 progress: { context.sent($0) })
            } catch {
                // A transport error names the URL it was sent to: not this one's query.
                throw error.hiding(target.url, as: target.publicURL)
            }
            if response.isSuccess {
                let sha256 = try await source.sentDigest()
                try source.verifyUnchanged()
                if verify != .status {
                    // The storage's answer is the proof: a digest or an MD5 ETag (S3, GCS) of the bytes it keeps.
                    let fileMD5 = { () async throws(TransferFailure) -> [UInt8] in
                        try await FileRangeDigest.digest(.md5, of: source, offset: 0, length: job.size)
                    }
                    let verdict = try await AnswerDigests(response, etagIsMD5: etags == .md5)
                        .agree(sha256: sha256, fileMD5: fileMD5)
                    // Opaque ETags (SSE-KMS) prove no bytes: the storage's ETag is its word, where no digest is given.
                    let opaqueWord = verdict == nil && etags == .opaque && !(response.header("ETag") ?? "").isEmpty
                    guard verdict?.0 == true || opaqueWord else {
                        throw .unverified(verdict.map { """
                            \(shown): the storage's \($0.1) is not the digest of the bytes sent: it holds other bytes \
                            (or a proxy answered); the file is sent again later
                            """ } ?? """
                            \(shown) answered HTTP \(response.status) without an ETag or a digest that shows the storage \
                            holds the bytes (a proxy or a portal answered?); if this storage never sends one, set \
                            verify = "status" on destination "\(destination.name)"; the file is sent again later
                            """)
                    }
                }
                try await context.confirmed(job.size, nil)
                let stored = target.remoteURL
                    ?? response.location(resolvedAgainst: target.url).map { String($0.prefix { $0 != "?" }) }
                    ?? target.publicURL
                return UploadOutcome(remoteURL: destination.remoteURL(for: job, serverURL: stored), sha256: sha256)
            }
            // What the storage said, without the query of any URL it echoes.
            let said = URLRedaction.withoutQueries(S3ErrorReply(response)?.summary ?? response.bodySummary)
            switch response.status {
            case 401, 403:
                refusals.append("HTTP \(response.status)" + (said.isEmpty ? "" : ": \(said)"))
                guard refusals.count < Self.mintsPerAttempt else {
                    throw .permanent("minted-target-refused", """
                        \(shown): the storage refused \(refusals.count) freshly minted targets in a row \
                        (\(refusals.joined(separator: "; "))); the backend mints URLs the storage does not accept \
                        (its keys, clock or policy): fix it, then `uploadq retry \(job.id)`
                        """)
                }
            case 413:
                bodyLimit.refused(length)
                throw tooLarge(length, refused: length, sent: true)
            default:
                throw Self.minted(response, request: shown, destination: destination.name)
            }
        }
    }

    /// The verdict for a minted target's answer, from the status and the storage's own code and words (never the
    /// raw body, which may echo the URL).
    static func minted(_ response: HTTPResponse, request: String, destination: String) -> TransferFailure {
        var failure: TransferFailure
        if S3ErrorReply(response) != nil {
            // S3's own codes decide (a 400 `RequestTimeout` or `BadDigest` is retried, not a verdict on the file).
            failure = S3ErrorReply.failure(for: response, request: request, destination: destination,
                                           bucket: "(the backend's)")
        } else {
            var cleaned = response
            cleaned.body = Array(response.bodySummary.utf8)
            failure = FailureClassifier.failure(for: cleaned, request: request, destination: destination)
        }
        failure.message = URLRedaction.withoutQueries(failure.message)
        return failure
    }

    /// A body the server refuses by its size: a whole file cannot be cut, so it fails for good, the limit named.
    private func tooLarge(_ length: Int64, refused: Int64, sent: Bool) -> TransferFailure {
        guard sent else {
            // Only remembered: the job waits until the refusal is forgotten, then it is tried once.
            return TransferFailure(.transient(retryAfter: .seconds(bodyLimit.refusalRemaining ?? 60)), code: "too-large",
                "the request body is \(length) bytes and the server refused one of \(refused) bytes less than an hour "
                + "ago (HTTP 413): nothing was sent, and it is tried once that refusal is an hour old")
        }
        let learnt = "the server refused it (HTTP 413)"
        return .permanent("too-large", """
            the request body is \(length) bytes and \(learnt): a whole-file \(destination.transferProtocol.rawValue) \
            upload cannot be cut into smaller requests. Raise the server's (or its proxy's) body limit, or use a \
            chunked protocol (tus, rufh) for files this large, then `uploadq retry`
            """)
    }

    /// A `HEAD` on the URL's fixed part (before its first placeholder) tells whether the server is up.
    func probe() async -> Bool {
        await client.answers("HEAD", destination.serverURL ?? destination.url)
    }

    /// Sends the file along `route`: to the template's URL, in the request `build` makes of it, or to the target the
    /// backend mints (see `uploadMinted`).
    func upload(_ context: TransferContext, route: WholeFileRoute,
                build: (Job, SourceFile, URLTemplate) -> Request) async throws(TransferFailure) -> UploadOutcome {
        switch route {
        case .template(let url): try await upload(context) { job, source in build(job, source, url) }
        case .minted(let minter): try await uploadMinted(context, minter: minter)
        }
    }

    /// Whether what `route` sends to answers: the server, or the minting backend.
    func probe(_ route: WholeFileRoute) async -> Bool {
        switch route {
        case .template: await probe()
        case .minted(let minter): await minter.answers()
        }
    }
}
