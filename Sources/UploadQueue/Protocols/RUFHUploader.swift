import Foundation

/// Uploads with IETF Resumable Uploads for HTTP (draft-ietf-httpbis-resumable-upload; interop versions 6, 7
/// and 8): the successor of tus that Apple's URLSession and tusd speak.
///
/// Creation is careful: an empty `POST` with `Upload-Complete: ?0` gets the upload URL, which is persisted before
/// any data goes out, so a creation cut off at any point leaves at most an empty upload, never a second copy.
/// The file then goes in `PATCH` appends of `chunk_size`, within the server's `Upload-Limit`, the last one with
/// `Upload-Complete: ?1` and the file's `Repr-Digest`. The server's offset is the truth: `HEAD` on resume (never
/// while an append is in flight: each attempt sends one request at a time), a resync to the offset a `409`
/// carries, a new upload when the old one is gone (404/410) or past its `max-age`. A `413` halves the body size,
/// down to 1 KiB or the server's `min-append-size`, and the size that passed is kept for the next files.
///
/// With `creation_with_upload`, a file of one append or less goes whole in its creation request instead, marked
/// complete: one request a file. It trades that guarantee away: a request cut off after the server took the whole
/// file, before its answer, leaves an upload uploadq cannot name (the server's `104` named it, but only the answer
/// brings it), and the file is sent again as a second upload.
///
/// Proof of receipt: the creation is answered with a `Location`, every append's 2xx carries the draft's fields
/// (`Upload-Offset` or `Upload-Complete`), and the completing append (interop 7 and 8) `Upload-Complete: ?1`, or a
/// `HEAD` shows the upload complete at the file's size. Interop 6 gives its completing append's answer to the
/// resource, so its 2xx (never an HTML page) is the proof. Anything else that claims success is `unverified`.
struct RUFHUploader: Uploader {
    let destination: Destination
    let settings: RUFHSettings
    let client: DestinationClient
    let discovery = RUFHDiscovery()
    /// What the destination's server taught with 413s, shared by its transfers and kept in the queue.
    let bodyLimit: RequestBodyLimit
    /// The smallest body a 413 halves down to.
    static let minimumAppendSize: Int64 = 1024
    /// 409 resyncs one attempt takes before it gives up (a server whose offset never settles).
    static let resyncsPerAttempt = 10

    init(destination: Destination, settings: RUFHSettings, engine: TransferEngine, bodyLimit: RequestBodyLimit? = nil) {
        self.destination = destination
        self.settings = settings
        self.bodyLimit = bodyLimit ?? RequestBodyLimit(destination: destination.name)
        client = DestinationClient(destination: destination, engine: engine)
    }

    private var endpoint: String { settings.endpoint }
    private var version: HTTPHeader { HTTPHeader("Upload-Draft-Interop-Version", String(settings.interopVersion)) }

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
        var previous = RUFHResumeState(json: job.resumeState)
        if previous?.interopVersion != settings.interopVersion { previous = nil }
        let source: SourceFile
        do {
            source = try SourceFile(job: job)
        } catch {
            if error.code == "source-changed", let previous {
                await cancel(previous.uploadURL)
                try await context.forgetResumeState()
            }
            throw error
        }
        try context.checkConstraints()
        var state: RUFHResumeState
        var offset: Int64
        // A stored upload is always asked about, even past its max-age: its completing append's answer may have been
        // lost, and only the server knows.
        if let previous, let found = try await locate(previous, job: job, context: context) {
            state = found.state
            offset = found.offset
            if found.complete {
                return try await finished(context, state: state, source: source)
            }
        } else if let previous, previous.completing == true {
            throw completionUnverified(previous, job: job)
        } else {
            if previous != nil { try await context.forgetResumeState() }
            if let outcome = try await createComplete(job: job, source: source, context: context) { return outcome }
            (state, offset) = try await create(job: job, context: context)
            if job.size == 0 { return try await finished(context, state: state, source: source) }
        }
        try await context.resumed(offset)
        // A job hashed while sending: what an earlier attempt sent is read once here, the rest as it goes out.
        try await source.hashPrefix(upTo: offset)

