import Foundation

/// Uploads to a tus 1.0 server in `chunk_size` PATCH requests, resuming at the server's offset after any crash.
///
/// The upload URL is persisted before the first data byte and the confirmed offset after every PATCH, so a
/// kill -9 costs at most the chunk in flight. The server's offset is the truth: HEAD on resume, one HEAD resync
/// on 409, a new upload when the old one is gone (404/410).
///
/// Proof of receipt: the creation is answered `201` with a `Location`, every PATCH `204` with the new
/// `Upload-Offset`, the last one the file's size, and every answer carries `Tus-Resumable` (as tus requires of all
/// but OPTIONS). Anything else that claims success (a portal's `200`, a proxy's page) is `unverified`.
struct TusUploader: Uploader {
    let destination: Destination
    let settings: TusSettings
    let client: DestinationClient
    let discovery = TusDiscovery()
    /// What the destination's server taught with 413s, shared by its transfers and kept in the queue.
    let bodyLimit: RequestBodyLimit
    /// The smallest PATCH a 413 halves down to.
    static let minimumChunkSize: Int64 = 1024
    /// How often one chunk is sent again after the server reported a checksum mismatch (460).
    var checksumRetries = 3

    init(destination: Destination, settings: TusSettings, engine: TransferEngine, bodyLimit: RequestBodyLimit? = nil) {
        self.destination = destination
        self.settings = settings
        self.bodyLimit = bodyLimit ?? RequestBodyLimit(destination: destination.name)
        client = DestinationClient(destination: destination, engine: engine)
    }

    private var endpoint: String { settings.endpoint }
    private static let version = HTTPHeader("Tus-Resumable", "1.0.0")

