import CUploadQueueSystem
import Foundation
import Synchronization

/// Uploads to an S3 bucket: one PutObject below `multipart_threshold`, a multipart upload above it that resumes
/// after any crash without sending again the parts the store already has.
///
/// The UploadId is persisted before the first part and each part's ETag as it is confirmed. On resume ListParts
/// is the authority: a part is kept when its size matches and, when its ETag is a plain MD5, its bytes match the
/// file. CompleteMultipartUpload's body is always read (a 200 can carry an `<Error>`), and an upload that is gone
/// after a Complete was sent is checked with HEAD: an object of the right size (and multipart ETag) means done.
/// Cancelling a job and failing it for good abort the multipart upload.
struct S3MultipartUploader: Uploader {
    let destination: Destination
    let client: S3Client?
    /// Parts asked for per ListParts page (S3's own maximum is 1,000).
    var listPageSize = 1000

    init(destination: Destination, engine: TransferEngine) {
        self.destination = destination
        client = destination.s3.map { S3Client(destination: destination, settings: $0, engine: engine) }
    }

    func upload(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome {
        guard let client else { throw notConfigured }
        var current = S3ResumeState(json: context.job.resumeState)
        do {
            return try await transfer(context, client: client, state: &current)
        } catch {
            // A job that failed for good leaves nothing behind, unless what failed is access (credentials,
            // signature, permissions, region): then the parts stay, and `uploadq retry` after the fix resumes the
            // same upload. A refused abort also keeps the record.
            if error.kind == .permanent, !Self.accessCodes.contains(error.code), let state = current,
               await abort(state, client: client) {
                try? await context.forgetResumeState()
            }
            throw error
        }
    }

    private func transfer(_ context: TransferContext, client: S3Client, state current: inout S3ResumeState?)
        async throws(TransferFailure) -> UploadOutcome
    {
        let job = context.job
        let source = try SourceFile(job: job)
        try context.checkLink()
        if current == nil, try objectKey(for: job, client: client).isEmpty {
            throw .permanent("key", "key_template \"\(client.settings.keyTemplate)\" gives an empty object key for "
                + "this job (its placeholders are empty); use one that always has text, such as {job_id}")
        }
        if current == nil, job.size < client.settings.multipartThreshold {
            return try await putObject(context, source: source, client: client)
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
                if let parts = try await listParts(previous, client: client) {
                    state.parts = try await reconcile(parts, previous: previous, plan: plan, source: source)
                    state.completing = false
                    current = state
                    try await context.confirmed(state.confirmedBytes, state.json)
                } else {
                    if previous.completing, try await objectIsComplete(previous, plan: plan, client: client) {
                        return try await finished(context, key: previous.key, source: source, client: client)
                    }
                    // Aborted or expired (a lifecycle rule): start again.
                    current = nil
                    try await context.forgetResumeState()
                    (state, plan) = try await create(context, key: previous.key, client: client)
                    current = state
                }
            }
        } else {
            (state, plan) = try await create(context, key: try objectKey(for: job, client: client), client: client)
            current = state
        }
        try await context.resumed(state.confirmedBytes)

        // Up to `part_concurrency` parts in flight; each ETag is saved as its part is confirmed, in whatever order.
        let done = Set(state.parts.map(\.number))
        var missing = (1...plan.count).filter { !done.contains($0) }[...]
        let inFlight = PartsInFlight(confirmed: state.confirmedBytes)
        let snapshot = state
        var failure: TransferFailure?
        let partPlan = plan
        let sendPart = { @Sendable (number: Int) async -> Result<S3ResumeState.Part, TransferFailure> in
            do throws(TransferFailure) {
                if Task.isCancelled { throw .interrupted }
                try context.checkLink()
                return .success(try await self.uploadPart(number, state: snapshot, plan: partPlan, source: source,
                                                          context: context, client: client, inFlight: inFlight))
            } catch {
                return .failure(error)
            }
        }
        await withTaskGroup(of: Result<S3ResumeState.Part, TransferFailure>.self) { group in
            for _ in 0..<max(1, client.settings.partConcurrency) {
                guard let number = missing.popFirst() else { break }
                group.addTask { await sendPart(number) }
            }
            while let result = await group.next() {
                switch result {
                case .success(let part):
                    state.record(part)
                    current = state
                    inFlight.finish(part.number, confirmed: state.confirmedBytes)
                    do throws(TransferFailure) {
                        try await context.confirmed(state.confirmedBytes, state.json)
                        try source.verifyUnchanged()
                        if failure == nil, let number = missing.popFirst() { group.addTask { await sendPart(number) } }
                    } catch {
                        failure = failure ?? error
                        group.cancelAll()
                    }
                case .failure(let error):
                    // The first failure ends the attempt; parts still in flight are stopped (ListParts knows
                    // which of them arrived).
                    if failure == nil || failure?.kind == .interrupted { failure = error }
                    group.cancelAll()
                }
            }
        }
        if let failure { throw failure }
        if Task.isCancelled { throw .interrupted }
        state.completing = true
        current = state
        try await context.confirmed(state.confirmedBytes, state.json)
        try await complete(state, plan: plan, context: context, client: client)
        return try await finished(context, key: state.key, source: source, client: client)
    }

