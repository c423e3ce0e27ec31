import Foundation

/// Uploads to an S3 bucket: one PutObject below `multipart_threshold`, a multipart upload above it that resumes
/// after any crash without sending again the parts the store already has.
///
/// The UploadId is persisted before the first part and each part's ETag as it is confirmed. On resume ListParts
/// is the authority: a part is kept when its size matches and, when its ETag is a plain MD5, its bytes match the
/// file. CompleteMultipartUpload's body is always read (a 200 can carry an `<Error>`), and an upload that is gone
/// after a Complete was sent is checked with HEAD: an object of the right size (and multipart ETag) means done.
/// Cancelling a job and failing it for good abort the multipart upload.
///
/// Proof of receipt, with `etag = "md5"` (the default): every PutObject and UploadPart goes with `Content-MD5`,
/// and its ETag must be that MD5; CompleteMultipartUpload's result must name the bucket, the key and the ETag the
/// parts make. With `etag = "opaque"`, a HEAD of the object must show its size (and the `x-amz-checksum-sha256` a
/// PutObject sent, where the store keeps it). An answer that proves nothing is `unverified`: no verdict.
struct S3MultipartUploader: Uploader {
    let destination: Destination
    let client: S3Client
    /// What the store (or a proxy in front of it) taught with 413s: parts no larger than its chunk cap.
    let bodyLimit: RequestBodyLimit
    /// Parts asked for per ListParts page (S3's own maximum is 1,000).
    var listPageSize = 1000

    init(destination: Destination, settings: S3Settings, engine: TransferEngine, bodyLimit: RequestBodyLimit? = nil) {
        self.destination = destination
        client = S3Client(destination: destination, settings: settings, engine: engine)
        self.bodyLimit = bodyLimit ?? RequestBodyLimit(destination: destination.name)
    }