    func upload(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome {
        do {
            return try await transfer(context)
        } catch {
            // What a failing server or a portal said of itself (OPTIONS) is asked again next time.
            if error.destinationFault || error.isUnverified { await discovery.forget() }
            throw error
        }
    }

    private func transfer(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome {
        let job = context.job
        let previous = TusResumeState(json: job.resumeState)
        let source: SourceFile
        do {
            source = try SourceFile(job: job)
        } catch {
            if error.code == "source-changed", let previous {
                try await abandon(previous, context: context)
            }
            throw error
        }
        try context.checkConstraints()
        let server = try await discovery.server(client, endpoint: endpoint)
        var state: TusResumeState
        var offset: Int64
        if let previous, let found = try await locate(previous, job: job, context: context) {
            (state, offset) = (previous, found)
        } else {
            (state, offset) = try await create(job: job, source: source, server: server, context: context)
        }
        try await context.resumed(offset)
        // A job hashed while sending: what an earlier attempt sent is read once here, the rest as it goes out.
        try await source.hashPrefix(upTo: offset)

        // The cap of this attempt: a 413 lowers it here too, whatever the shared, expiring memory says.
        var attemptCap = bodyLimit.chunkCap ?? .max
        var resyncedSinceProgress = false
        var recreated = false
        var checksumFailures = 0
        var stalledAcknowledgements = 0
        while offset < job.size {
            if Task.isCancelled { throw .interrupted }
            try context.checkConstraints()
            let length = min(settings.chunkSize, attemptCap, bodyLimit.chunkCap ?? .max, job.size - offset)
            var headers = [Self.version, HTTPHeader("Upload-Offset", String(offset)),
                           HTTPHeader("Content-Type", "application/offset+octet-stream")]
            if server.acceptsSHA1Checksums {
                headers.append(HTTPHeader("Upload-Checksum",
                    try await FileRangeDigest.tusChecksum(of: source, offset: offset, length: length)))
            }
            let start = offset
            let response = try await client.send("PATCH", state.uploadURL, headers: headers,
                                                 body: .source(source, offset: offset, length: length),
                                                 paced: true, progress: { context.sent(start + $0) })
            switch response.status {
            case 204:
                try provenTus(response, request: "PATCH", url: state.uploadURL)
                let acknowledged = try offsetHeader(response, request: "PATCH", url: state.uploadURL)
                guard acknowledged <= offset + length else {
                    if acknowledged > job.size {
                        try await abandon(state, context: context, terminate: false)
                        throw beyondFile(acknowledged, job: job, url: state.uploadURL)
                    }
                    throw badReply("PATCH", state.uploadURL, "acknowledged offset \(acknowledged) although only "
                        + "\(offset + length) bytes were sent")
                }
                if acknowledged <= offset {
                    // Accepted but nothing kept: a server (or a box on the way) that drops bodies. Resending the
                    // same chunk forever would never end.
                    stalledAcknowledgements += 1
                    guard stalledAcknowledgements < 3 else {
                        throw badReply("PATCH", state.uploadURL, "the server kept none of the last "
                            + "\(stalledAcknowledgements) chunks (offset stays at \(acknowledged))")
                    }
                } else {
                    stalledAcknowledgements = 0
                    resyncedSinceProgress = false
                }
                offset = acknowledged
                if let expires = response.header("Upload-Expires") { state.expires = expires }
                try await context.confirmed(offset, state.json)
                try await ensureUnchanged(source, state: state, context: context)
                checksumFailures = 0
            case 409:
                guard !resyncedSinceProgress else {
                    throw TransferFailure(.transient(retryAfter: nil), code: "offset-conflict",
                        "PATCH \(redacted(state.uploadURL)) answered 409 again at offset \(offset), also after a "
                        + "resync; trying again later")
                }
                resyncedSinceProgress = true
                guard let found = try await locate(state, job: job, context: context) else {
                    throw TransferFailure(.transient(retryAfter: nil), code: "upload-gone",
                        "the upload \(redacted(state.uploadURL)) disappeared during a resync; a new one starts next time")
                }
                offset = found
                try await source.hashPrefix(upTo: offset)
                try await context.confirmed(offset, state.json)
            case 460:
                checksumFailures += 1
                guard checksumFailures <= checksumRetries else {
                    throw .transient("checksum-mismatch", "the server rejected the checksum of the chunk at offset "
                        + "\(offset) \(checksumFailures) times (HTTP 460); the data may be corrupted on the way")
                }
            case 404, 410:
                guard !recreated else {
                    throw TransferFailure(.transient(retryAfter: nil), code: "upload-gone",
                        "the new upload \(redacted(state.uploadURL)) is gone again (HTTP \(response.status))",
                        destinationFault: true)
                }
                recreated = true
                resyncedSinceProgress = false
                try await context.forgetResumeState()
                (state, offset) = try await create(job: job, source: source, server: server, context: context)
                try await context.resumed(offset)
            case 200..<300:
                throw notTus(response, request: "PATCH", url: state.uploadURL, expected: "204 No Content")
            case 412:
                throw versionRefused(response, request: "PATCH")
            case 413:
                // A proxy's body cap: half the chunk, kept for the destination's next files.
                guard length > Self.minimumChunkSize else {
                    throw .permanent("too-large", "the server at \(redacted(state.uploadURL)) refuses PATCH bodies of "
                        + "\(length) bytes (HTTP 413); raise the limit of the server or of the proxy in front of it, "
                        + "then `uploadq retry`")
                }
                attemptCap = max(Self.minimumChunkSize, length / 2)
                bodyLimit.capChunks(at: attemptCap)
            default:
                throw client.failure(for: response, request: "PATCH \(redacted(state.uploadURL))")
            }
        }
        if job.size == 0 { try await context.confirmed(0, state.json) }
        try await ensureUnchanged(source, state: state, context: context)
        return UploadOutcome(remoteURL: destination.remoteURL(for: job, serverURL: state.uploadURL),
                             sha256: try await source.sentDigest())
    }

    /// Asks the server where an earlier upload stands: its offset, or nil when it is gone (404/410/403) or does
    /// not match the file (another length); such an upload is forgotten.
    private func locate(_ state: TusResumeState, job: Job, context: TransferContext) async throws(TransferFailure)
        -> Int64?
    {
        let response = try await client.send("HEAD", state.uploadURL, headers: [Self.version])
        switch response.status {
        case 200, 204:
            try provenTus(response, request: "HEAD", url: state.uploadURL)
            let offset = try offsetHeader(response, request: "HEAD", url: state.uploadURL)
            if let length = response.header("Upload-Length").flatMap({ Int64($0) }), length != job.size {
                try await abandon(state, context: context)
                return nil
            }
            guard offset <= job.size else {
                try await abandon(state, context: context, terminate: false)
                throw beyondFile(offset, job: job, url: state.uploadURL)
            }
            return offset
        case 403, 404, 410:
            try await context.forgetResumeState()
            return nil
        case 412:
            throw versionRefused(response, request: "HEAD")
        default:
            throw client.failure(for: response, request: "HEAD \(redacted(state.uploadURL))")
        }
    }

    /// Creates a new upload and persists its URL before any data is sent, so a creation cut off at any point
    /// leaves at most an empty upload behind, never a second copy of the file. With `creation_with_upload` a
    /// file of one chunk or less goes in the creation request itself (one round trip less, at that risk).
    private func create(job: Job, source: SourceFile, server: TusServer, context: TransferContext)
        async throws(TransferFailure) -> (TusResumeState, Int64)
    {
        if let maximum = server.maximumSize, job.size > maximum {
            throw .permanent("too-large", "the file is \(job.size) bytes; the tus server at \(redacted(endpoint)) "
                + "takes at most \(maximum) (Tus-Max-Size); nothing was sent")
        }
        var headers = [Self.version, HTTPHeader("Upload-Length", String(job.size)),
                       HTTPHeader("Upload-Metadata", TusMetadata.header(for: job))]
        let withData = settings.creationWithUpload && server.supportsCreationWithUpload && job.size > 0
            && job.size <= min(settings.chunkSize, bodyLimit.chunkCap ?? .max)
        var body = RequestBody.empty
        if withData {
            headers.append(HTTPHeader("Content-Type", "application/offset+octet-stream"))
            if server.acceptsSHA1Checksums {
                headers.append(HTTPHeader("Upload-Checksum",
                    try await FileRangeDigest.tusChecksum(of: source, offset: 0, length: job.size)))
            }
            body = .source(source, offset: 0, length: job.size)
        }
        let response = try await client.send("POST", endpoint, headers: headers, body: body, paced: withData,
                                             progress: { context.sent($0) })
        switch response.status {
        case 201:
            try provenTus(response, request: "POST", url: endpoint)
        case 200..<300:
            throw notTus(response, request: "POST", url: endpoint, expected: "201 Created")
        case 412:
            throw versionRefused(response, request: "POST")
        case 413 where withData && job.size > Self.minimumChunkSize:
            // The body cap refused the file in the creation: learnt, and the upload created without it.
            bodyLimit.capChunks(at: max(Self.minimumChunkSize, job.size / 2))
            return try await create(job: job, source: source, server: server, context: context)
        default:
            throw client.failure(for: response, request: "POST \(redacted(endpoint))")
        }
        guard let location = response.header("Location"), !location.isEmpty else {
            throw .unverified("""
                POST \(redacted(endpoint)) answered HTTP \(response.status) without a Location: no upload was created \
                that uploadq could use (a proxy answered, or the server does not speak tus); it is tried again later
                """)
        }
        guard let uploadURL = response.location(resolvedAgainst: endpoint) else {
            throw badReply("POST", endpoint, "Location \"\(location.prefix(200))\" is not a usable URL")
        }
        // Before it is kept: an upload URL on plain http behind an https endpoint is never used.
        try client.check(uploadURL)
        var state = TusResumeState(uploadURL: uploadURL)
        state.expires = response.header("Upload-Expires")
        var offset: Int64 = 0
        if withData, let acknowledged = response.header("Upload-Offset") {
            guard let value = Int64(acknowledged), value >= 0, value <= job.size else {
                throw badReply("POST", endpoint, "Upload-Offset \"\(acknowledged.prefix(40))\" is not an offset "
                    + "within the file")
            }
            offset = value
        }
        try await context.confirmed(offset, state.json)
        return (state, offset)
    }

    /// Forgets an upload that cannot be continued, terminating it on the server when it allows that.
    private func abandon(_ state: TusResumeState, context: TransferContext, terminate: Bool = true)
        async throws(TransferFailure)
    {
        if terminate { await self.terminate(state.uploadURL) }
        try await context.forgetResumeState()
    }

    /// A `reference` file that changed during the upload poisons it: the upload is terminated and forgotten.
    private func ensureUnchanged(_ source: SourceFile, state: TusResumeState, context: TransferContext)
        async throws(TransferFailure)
    {
        do {
            try source.verifyUnchanged()
        } catch {
            try? await abandon(state, context: context)
            throw error
        }
    }

    /// Terminates an upload on the server when it offers termination; runs to the end even when the calling
    /// task is being cancelled.
    private func terminate(_ uploadURL: String) async {
        let discovery = self.discovery
        let client = self.client
        let endpoint = self.endpoint
        await Task {
            guard let server = try? await discovery.server(client, endpoint: endpoint), server.supportsTermination else {
                return
            }
            _ = try? await client.send("DELETE", uploadURL, headers: [Self.version])
        }.value
    }

    func discard(_ job: Job) async {
        guard let state = TusResumeState(json: job.resumeState) else { return }
        await terminate(state.uploadURL)
    }

    func probe() async -> Bool {
        await discovery.forget()
        return await client.answers("OPTIONS", endpoint, headers: [Self.version])
    }

    /// A tus server's answer carries `Tus-Resumable`; one without it came from something else (a portal, a proxy).
    private func provenTus(_ response: HTTPResponse, request: String, url: String) throws(TransferFailure) {
        guard response.header("Tus-Resumable") == nil else { return }
        throw .unverified("""
            \(request) \(redacted(url)) answered HTTP \(response.status) without Tus-Resumable, which every tus answer \
            carries: a proxy or a portal answered, not the tus server; the upload resumes from the server's offset \
            once it answers
            """)
    }

    /// A success that is not the one tus gives: no verdict.
    private func notTus(_ response: HTTPResponse, request: String, url: String, expected: String) -> TransferFailure {
        .unverified("""
            \(request) \(redacted(url)) answered HTTP \(response.status) where a tus server answers \(expected): a proxy \
            or a portal answered, not the tus server; the upload resumes from the server's offset once it answers
            """)
    }

    private func offsetHeader(_ response: HTTPResponse, request: String, url: String) throws(TransferFailure) -> Int64 {
        guard let text = response.header("Upload-Offset") else {
            throw badReply(request, url, "no Upload-Offset header in the HTTP \(response.status) answer")
        }
        guard let offset = Int64(text), offset >= 0 else {
            throw badReply(request, url, "Upload-Offset \"\(text.prefix(40))\" is not a number")
        }
        return offset
    }

    private func beyondFile(_ offset: Int64, job: Job, url: String) -> TransferFailure {
        ResumableFailure.beyondFile(offset, job: job, url: url, server: "tus server")
    }

    private func badReply(_ request: String, _ url: String, _ detail: String) -> TransferFailure {
        ResumableFailure.badReply(request, url, detail, protocolName: "tus")
    }

    private func versionRefused(_ response: HTTPResponse, request: String) -> TransferFailure {
        let versions = response.header("Tus-Version") ?? "unknown versions"
        return .permanent("tus-version", "the tus server refused protocol 1.0.0 on \(request) (HTTP 412); it speaks "
            + "\(versions)")
    }

    private func redacted(_ url: String) -> String { URLRedaction.redact(url) }
}