    /// Failure codes that say access is wrong, not the upload: its parts are kept for a retry after the fix.
    static let accessCodes: Set<String> = ["credentials", "signature", "forbidden", "region", "unauthorized"]

    // MARK: Single request

    /// One PutObject, its payload signed with the SHA-256 intake computed (the store checks it); a job hashed
    /// while sending is hashed first (a file below `multipart_threshold`: a short read).
    private func putObject(_ context: TransferContext, source: SourceFile, client: S3Client)
        async throws(TransferFailure) -> UploadOutcome
    {
        let job = context.job
        let key = try objectKey(for: job, client: client)
        try await context.resumed(0)
        let payloadHash = try await source.sentDigest() ?? job.sha256
        let response = try await client.send("PUT", key: key, headers: objectHeaders(job),
                                             body: .file(descriptor: source.descriptor, offset: 0, length: job.size),
                                             payloadHash: payloadHash, paced: true, progress: { context.sent($0) })
        guard response.status == 200 else {
            throw client.failure(for: response, request: "PUT \(client.describe(client.target(key: key)))")
        }
        return try await finished(context, key: key, source: source, client: client)
    }

    // MARK: Multipart

    /// CreateMultipartUpload; the UploadId is persisted before anything else happens.
    private func create(_ context: TransferContext, key: String, client: S3Client)
        async throws(TransferFailure) -> (S3ResumeState, S3PartPlan)
    {
        let job = context.job
        guard let plan = S3PartPlan(size: job.size, requestedPartSize: client.settings.partSize) else {
            throw .permanent("too-large", "the file is \(job.size) bytes: more than 10,000 parts of 5 GiB, the most "
                + "an S3 multipart upload can hold; nothing was sent")
        }
        let query = [("uploads", "")]
        let response = try await client.send("POST", key: key, query: query, headers: objectHeaders(job))
        let request = "POST \(client.describe(client.target(key: key, query: query)))"
        guard response.status == 200 else { throw client.failure(for: response, request: request) }
        guard let root = S3XMLElement.parse(response.body), root.name == "InitiateMultipartUploadResult",
              let uploadID = root.value("UploadId"), !uploadID.isEmpty else {
            if let reply = S3ErrorReply(response) {
                throw transientError(request, reply)
            }
            throw badReply(request, "no UploadId in the answer: \(response.bodySummary)")
        }
        let state = S3ResumeState(key: key, uploadID: uploadID, partSize: plan.partSize)
        try await context.confirmed(0, state.json)
        return (state, plan)
    }