    func upload(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome {
        var current = S3ResumeState(json: context.job.resumeState)
        do {
            return try await transfer(context, state: &current)
        } catch {
            // A job that failed for good leaves nothing behind, unless what failed is access (credentials,
            // signature, permissions, region): then the parts stay, and `uploadq retry` after the fix resumes the
            // same upload. A refused abort also keeps the record.
            // Parts too large for the store: this upload cannot go on, the next attempt makes one with smaller parts.
            if error.kind == .permanent && !Self.accessCodes.contains(error.code)
                || error.code == S3PartSender.partsTooLargeCode, let state = current, await abort(state) {
                try? await context.forgetResumeState()
            }
            throw error
        }
    }

    private func transfer(_ context: TransferContext, state current: inout S3ResumeState?)
        async throws(TransferFailure) -> UploadOutcome
    {
        let job = context.job
        let source = try SourceFile(job: job)
        try context.checkConstraints()
        if current == nil, job.size < client.settings.multipartThreshold {
            return try await putObject(context, source: source)
        }
        // Parts go in any order, several at once: a job hashed while sending is hashed beside them.
        source.hashBesideUpload()
        var plan: S3PartPlan
        var state: S3ResumeState
        if let previous = current {
            plan = S3PartPlan(size: job.size, fixedPartSize: previous.partSize)
            state = previous
            let allRecorded = Set(previous.parts.map(\.number)) == Set(1...plan.count)
            if !(previous.completing && allRecorded) {
                if let parts = try await listParts(previous) {
                    state.parts = try await S3PartSender.reconcile(parts, previous: previous, plan: plan, source: source,
                                                                   etags: client.settings.etags)
                    state.completing = false
                    current = state
                    try await context.confirmed(state.confirmedBytes, state.json)
                } else {
                    if previous.completing, try await objectIsComplete(previous, plan: plan) {
                        return try await finished(context, key: previous.key, source: source)
                    }
                    // Aborted or expired (a lifecycle rule): start again.
                    current = nil
                    try await context.forgetResumeState()
                    (state, plan) = try await create(context, key: previous.key)
                    current = state
                }
            }
        } else {
            (state, plan) = try await create(context, key: try objectKey(for: job))
            current = state
        }
        try await context.resumed(state.confirmedBytes)

        // Up to `part_concurrency` parts in flight; each ETag is saved as its part is confirmed, in whatever order.
        let sender = S3PartSender(transport: partTransport(context), source: source, context: context, plan: plan,
                                  concurrency: client.settings.partConcurrency, etags: client.settings.etags)
        try await sender.sendMissing(&state)
        state.completing = true
        current = state
        try await context.confirmed(state.confirmedBytes, state.json)
        try await complete(state, plan: plan, context: context)
        if client.settings.etags == .opaque {
            try await proveByHead(key: state.key, size: job.size, sha256: nil, request: "CompleteMultipartUpload")
        }
        return try await finished(context, key: state.key, source: source)
    }

    /// Failure codes that say access is wrong, not the upload: its parts are kept for a retry after the fix.
    static let accessCodes: Set<String> = ["credentials", "signature", "forbidden", "region", "unauthorized"]

    // MARK: Single request

    /// One PutObject, its payload signed with the SHA-256 intake computed and sent with its `Content-MD5` (the
    /// store checks both); a job hashed while sending is hashed by the same read as the MD5 (a file below
    /// `multipart_threshold`: a short read). Its answer must prove the object is stored (see the type's notes).
    private func putObject(_ context: TransferContext, source: SourceFile)
        async throws(TransferFailure) -> UploadOutcome
    {
        let job = context.job
        let key = try objectKey(for: job)
        try await context.resumed(0)
        let md5 = try await FileRangeDigest.digest(.md5, of: source, offset: 0, length: job.size)
        let payloadHash = try await source.sentDigest()
        var headers = S3ObjectHeaders.headers(for: job) + [HTTPHeader("Content-MD5", Data(md5).base64EncodedString())]
        let checksum = SHA256Digest.bytes(hex: payloadHash).map { Data($0).base64EncodedString() }
        if client.settings.etags == .opaque, let checksum {
            // The store keeps it with the object and shows it to a HEAD: the proof where ETags prove nothing.
            headers += [HTTPHeader("x-amz-sdk-checksum-algorithm", "SHA256"), HTTPHeader("x-amz-checksum-sha256", checksum)]
        }
        let request = "PUT \(client.describe(client.target(key: key)))"
        let response = try await client.send("PUT", key: key, headers: headers,
                                             body: .file(descriptor: source.descriptor, offset: 0, length: job.size),
                                             payloadHash: payloadHash, paced: true, progress: { context.sent($0) })
        guard response.status == 200 else { throw client.failure(for: response, request: request) }
        if let reply = S3ErrorReply(response) { throw client.errorIn200(request, reply) }
        guard let etag = response.header("ETag"), !etag.isEmpty else {
            throw TransferFailure.unverified("""
                \(request) answered HTTP 200 without an ETag: not what S3 sends for a stored object (a proxy or a \
                portal answered?); the upload is tried again later
                """)
        }
        switch client.settings.etags {
        case .md5:
            guard S3ETag.plainMD5(etag) == SigV4Signer.hex(md5) else {
                throw S3ETag.unproven(etag, expected: SigV4Signer.hex(md5), what: "object \"\(key)\"")
            }
        case .opaque:
            try await proveByHead(key: key, size: job.size, sha256: checksum, request: request)
        }
        return try await finished(context, key: key, source: source)
    }

    /// The object's HEAD must show `size` (and `sha256`, base64, where the store keeps a checksum): the proof
    /// with opaque ETags. Anything else is `unverified`.
    private func proveByHead(key: String, size: Int64, sha256: String?, request: String) async throws(TransferFailure) {
        let head = "HEAD \(client.describe(client.target(key: key)))"
        let response = try await client.send("HEAD", key: key, headers: [HTTPHeader("x-amz-checksum-mode", "ENABLED")],
                                             htmlExpected: true)
        guard response.status == 200 else {
            throw TransferFailure.unverified("""
                \(request) was answered as done, but \(head) answers HTTP \(response.status): the object cannot be \
                seen (HEAD needs s3:GetObject with etag = "opaque"); the upload is tried again later
                """)
        }
        let length = response.header("Content-Length").flatMap { Int64($0) }
        guard length == size else {
            throw TransferFailure.unverified("""
                \(head) shows \(length.map { "\($0) bytes" } ?? "no size"), not the \(size) bytes sent: the store did \
                not keep the file whole (or a proxy answered); the upload is tried again later
                """)
        }
        if let sha256, let kept = response.header("x-amz-checksum-sha256"), kept != sha256 {
            throw TransferFailure.unverified("""
                \(head) shows the checksum \(SafeText.escaped(String(kept.prefix(60)))), not the SHA-256 of the bytes \
                sent (\(sha256)); the upload is tried again later
                """)
        }
    }

    // MARK: Multipart

    /// CreateMultipartUpload; the UploadId is persisted before anything else happens.
    private func create(_ context: TransferContext, key: String)
        async throws(TransferFailure) -> (S3ResumeState, S3PartPlan)
    {
        let job = context.job
        let requested = min(client.settings.partSize, max(S3Settings.minimumPartSize, bodyLimit.chunkCap ?? .max))
        guard let plan = S3PartPlan(size: job.size, requestedPartSize: requested) else {
            throw .permanent("too-large", "the file is \(job.size) bytes: more than 10,000 parts of 5 GiB, the most "
                + "an S3 multipart upload can hold; nothing was sent")
        }
        let query = [("uploads", "")]
        let response = try await client.send("POST", key: key, query: query, headers: S3ObjectHeaders.headers(for: job))
        let request = "POST \(client.describe(client.target(key: key, query: query)))"
        guard response.status == 200 else { throw client.failure(for: response, request: request) }
        guard let root = S3XMLElement.parse(response.body), root.name == "InitiateMultipartUploadResult",
              let uploadID = root.value("UploadId"), !uploadID.isEmpty else {
            if let reply = S3ErrorReply(response) {
                throw client.errorIn200(request, reply)
            }
            throw client.badReply(request, "no UploadId in the answer: \(response.bodySummary)")
        }
        let state = S3ResumeState(key: key, uploadID: uploadID, partSize: plan.partSize)
        try await context.confirmed(0, state.json)
        return (state, plan)
    }

    /// UploadPart, signed: a 404 `NoSuchUpload` forgets the upload (a new one starts next time).
    private func partTransport(_ context: TransferContext) -> S3PartSender.Transport {
        let client = self.client
        let bodyLimit = self.bodyLimit
        return { number, state, body, md5, progress async throws(TransferFailure) -> String in
            let query = [("partNumber", String(number)), ("uploadId", state.uploadID)]
            let response = try await client.send("PUT", key: state.key, query: query,
                                                 headers: [HTTPHeader("Content-MD5", Data(md5).base64EncodedString())],
                                                 body: body, payloadHash: SigV4Signer.unsignedPayload, paced: true,
                                                 progress: progress)
            let request = "PUT \(client.describe(client.target(key: state.key, query: query)))"
            switch response.status {
            case 200:
                if let reply = S3ErrorReply(response) { throw client.errorIn200(request, reply) }
                guard let etag = response.header("ETag"), !etag.isEmpty else {
                    throw TransferFailure.unverified("""
                        \(request) answered HTTP 200 without an ETag for part \(number): not what S3 sends for a \
                        stored part (a proxy or a portal answered?); the upload is tried again later
                        """)
                }
                return etag
            case 404 where S3ErrorReply(response)?.code == "NoSuchUpload":
                try await context.forgetResumeState()
                throw client.uploadGone(request)
            case 413:
                throw S3PartSender.partsTooLarge(state, size: context.job.size, bodyLimit: bodyLimit, request: request)
            default:
                throw client.failure(for: response, request: request)
            }
        }
    }

    /// Every part the store holds for the upload, following `IsTruncated`/`NextPartNumberMarker`; nil when the
    /// upload is gone (NoSuchUpload).
    private func listParts(_ state: S3ResumeState) async throws(TransferFailure)
        -> [Int: (etag: String, size: Int64)]?
    {
        var parts: [Int: (etag: String, size: Int64)] = [:]
        var marker: Int?
        for _ in 0...Int(S3Settings.maximumPartCount) {
            var query = [("uploadId", state.uploadID), ("max-parts", String(listPageSize))]
            if let marker { query.append(("part-number-marker", String(marker))) }
            let response = try await client.send("GET", key: state.key, query: query)
            let request = "GET \(client.describe(client.target(key: state.key, query: query)))"
            if response.status == 404, S3ErrorReply(response)?.code == "NoSuchUpload" { return nil }
            guard response.status == 200 else { throw client.failure(for: response, request: request) }
            guard let root = S3XMLElement.parse(response.body),
                  root.name == "ListPartsResult" || root.name == "ListPartsResponse" else {
                if let reply = S3ErrorReply(response) {
                    if reply.code == "NoSuchUpload" { return nil }
                    throw client.errorIn200(request, reply)
                }
                throw client.badReply(request, "not a ListPartsResult: \(response.bodySummary)")
            }
            for part in root.children("Part") {
                guard let number = part.value("PartNumber").flatMap({ Int($0) }), let etag = part.value("ETag"),
                      let size = part.value("Size").flatMap({ Int64($0) }) else {
                    throw client.badReply(request, "a Part without PartNumber, ETag or Size")
                }
                parts[number] = (etag, size)
            }
            guard root.value("IsTruncated") == "true" else { return parts }
            guard !root.children("Part").isEmpty,
                  let next = root.value("NextPartNumberMarker").flatMap({ Int($0) }), next > (marker ?? 0),
                  next < Int(S3Settings.maximumPartCount) else {
                throw client.badReply(request, "the list is truncated but NextPartNumberMarker does not move on")
            }
            marker = next
        }
        throw client.badReply("ListParts", "more pages than an upload can have parts")
    }

    /// CompleteMultipartUpload, its answer read even on 200; returns when the object exists.
    private func complete(_ state: S3ResumeState, plan: S3PartPlan, context: TransferContext)
        async throws(TransferFailure)
    {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for part in state.parts {
            xml += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(Self.escapeXML(part.etag))</ETag></Part>"
        }
        xml += "</CompleteMultipartUpload>"
        let body = Array(xml.utf8)
        let query = [("uploadId", state.uploadID)]
        let response = try await client.send("POST", key: state.key, query: query,
                                             headers: [HTTPHeader("Content-Type", "application/xml")],
                                             body: .bytes(body), payloadHash: SigV4Signer.sha256Hex(body))
        let request = "POST \(client.describe(client.target(key: state.key, query: query)))"
        let root = S3XMLElement.parse(response.body)
        // AWS names the element …Result; moto and some older stores …Response.
        if response.status == 200, let root,
           root.name == "CompleteMultipartUploadResult" || root.name == "CompleteMultipartUploadResponse" {
            try proveComplete(root, state: state, plan: plan, request: request)
            return
        }
        guard let reply = root.flatMap(S3ErrorReply.init) else {
            if response.status == 200 {
                throw client.badReply(request, "no CompleteMultipartUploadResult in the answer: \(response.bodySummary)")
            }
            throw client.failure(for: response, request: request)
        }
        switch reply.code {
        case "NoSuchUpload":
            // Most likely an earlier Complete went through and its answer was lost.
            if try await objectIsComplete(state, plan: plan) { return }
            try await context.forgetResumeState()
            throw client.uploadGone(request)
        case "EntityTooSmall":
            throw TransferFailure(.permanent, code: "parts-too-small",
                "\(request): \(reply.summary); the store wants larger parts than part_size gives: raise part_size of "
                + "destination \"\(destination.name)\", then `uploadq retry`")
        case "InvalidPart", "InvalidPartOrder":
            // The part list is wrong: forget it, so the next attempt asks ListParts and checks every part.
            var reset = state
            reset.parts = []
            reset.completing = false
            try await context.confirmed(0, reset.json)
            throw TransferFailure(.transient(retryAfter: nil), code: "parts-rejected",
                "\(request): \(reply.summary); the parts are checked against the store again on the next attempt")
        default:
            if response.status == 200 { throw client.errorIn200(request, reply) }
            throw client.failure(for: response, request: request)
        }
    }

    /// CompleteMultipartUpload's result must name this bucket and key, and (`etag = "md5"`) the ETag its parts
    /// make: the proof that the object was put together from them.
    private func proveComplete(_ root: S3XMLElement, state: S3ResumeState, plan: S3PartPlan, request: String)
        throws(TransferFailure)
    {
        var wrong: [String] = []
        if root.value("Bucket") != client.settings.bucket { wrong.append("bucket \"\(root.value("Bucket") ?? "(none)")\"") }
        if root.value("Key") != state.key { wrong.append("key \"\(root.value("Key") ?? "(none)")\"") }
        if client.settings.etags == .md5 {
            let expected = S3ETag.multipart(state.parts, count: plan.count)
            if expected == nil || root.value("ETag").map({ S3ETag.unquoted($0).lowercased() }) != expected {
                wrong.append("ETag \"\(root.value("ETag").map { S3ETag.unquoted($0) } ?? "(none)")\", not "
                    + (expected ?? "one its parts' MD5s make"))
            }
        }
        guard wrong.isEmpty else {
            let named = wrong.map { SafeText.escaped(String($0.prefix(120))) }.joined(separator: ", ")
            throw TransferFailure.unverified("""
                \(request): the result names \(named), not the object this upload made; the parts stay and it is \
                tried again later
                """)
        }
    }

    /// Whether the object exists as this upload would have made it: its size, and its multipart ETag when every
    /// part's ETag is a plain MD5.
    private func objectIsComplete(_ state: S3ResumeState, plan: S3PartPlan)
        async throws(TransferFailure) -> Bool
    {
        let response = try await client.send("HEAD", key: state.key)
        switch response.status {
        case 200:
            guard response.header("Content-Length").flatMap({ Int64($0) }) == plan.size else { return false }
            // With MD5 ETags (the default), the object must bear the ETag its parts make; else its size is all.
            return S3ETag.matches(response.header("ETag"), parts: state.parts, count: plan.count,
                                  etagsAreMD5: client.settings.etags == .md5 ? true : state.etagsAreMD5)
        case 404:
            return false
        default:
            // An upload-only policy may not allow HEAD: whether the object exists stays open, so nothing is
            // aborted or forgotten; the next attempt asks again.
            throw TransferFailure(.transient(retryAfter: nil), code: "cannot-verify",
                "HEAD \(client.describe(client.target(key: state.key))) answered HTTP \(response.status) after the "
                + "upload was reported gone; whether it completed cannot be checked yet (HEAD needs s3:GetObject)")
        }
    }

    /// The object is there: the source is checked once more and the job confirmed whole.
    private func finished(_ context: TransferContext, key: String, source: SourceFile)
        async throws(TransferFailure) -> UploadOutcome
    {
        // The digest of a job hashed while sending (taken beside the parts) is checked with the file.
        let sha256 = try await source.sentDigest()
        try source.verifyUnchanged()
        try await context.confirmed(context.job.size, nil)
        let url = client.objectURL(key)
        guard let template = destination.publicURLTemplate else { return UploadOutcome(remoteURL: url, sha256: sha256) }
        return UploadOutcome(remoteURL: template.expand(for: context.job,
                                                        extra: ["url": url, "key": SigV4Signer.encodePath(key)]),
                             sha256: sha256)
    }

    // MARK: Cancel and probe

    /// AbortMultipartUpload; true when the upload is gone afterwards (aborted, or already unknown to the store).
    /// Runs to the end even when the calling task is cancelled.
    @discardableResult
    private func abort(_ state: S3ResumeState) async -> Bool {
        await Task {
            guard let response = try? await client.send("DELETE", key: state.key,
                                                         query: [("uploadId", state.uploadID)]) else { return false }
            return response.isSuccess || response.status == 404
        }.value
    }

    func discard(_ job: Job) async {
        guard let state = S3ResumeState(json: job.resumeState) else { return }
        await abort(state)
    }

    func probe() async -> Bool {
        await client.answers()
    }

    // MARK: Pieces

    /// The object key for a job (`key_template` filled; see `S3ObjectHeaders.key`).
    func objectKey(for job: Job) throws(TransferFailure) -> String {
        try S3ObjectHeaders.key(for: job, template: client.settings.keyTemplate)
    }

    /// Text content for XML: `&`, `<` and `>` escaped (an ETag's quotes may stay as they are).
    static func escapeXML(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}