        // Where the last 409 put the upload: a later 409 must find the server further on, or it is not moving.
        var lastResync: Int64?
        var repeatedResyncs = 0
        var resyncs = 0
        var recreated = false
        var contradictions = 0
        var emptyAcknowledgements = 0
        while true {
            if Task.isCancelled { throw .interrupted }
            try context.checkConstraints()
            let preferred = min(settings.chunkSize, state.appendCap ?? .max, bodyLimit.chunkCap ?? .max)
            let length = (state.limit ?? UploadLimit()).appendLength(remaining: job.size - offset, preferred: preferred)
            let completes = offset + length == job.size
            var headers = [version, HTTPHeader("Content-Type", "application/partial-upload"),
                           HTTPHeader("Upload-Offset", String(offset)),
                           HTTPHeader("Upload-Complete", StructuredField.text(completes))]
            if completes, let digest = Self.reprDigest(sha256: job.sha256) { headers.append(digest) }
            if completes, state.completing != true {
                state.completing = true
                try await context.confirmed(offset, state.json)
            }
            let start = offset
            let response = try await client.send("PATCH", state.uploadURL, headers: headers,
                                                 body: .source(source, offset: offset, length: length),
                                                 paced: true, progress: { context.sent(start + $0) })
            switch response.status {
            case 200..<300:
                state.note(UploadLimit(response))
                let stated = try offsetField(response, request: "PATCH", url: state.uploadURL)
                if completes {
                    let said = StructuredField.boolean(response.header("Upload-Complete"))
                    guard said != false, stated == nil || stated == job.size else {
                        throw badReply("PATCH", state.uploadURL, "the completing append was answered HTTP "
                            + "\(response.status) without completing the upload (Upload-Complete: ?0 or "
                            + "Upload-Offset \(stated ?? -1) of \(job.size))")
                    }
                    if said == nil, settings.interopVersion >= 7 {
                        // Interop 7 and 8 say `Upload-Complete: ?1`; without it, the server is asked.
                        guard let found = try await locate(state, job: job, context: context), found.complete,
                              found.offset == job.size else {
                            throw .unverified("""
                                PATCH \(redacted(state.uploadURL)) answered HTTP \(response.status) to the completing \
                                append without Upload-Complete: ?1, and HEAD does not show the upload complete: a proxy \
                                or a portal answered; the upload resumes from the server's offset once it answers
                                """)
                        }
                    }
                    return try await finished(context, state: state, source: source)
                }
                guard stated != nil || response.header("Upload-Complete") != nil else {
                    throw .unverified("""
                        PATCH \(redacted(state.uploadURL)) answered HTTP \(response.status) without Upload-Offset or \
                        Upload-Complete, which a resumable-upload server's answer to an append carries: a proxy or a \
                        portal answered; the upload resumes from the server's offset once it answers
                        """)
                }
                // Interop 6 answers the new offset; 7 and later may leave it out, meaning all of the body.
                let acknowledged = stated ?? (offset + length)
                guard acknowledged >= offset, acknowledged <= offset + length else {
                    throw badReply("PATCH", state.uploadURL, "Upload-Offset \(acknowledged) after sending bytes "
                        + "\(offset) to \(offset + length)")
                }
                if acknowledged == offset {
                    emptyAcknowledgements += 1
                    guard emptyAcknowledgements < 3 else {
                        throw badReply("PATCH", state.uploadURL, "the server kept none of the last "
                            + "\(emptyAcknowledgements) appends (offset stays at \(acknowledged))")
                    }
                } else {
                    emptyAcknowledgements = 0
                    resyncs = 0
                }
                offset = acknowledged
                try await context.confirmed(offset, state.json)
                try await ensureUnchanged(source, state: state, context: context)
            case 409:
                resyncs += 1
                // The 409 says where the server stands (Upload-Offset, or the problem's expected-offset); a
                // server that says neither is asked with HEAD.
                var serverOffset = try offsetField(response, request: "PATCH", url: state.uploadURL)
                    ?? Self.expectedOffset(problem: response.body)
                if serverOffset == nil {
                    guard let found = try await locate(state, job: job, context: context) else {
                        throw TransferFailure(.transient(retryAfter: nil), code: "upload-gone",
                            "the upload \(redacted(state.uploadURL)) disappeared during a resync; a new one starts "
                            + "next time")
                    }
                    if found.complete { return try await finished(context, state: found.state, source: source) }
                    state = found.state
                    serverOffset = found.offset
                }
                let resynced = serverOffset ?? offset
                guard resynced <= job.size else { throw beyondFile(resynced, job: job, url: state.uploadURL) }
                // A 409 back at the same place twice more (a server or proxy that drops bodies while answering 2xx)
                // ends the attempt instead of looping; once is an append the server lost, and is sent again.
                if let lastResync, resynced <= lastResync { repeatedResyncs += 1 } else { repeatedResyncs = 0 }
                guard resyncs <= Self.resyncsPerAttempt, repeatedResyncs < 2 else {
                    throw TransferFailure(.transient(retryAfter: nil), code: "offset-conflict",
                        "PATCH \(redacted(state.uploadURL)) answered 409 back at offset \(resynced) again "
                        + "(\(resyncs) resyncs without progress); trying again later")
                }
                lastResync = resynced
                offset = resynced
                try await source.hashPrefix(upTo: offset)
                try await context.confirmed(offset, state.json)
            case 413:
                let smaller = try smallerAppend(after: length, response: response, state: &state)
                bodyLimit.capChunks(at: smaller)
                try await context.confirmed(offset, state.json)
            case 404, 410:
                // Gone, or complete already (interop 8 answers 410 to an append after completion): the server
                // says which.
                if let found = try await locate(state, job: job, context: context) {
                    if found.complete { return try await finished(context, state: found.state, source: source) }
                    // Refused as gone, yet there by HEAD: once is a race with the server's bookkeeping, again is a
                    // server that contradicts itself, and is tried later rather than in a loop.
                    contradictions += 1
                    guard contradictions < 2 else {
                        throw badReply("PATCH", state.uploadURL, "the append was answered HTTP \(response.status), "
                            + "yet HEAD finds the upload at offset \(found.offset)")
                    }
                    (state, offset) = (found.state, found.offset)
                    try await source.hashPrefix(upTo: offset)
                    try await context.confirmed(offset, state.json)
                    continue
                }
                if state.completing == true { throw completionUnverified(state, job: job) }
                guard !recreated else {
                    throw TransferFailure(.transient(retryAfter: nil), code: "upload-gone",
                        "the new upload \(redacted(state.uploadURL)) is gone again (HTTP \(response.status))",
                        destinationFault: true)
                }
                recreated = true
                lastResync = nil
                (state, offset) = try await create(job: job, context: context)
                try await context.resumed(offset)
            default:
                throw client.failure(for: response, request: "PATCH \(redacted(state.uploadURL))")
            }
        }
    }

    /// Asks the server where an earlier upload stands; nil when it is gone (404/410) or does not match the file
    /// (another length), and such an upload is forgotten. Any other answer is a failure (a 403 included: the
    /// credentials, not the upload, are wrong).
    private func locate(_ state: RUFHResumeState, job: Job, context: TransferContext) async throws(TransferFailure)
        -> (state: RUFHResumeState, offset: Int64, complete: Bool)?
    {
        let response = try await client.send("HEAD", state.uploadURL, headers: [version])
        switch response.status {
        case 200, 204:
            guard let offset = try offsetField(response, request: "HEAD", url: state.uploadURL),
                  let complete = StructuredField.boolean(response.header("Upload-Complete")) else {
                throw .unverified("""
                    HEAD \(redacted(state.uploadURL)) answered HTTP \(response.status) without Upload-Offset and \
                    Upload-Complete, which a resumable-upload server's answer carries: a proxy or a portal answered; \
                    the upload resumes from the server's offset once it answers
                    """)
            }
            if let length = StructuredField.integer(response.header("Upload-Length")), length != job.size {
                await cancel(state.uploadURL)
                try await context.forgetResumeState()
                return nil
            }
            guard offset <= job.size, !complete || offset == job.size else {
                await cancel(state.uploadURL)
                try await context.forgetResumeState()
                throw beyondFile(offset, job: job, url: state.uploadURL)
            }
            var updated = state
            updated.note(UploadLimit(response))
            return (updated, offset, complete)
        case 404, 410:
            try await context.forgetResumeState()
            return nil
        default:
            throw client.failure(for: response, request: "HEAD \(redacted(state.uploadURL))")
        }
    }

    /// Careful creation: an empty request that only makes the upload, whose URL is persisted before any data is
    /// sent. An empty file is created complete in the same request.
    private func create(job: Job, context: TransferContext) async throws(TransferFailure) -> (RUFHResumeState, Int64) {
        let announced = try await discovery.limit(client, endpoint: endpoint, version: version)
        if let maximum = announced?.maximumSize, job.size > maximum {
            throw tooLarge(job, maximum: maximum)
        }
        let empty = job.size == 0
        var headers = [version, HTTPHeader("Upload-Complete", StructuredField.text(empty)),
                       HTTPHeader("Upload-Length", String(job.size))]
        if empty, let digest = Self.reprDigest(sha256: job.sha256) { headers.append(digest) }
        let response = try await client.send("POST", endpoint, headers: headers)
        guard (200..<300).contains(response.status) else {
            if response.status == 413, let maximum = UploadLimit(response)?.maximumSize, job.size > maximum {
                throw tooLarge(job, maximum: maximum)
            }
            throw client.failure(for: response, request: "POST \(redacted(endpoint))")
        }
        guard let location = response.header("Location"), !location.isEmpty else {
            if empty {
                // Created complete in one request: its answer is the completion's, and interop 7 and 8 say so.
                guard settings.interopVersion < 7 || StructuredField.boolean(response.header("Upload-Complete")) == true
                else {
                    throw .unverified("""
                        POST \(redacted(endpoint)) answered HTTP \(response.status) to the creation of an empty, \
                        complete upload without Upload-Complete: ?1: a proxy or a portal answered; it is tried again later
                        """)
                }
                return (RUFHResumeState(uploadURL: endpoint, interopVersion: settings.interopVersion), 0)
            }
            throw .unverified("""
                POST \(redacted(endpoint)) answered HTTP \(response.status) to an upload creation without a Location: \
                no upload was created that uploadq could use (a proxy answered, or the server does not speak \
                resumable uploads, interop version \(settings.interopVersion): check protocol and interop_version of \
                destination "\(destination.name)"); it is tried again later
                """)
        }
        guard let uploadURL = response.location(resolvedAgainst: endpoint) else {
            throw badReply("POST", endpoint, "Location \"\(location.prefix(200))\" is not a usable URL")
        }
        // Before it is kept: an upload URL on plain http behind an https endpoint is never used.
        try client.check(uploadURL)
        let state = RUFHResumeState(uploadURL: uploadURL, interopVersion: settings.interopVersion,
                                    limit: UploadLimit(response) ?? announced)
        if let maximum = state.limit?.maximumSize, job.size > maximum {
            await cancel(uploadURL)
            throw tooLarge(job, maximum: maximum)
        }
        try await context.confirmed(0, state.json)
        return (state, 0)
    }

    /// With `creation_with_upload`: the whole file in its creation request, marked complete, proven by the answer as
    /// a completing append is (interop 7 and 8: `Upload-Complete: ?1`, or a `HEAD` of the upload it names showing it
    /// complete; interop 6: its 2xx, never an HTML page, naming the upload or carrying `Upload-Offset`). Nil when the
    /// file is empty or larger than one append (`chunk_size`, the server's `max-append-size`, what a 413 taught), or
    /// when a 413 refuses it now: the careful creation follows. The upload's URL is the answer's `Location`, or the
    /// `104`'s.
    private func createComplete(job: Job, source: SourceFile, context: TransferContext)
        async throws(TransferFailure) -> UploadOutcome?
    {
        guard settings.creationWithUpload, job.size > 0 else { return nil }
        let announced = try await discovery.limit(client, endpoint: endpoint, version: version)
        if let maximum = announced?.maximumSize, job.size > maximum { throw tooLarge(job, maximum: maximum) }
        guard job.size <= min(settings.chunkSize, announced?.maximumAppendSize ?? .max, bodyLimit.chunkCap ?? .max)
        else { return nil }
        var headers = [version, HTTPHeader("Content-Type", job.contentType),
                       HTTPHeader("Upload-Complete", StructuredField.text(true)),
                       HTTPHeader("Upload-Length", String(job.size))]
        if let digest = Self.reprDigest(sha256: job.sha256) { headers.append(digest) }
        try await context.resumed(0)
        let response = try await client.send("POST", endpoint, headers: headers,
                                             body: .source(source, offset: 0, length: job.size), paced: true,
                                             progress: { context.sent($0) })
        switch response.status {
        case 200..<300:
            break
        case 413 where job.size > Self.minimumAppendSize:
            if let maximum = UploadLimit(response)?.maximumSize, job.size > maximum { throw tooLarge(job, maximum: maximum) }
            // The body cap refused the file whole: learnt, and the careful creation sends it in smaller appends.
            bodyLimit.capChunks(at: max(Self.minimumAppendSize, job.size / 2))
            return nil
        default:
            throw client.failure(for: response, request: "POST \(redacted(endpoint))")
        }
        let said = StructuredField.boolean(response.header("Upload-Complete"))
        let stated = try offsetField(response, request: "POST", url: endpoint)
        guard said != false, stated == nil || stated == job.size else {
            throw badReply("POST", endpoint, "the creation of a complete upload was answered HTTP \(response.status) "
                + "without completing it (Upload-Complete: ?0 or Upload-Offset \(stated ?? -1) of \(job.size))")
        }
        let named = response.location(resolvedAgainst: endpoint) ?? response.resumptionLocation(resolvedAgainst: endpoint)
        // An upload URL that would take an https destination to plain http is neither asked nor kept (the file is
        // on the server already: refusing the answer for it would only send the file again).
        let uploadURL = named.flatMap { (try? client.check($0)) == nil ? nil : $0 }
        var state = RUFHResumeState(uploadURL: uploadURL ?? endpoint, interopVersion: settings.interopVersion)
        if said == nil {
            // Interop 7 and 8 say `Upload-Complete: ?1`; without it, the upload the answer named is asked. Interop 6's
            // answer is the resource's, but one that names no upload and carries no field of the draft could have
            // come from anything that answers 2xx.
            let proven: Bool
            if settings.interopVersion >= 7 {
                if let uploadURL, let found = try await locate(RUFHResumeState(uploadURL: uploadURL,
                                                                               interopVersion: settings.interopVersion),
                                                               job: job, context: context),
                   found.complete, found.offset == job.size {
                    state = found.state
                    proven = true
                } else {
                    proven = false
                }
            } else {
                proven = named != nil || stated != nil
            }
            guard proven else {
                throw .unverified("""
                    POST \(redacted(endpoint)) answered HTTP \(response.status) to the creation of a complete upload \
                    without Upload-Complete: ?1 or an upload it names that shows complete: a proxy or a portal answered, \
                    or the server does not name its uploads (then turn creation_with_upload off for destination \
                    "\(destination.name)"); it is tried again later
                    """)
            }
        }
        return try await finished(context, state: state, source: source)
    }

    /// The body size to try after a 413 on `length` bytes: the server's `max-append-size` when its answer gives
    /// one below, else half, never below 1 KiB or `min-append-size`.
    private func smallerAppend(after length: Int64, response: HTTPResponse, state: inout RUFHResumeState)
        throws(TransferFailure) -> Int64
    {
        let limit = UploadLimit(response)
        state.note(limit)
        let floor = max(Self.minimumAppendSize, state.limit?.minimumAppendSize ?? 0)
        var next = length / 2
        if let maximum = limit?.maximumAppendSize, maximum > 0, maximum < length { next = maximum }
        guard length > floor, next >= 1 else {
            throw .permanent("too-large", "the server at \(redacted(state.uploadURL)) refuses request bodies of "
                + "\(length) bytes (HTTP 413), and appends cannot be smaller than \(floor) bytes; raise the limit "
                + "of the server or the proxy in front of it, then `uploadq retry`")
        }
        next = max(next, floor)
        state.appendCap = next
        return next
    }

    /// The upload is complete on the server: the source is checked once more and the job confirmed whole.
    private func finished(_ context: TransferContext, state: RUFHResumeState, source: SourceFile)
        async throws(TransferFailure) -> UploadOutcome
    {
        let sha256 = try await source.sentDigest()
        try source.verifyUnchanged()
        try await context.confirmed(context.job.size, nil)
        return UploadOutcome(remoteURL: destination.remoteURL(for: context.job, serverURL: state.uploadURL),
                             sha256: sha256)
    }

    /// A `reference` file that changed during the upload poisons it: the upload is cancelled and forgotten.
    private func ensureUnchanged(_ source: SourceFile, state: RUFHResumeState, context: TransferContext)
        async throws(TransferFailure)
    {
        do {
            try source.verifyUnchanged()
        } catch {
            await cancel(state.uploadURL)
            try? await context.forgetResumeState()
            throw error
        }
    }

    /// `DELETE` on the upload; a server that does not cancel (405) or no longer knows it (404) is fine. Runs to
    /// the end even when the calling task is being cancelled.
    private func cancel(_ uploadURL: String) async {
        let client = self.client
        let version = self.version
        await Task { _ = try? await client.send("DELETE", uploadURL, headers: [version]) }.value
    }

    func discard(_ job: Job) async {
        guard let state = RUFHResumeState(json: job.resumeState), state.uploadURL != endpoint else { return }
        await cancel(state.uploadURL)
    }

    func probe() async -> Bool {
        await discovery.forget()
        return await client.answers("OPTIONS", endpoint, headers: [version])
    }

    /// `Repr-Digest: sha-256=:…:` (RFC 9530) for a job whose SHA-256 is known before its last byte is sent.
    static func reprDigest(sha256 hex: String) -> HTTPHeader? {
        guard hex.count == 64, let bytes = SHA256Digest.bytes(hex: hex) else { return nil }
        return HTTPHeader("Repr-Digest", "sha-256=:\(Data(bytes).base64EncodedString()):")
    }

    /// The `expected-offset` of a `mismatching-upload-offset` problem document (RFC 9457).
    static func expectedOffset(problem body: [UInt8]) -> Int64? {
        guard !body.isEmpty, body.count < 65536,
              let document = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
              let value = document["expected-offset"] as? NSNumber else { return nil }
        let offset = value.int64Value
        return offset >= 0 && value.doubleValue == Double(offset) ? offset : nil
    }

    private func offsetField(_ response: HTTPResponse, request: String, url: String) throws(TransferFailure) -> Int64? {
        guard let text = response.header("Upload-Offset") else { return nil }
        guard let offset = StructuredField.integer(text) else {
            throw badReply(request, url, "Upload-Offset \"\(text.prefix(40))\" is not a non-negative integer")
        }
        return offset
    }

    /// An upload the server no longer knows after its completing append was sent: it completed (its answer lost,
    /// the server forgetting completed uploads) or it expired. Neither losing the file nor sending it twice unasked
    /// is acceptable; the record is already forgotten, so `uploadq retry` sends it again.
    private func completionUnverified(_ state: RUFHResumeState, job: Job) -> TransferFailure {
        .permanent("completion-unverified", """
            the upload \(redacted(state.uploadURL)) is gone after its completing append was sent: it completed (its \
            answer lost) or expired. Check the server: if the file is there, nothing is missing; if not, `uploadq \
            retry \(job.id)` uploads it again
            """)
    }

    private func tooLarge(_ job: Job, maximum: Int64) -> TransferFailure {
        .permanent("too-large", "the file is \(job.size) bytes; the server at \(redacted(endpoint)) takes at most "
            + "\(maximum) (Upload-Limit max-size); nothing was sent")
    }

    private func beyondFile(_ offset: Int64, job: Job, url: String) -> TransferFailure {
        ResumableFailure.beyondFile(offset, job: job, url: url, server: "server")
    }

    private func badReply(_ request: String, _ url: String, _ detail: String) -> TransferFailure {
        ResumableFailure.badReply(request, url, detail, protocolName: "resumable-upload")
    }

    private func redacted(_ url: String) -> String { URLRedaction.redact(url) }
}

/// The `Upload-Limit` a resumable-upload endpoint announces in its `OPTIONS` answer, asked once and asked again
/// after errors that suggest a change; nil for a server that announces none (interop 6 servers of draft -04).
actor RUFHDiscovery {
    private var cached: UploadLimit??

    func limit(_ client: DestinationClient, endpoint: String, version: HTTPHeader) async throws(TransferFailure)
        -> UploadLimit?
    {
        if let cached { return cached }
        let response = try await client.send("OPTIONS", endpoint, headers: [version])
        let limit: UploadLimit?
        switch response.status {
        case 200..<300: limit = UploadLimit(response)
        // A server of draft -04, or a gateway that does not let OPTIONS through: no limit announced. (Refused
        // credentials and "slow down" are not that: they fail below, and are asked again next time.)
        case 400..<500 where ![401, 403, 408, 429].contains(response.status), 501: limit = nil
        default: throw client.failure(for: response, request: "OPTIONS \(URLRedaction.redact(endpoint))")
        }
        cached = .some(limit)
        return limit
    }

    func forget() {
        cached = nil
    }
}