    /// UploadPart with `Content-MD5`, so the store refuses bytes damaged on the way; the ETag is checked against
    /// the MD5 when it is a plain one.
    private func uploadPart(_ number: Int, state: S3ResumeState, plan: S3PartPlan, source: SourceFile,
                            context: TransferContext, client: S3Client, inFlight: PartsInFlight)
        async throws(TransferFailure) -> S3ResumeState.Part
    {
        let offset = plan.offset(of: number)
        let length = plan.length(of: number)
        let md5 = try await FileRangeDigest.digest(.md5, of: source, offset: offset, length: length)
        let query = [("partNumber", String(number)), ("uploadId", state.uploadID)]
        let response = try await client.send("PUT", key: state.key, query: query,
                                             headers: [HTTPHeader("Content-MD5", Data(md5).base64EncodedString())],
                                             body: .file(descriptor: source.descriptor, offset: offset, length: length),
                                             payloadHash: SigV4Signer.unsignedPayload, paced: true,
                                             progress: { context.sent(inFlight.update(number, sent: $0)) })
        let request = "PUT \(client.describe(client.target(key: state.key, query: query)))"
        switch response.status {
        case 200:
            guard let etag = response.header("ETag"), !etag.isEmpty else {
                throw badReply(request, "no ETag for part \(number)")
            }
            // The store checked the bytes against Content-MD5. Whether its ETags are those MD5s (not with SSE-KMS
            // or SSE-C) decides later whether a part found by ListParts can be checked against the file.
            return S3ResumeState.Part(number: number, etag: etag, size: length,
                                      md5: Self.plainMD5(etag) == SigV4Signer.hex(md5))
        case 404 where S3ErrorReply(response)?.code == "NoSuchUpload":
            try await context.forgetResumeState()
            throw uploadGone(request)
        default:
            throw client.failure(for: response, request: request)
        }
    }

    /// Every part the store holds for the upload, following `IsTruncated`/`NextPartNumberMarker`; nil when the
    /// upload is gone (NoSuchUpload).
    private func listParts(_ state: S3ResumeState, client: S3Client) async throws(TransferFailure)
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
                    throw transientError(request, reply)
                }
                throw badReply(request, "not a ListPartsResult: \(response.bodySummary)")
            }
            for part in root.children("Part") {
                guard let number = part.value("PartNumber").flatMap({ Int($0) }), let etag = part.value("ETag"),
                      let size = part.value("Size").flatMap({ Int64($0) }) else {
                    throw badReply(request, "a Part without PartNumber, ETag or Size")
                }
                parts[number] = (etag, size)
            }
            guard root.value("IsTruncated") == "true" else { return parts }
            guard !root.children("Part").isEmpty,
                  let next = root.value("NextPartNumberMarker").flatMap({ Int($0) }), next > (marker ?? 0),
                  next < Int(S3Settings.maximumPartCount) else {
                throw badReply(request, "the list is truncated but NextPartNumberMarker does not move on")
            }
            marker = next
        }
        throw badReply("ListParts", "more pages than an upload can have parts")
    }

    /// The parts worth keeping: the store has them at the planned size and, for a plain-MD5 ETag, with the file's
    /// bytes (checked by reading the part when the ETag is not the one recorded when it was sent).
    private func reconcile(_ stored: [Int: (etag: String, size: Int64)], previous: S3ResumeState, plan: S3PartPlan,
                           source: SourceFile) async throws(TransferFailure) -> [S3ResumeState.Part]
    {
        var kept: [S3ResumeState.Part] = []
        for number in 1...plan.count {
            guard let part = stored[number], part.size == plan.length(of: number) else { continue }
            if Task.isCancelled { throw .interrupted }
            let recorded = previous.parts.first { $0.number == number }
            if recorded?.etag != part.etag, previous.etagsAreMD5 != false, let md5 = Self.plainMD5(part.etag) {
                let local = try await FileRangeDigest.digest(.md5, of: source, offset: plan.offset(of: number),
                                                             length: part.size)
                guard SigV4Signer.hex(local) == md5 else { continue }
            }
            kept.append(S3ResumeState.Part(number: number, etag: part.etag, size: part.size,
                                           md5: recorded?.etag == part.etag ? recorded?.md5 : nil))
        }
        return kept
    }

    /// CompleteMultipartUpload, its answer read even on 200; returns when the object exists.
    private func complete(_ state: S3ResumeState, plan: S3PartPlan, context: TransferContext, client: S3Client)
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
        if response.status == 200, let name = root?.name,
           name == "CompleteMultipartUploadResult" || name == "CompleteMultipartUploadResponse" { return }
        guard let reply = root.flatMap(S3ErrorReply.init) else {
            if response.status == 200 {
                throw badReply(request, "no CompleteMultipartUploadResult in the answer: \(response.bodySummary)")
            }
            throw client.failure(for: response, request: request)
        }
        switch reply.code {
        case "NoSuchUpload":
            // Most likely an earlier Complete went through and its answer was lost.
            if try await objectIsComplete(state, plan: plan, client: client) { return }
            try await context.forgetResumeState()
            throw uploadGone(request)
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
            if response.status == 200 { throw transientError(request, reply) }
            throw client.failure(for: response, request: request)
        }
    }

    /// Whether the object exists as this upload would have made it: its size, and its multipart ETag when every
    /// part's ETag is a plain MD5.
    private func objectIsComplete(_ state: S3ResumeState, plan: S3PartPlan, client: S3Client)
        async throws(TransferFailure) -> Bool
    {
        let response = try await client.send("HEAD", key: state.key)
        switch response.status {
        case 200:
            guard response.header("Content-Length").flatMap({ Int64($0) }) == plan.size else { return false }
            guard state.etagsAreMD5 == true, let expected = Self.multipartETag(state.parts, count: plan.count),
                  let etag = response.header("ETag") else { return true }
            return Self.unquoted(etag).lowercased() == expected
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
    private func finished(_ context: TransferContext, key: String, source: SourceFile, client: S3Client)
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
    private func abort(_ state: S3ResumeState, client: S3Client) async -> Bool {
        await Task {
            guard let response = try? await client.send("DELETE", key: state.key,
                                                         query: [("uploadId", state.uploadID)]) else { return false }
            return response.isSuccess || response.status == 404
        }.value
    }

    func discard(_ job: Job) async {
        guard let client, let state = S3ResumeState(json: job.resumeState) else { return }
        await abort(state, client: client)
    }

    func probe() async -> Bool {
        await client?.answers() ?? false
    }

    // MARK: Pieces

    /// The object key for a job: `key_template` filled, each value kept to one segment (`/` and `\` become `_`,
    /// as does a leading `.` and any control character), empty segments dropped.
    /// A key longer than S3's 1,024 bytes has its last segment shortened by the name rule (`FileName`); one
    /// whose folders alone leave no room fails for good.
    func objectKey(for job: Job, client: S3Client) throws(TransferFailure) -> String {
        let expanded = client.settings.keyTemplate.expand(jobID: job.id, originalName: job.originalName,
                                                          sha256: job.sha256, meta: job.meta, date: job.createdAt,
                                                          escape: Self.keySegment)
        // Empty segments go; a segment made only of dots would be dropped by URL normalisation: it becomes `_`.
        let key = PathSegments.split(expanded, omittingEmpty: true).map { $0.allSatisfy { $0 == "." } ? "_" : $0 }
            .joined(separator: "/")
        guard let fitted = FileName.fittingKey(key, jobID: job.id) else {
            throw .permanent("name-too-long", """
                key_template "\(client.settings.keyTemplate)" gives a key of \(key.utf8.count) bytes whose folders \
                leave no room for the name; S3 takes at most \(FileName.objectKeyLimit): use shorter values or a \
                shorter template, then `uploadq retry \(job.id)`
                """)
        }
        return fitted
    }

    /// One value as part of a key: readable (spaces and Unicode kept; the wire encoding is SigV4's business) but
    /// unable to add a segment or start a hidden or relative one.
    static func keySegment(_ value: String) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in value.unicodeScalars {
            let unsafe = scalar == "/" || scalar == "\\" || scalar.value < 0x20 || scalar.value == 0x7F
            scalars.append(unsafe ? "_" : scalar)
        }
        var text = String(scalars)
        if text.hasPrefix(".") { text = "_" + text.dropFirst() }
        return text
    }

    /// `Content-Type` and the job's meta as `x-amz-meta-*` (values outside printable ASCII RFC 2047-encoded, keys
    /// that cannot be header names left out).
    func objectHeaders(_ job: Job) -> [HTTPHeader] {
        var headers = [HTTPHeader("Content-Type", job.contentType)]
        for key in job.meta.keys.sorted() where Self.isHeaderToken(key) && !(job.meta[key] ?? "").isEmpty {
            let value = job.meta[key] ?? ""
            let plain = value.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7F }
                && !value.hasPrefix(" ") && !value.hasSuffix(" ")
            // `_` in a header name is dropped by nginx-fronted stores: it travels as `-`.
            headers.append(HTTPHeader("x-amz-meta-\(key.lowercased().replacingOccurrences(of: "_", with: "-"))",
                                      plain ? value : "=?UTF-8?B?\(Data(value.utf8).base64EncodedString())?="))
        }
        return headers
    }

    static func isHeaderToken(_ text: String) -> Bool {
        !text.isEmpty && text.unicodeScalars.allSatisfy {
            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-_.".unicodeScalars.contains($0))
        }
    }

    /// The hex MD5 inside an ETag like `"9b2cf535f27731c974343645a3985328"`; nil for multipart or KMS ETags.
    static func plainMD5(_ etag: String) -> String? {
        let inner = unquoted(etag).lowercased()
        guard inner.count == 32, inner.allSatisfy(\.isHexDigit) else { return nil }
        return inner
    }

    /// What S3 names a completed multipart object: MD5 of the parts' binary MD5s, `-`, the part count.
    static func multipartETag(_ parts: [S3ResumeState.Part], count: Int) -> String? {
        guard parts.count == count else { return nil }
        var joined: [UInt8] = []
        for part in parts {
            guard let hex = plainMD5(part.etag) else { return nil }
            var index = hex.startIndex
            while index < hex.endIndex {
                let next = hex.index(index, offsetBy: 2)
                joined.append(UInt8(hex[index..<next], radix: 16) ?? 0)
                index = next
            }
        }
        guard let context = uploadq_md5_new() else { return nil }
        joined.withUnsafeBytes { _ = uploadq_sha256_update(context, $0.baseAddress, $0.count) }
        var digest = [UInt8](repeating: 0, count: 16)
        guard uploadq_md5_finish(context, &digest) == 0 else { return nil }
        return SigV4Signer.hex(digest) + "-\(count)"
    }

    static func unquoted(_ etag: String) -> String {
        var text = etag.trimmingCharacters(in: .whitespaces)
        if text.hasPrefix("W/") { text.removeFirst(2) }
        if text.hasPrefix("\""), text.hasSuffix("\""), text.count >= 2 { text = String(text.dropFirst().dropLast()) }
        return text
    }

    /// Text content for XML: `&`, `<` and `>` escaped (an ETag's quotes may stay as they are).
    static func escapeXML(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }

    private var notConfigured: TransferFailure {
        .permanent("config", "destination \"\(destination.name)\" uses protocol s3 but has no S3 settings "
            + "(endpoint, bucket)")
    }

    private func badReply(_ request: String, _ detail: String) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: "bad-reply", "bad S3 reply to \(request): \(detail)",
                        destinationFault: true)
    }

    private func transientError(_ request: String, _ reply: S3ErrorReply) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: "s3-\(reply.code)",
                        "\(request) answered 200 with an error: \(reply.summary); trying again later",
                        destinationFault: true)
    }

    private func uploadGone(_ request: String) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: "upload-gone",
            "\(request): the multipart upload is gone (NoSuchUpload: aborted, or expired by a lifecycle rule) and no "
            + "finished object matches; a new upload starts on the next attempt")
    }
}

/// Bytes handed over for the parts in flight, so progress shows their sum on top of the confirmed parts.
final class PartsInFlight: Sendable {
    private let state: Mutex<(confirmed: Int64, sent: [Int: Int64])>

    init(confirmed: Int64) {
        state = Mutex((confirmed, [:]))
    }

    /// Records part `number`'s bytes sent so far; returns the confirmed bytes plus all parts in flight.
    func update(_ number: Int, sent bytes: Int64) -> Int64 {
        state.withLock { state in
            state.sent[number] = bytes
            return state.confirmed + state.sent.values.reduce(0, +)
        }
    }

    /// Part `number` is confirmed: `confirmed` bytes are now durable in all.
    func finish(_ number: Int, confirmed: Int64) {
        state.withLock { state in
            state.sent.removeValue(forKey: number)
            state.confirmed = confirmed
        }
    }
}
