import Foundation

/// Uploads to S3 through the app's backend (Uppy Companion's routes, `CompanionClient`): the device holds no S3
/// keys. Small files go in one presigned PUT or POST (`/s3/params`); larger ones in a multipart upload whose
/// UploadId and key are persisted before any part, each part signed just before it is sent and signed again when
/// the store refuses its URL (expired), and resumed after any crash from the parts the backend lists.
struct CompanionUploader: Uploader {
    let destination: Destination
    let settings: MintedS3Settings
    let companion: CompanionClient
    /// Sends the parts and the small files: no credentials go to the store's origin.
    let sender: WholeFileSender
    /// How many fresh URLs one part gets in an attempt when the store refuses them (expired).
    static let signaturesPerPart = 3

    init(destination: Destination, settings: MintedS3Settings, engine: TransferEngine, mint: MintSettings,
         bodyLimit: RequestBodyLimit) {
        self.destination = destination
        self.settings = settings
        companion = CompanionClient(base: settings.base, destination: destination.name, settings: mint, engine: engine)
        // A presigned PUT or POST is proven by the store's answer: its MD5 ETag (or a digest).
        sender = WholeFileSender(destination: destination, client: DestinationClient(destination: destination, engine: engine),
                                 bodyLimit: bodyLimit, verify: .response, etags: settings.etags)
    }

    func upload(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome {
        var current = S3ResumeState(json: context.job.resumeState)
        if current == nil, context.job.size < settings.multipartThreshold {
            let companion = self.companion
            return try await sender.uploadMinted(context) { job async throws(TransferFailure) in
                try await companion.parameters(for: job)
            }
        }
        do {
            return try await multipart(context, state: &current)
        } catch {
            // A job that failed for good leaves no upload behind (the backend aborts it).
            if error.kind == .permanent || error.code == S3PartSender.partsTooLargeCode, let state = current,
               await companion.abort(uploadID: state.uploadID, key: state.key) {
                try? await context.forgetResumeState()
            }
            throw error
        }
    }

    private func multipart(_ context: TransferContext, state current: inout S3ResumeState?)
        async throws(TransferFailure) -> UploadOutcome
    {
        let job = context.job
        let source = try SourceFile(job: job)
        try context.checkConstraints()
        source.hashBesideUpload()
        var state: S3ResumeState
        var plan: S3PartPlan
        if let previous = current {
            state = previous
            plan = S3PartPlan(size: job.size, fixedPartSize: previous.partSize)
            if let stored = try await companion.parts(uploadID: previous.uploadID, key: previous.key) {
                let allRecorded = Set(previous.parts.map(\.number)) == Set(1...plan.count)
                if !(previous.completing && allRecorded) {
                    state.parts = try await S3PartSender.reconcile(stored, previous: previous, plan: plan, source: source,
                                                                   etags: settings.etags)
                    state.completing = false
                    try await context.confirmed(state.confirmedBytes, state.json)
                }
            } else if previous.completing {
                // Gone after its Complete was sent: completed with its answer lost, or aborted. The backend cannot
                // tell which; neither losing the file nor storing it twice unasked is acceptable. The record goes
                // (the key is in the message), so `uploadq retry` starts a new upload.
                current = nil
                try await context.forgetResumeState()
                throw .permanent("completion-unverified", """
                    the multipart upload of object "\(previous.key)" is gone after its Complete was sent: it was \
                    completed (its answer lost) or aborted. Check the bucket: if the object is there, nothing is \
                    missing; if not, `uploadq retry \(job.id)` uploads the file again
                    """)
            } else {
                current = nil
                try await context.forgetResumeState()
                (state, plan) = try await create(context)
                current = state
            }
        } else {
            (state, plan) = try await create(context)
            current = state
        }
        try await context.resumed(state.confirmedBytes)
        let partSender = S3PartSender(transport: partTransport(context), source: source, context: context, plan: plan,
                                      concurrency: settings.partConcurrency, etags: settings.etags)
        try await partSender.sendMissing(&state)
        state.completing = true
        current = state
        try await context.confirmed(state.confirmedBytes, state.json)
        // The backend completed the upload with the store: its answer names the object, or proves nothing.
        guard let location = try await companion.complete(uploadID: state.uploadID, key: state.key, parts: state.parts),
              !location.isEmpty else {
            throw .unverified("""
                the backend's answer to completing the multipart upload of "\(state.key)" names no location: not the \
                answer of a Companion backend that completed it; the parts stay and it is tried again later
                """)
        }
        return try await finished(context, location: location, key: state.key, source: source)
    }

    /// Starts the upload at the backend; its UploadId and key are persisted before anything else happens.
    private func create(_ context: TransferContext) async throws(TransferFailure) -> (S3ResumeState, S3PartPlan) {
        let job = context.job
        let requested = min(settings.partSize, max(S3Settings.minimumPartSize, sender.bodyLimit.chunkCap ?? .max))
        guard let plan = S3PartPlan(size: job.size, requestedPartSize: requested) else {
            throw .permanent("too-large", "the file is \(job.size) bytes: more than 10,000 parts of 5 GiB, the most "
                + "an S3 multipart upload can hold; nothing was sent")
        }
        let (uploadID, key) = try await companion.create(for: job)
        let state = S3ResumeState(key: key, uploadID: uploadID, partSize: plan.partSize)
        try await context.confirmed(0, state.json)
        return (state, plan)
    }

    /// One part: its URL signed by the backend now, then sent with `Content-MD5`; a URL the store refuses (401/403:
    /// expired) is signed again, `signaturesPerPart` times at most.
    private func partTransport(_ context: TransferContext) -> S3PartSender.Transport {
        let companion = self.companion
        let client = sender.client
        let destinationName = destination.name
        let bodyLimit = sender.bodyLimit
        return { number, state, body, md5, progress async throws(TransferFailure) -> String in
            var refusals: [String] = []
            while true {
                let url = try await companion.partURL(uploadID: state.uploadID, key: state.key, number: number)
                let publicURL = String(url.prefix { $0 != "?" && $0 != "#" })
                let shown = "PUT part \(number) at \(publicURL)"
                let response: HTTPResponse
                do throws(TransferFailure) {
                    try client.check(url)
                    response = try await client.send("PUT", url,
                                                     headers: [HTTPHeader("Content-MD5", Data(md5).base64EncodedString())],
                                                     body: body, paced: true, progress: progress)
                } catch {
                    throw error.hiding(url, as: publicURL)
                }
                let reply = S3ErrorReply(response)
                switch response.status {
                case 200:
                    guard let etag = response.header("ETag"), !etag.isEmpty else {
                        throw .unverified("""
                            \(shown) answered HTTP 200 without an ETag: not what S3 sends for a stored part (a proxy or \
                            a portal answered?); the upload is tried again later
                            """)
                    }
                    return etag
                case 401, 403:
                    refusals.append("HTTP \(response.status)"
                        + (reply.map { ": \(URLRedaction.withoutQueries($0.summary))" } ?? ""))
                    guard refusals.count < Self.signaturesPerPart else {
                        throw .permanent("minted-target-refused", """
                            \(shown): the store refused \(refusals.count) freshly signed URLs in a row \
                            (\(refusals.joined(separator: "; "))); the backend signs URLs the store does not accept \
                            (its keys, clock or policy): fix it, then `uploadq retry`
                            """)
                    }
                case 413:
                    throw S3PartSender.partsTooLarge(state, size: context.job.size, bodyLimit: bodyLimit,
                                                     request: shown)
                case 404 where reply?.code == "NoSuchUpload":
                    try await context.forgetResumeState()
                    throw TransferFailure(.transient(retryAfter: nil), code: "upload-gone",
                        "\(shown): the multipart upload is gone (aborted, or expired by a lifecycle rule); a new one "
                        + "starts on the next attempt")
                default:
                    throw WholeFileSender.minted(response, request: shown, destination: destinationName)
                }
            }
        }
    }

    /// The object is there: the source is checked once more and the job confirmed whole.
    private func finished(_ context: TransferContext, location: String?, key: String, source: SourceFile)
        async throws(TransferFailure) -> UploadOutcome
    {
        let sha256 = try await source.sentDigest()
        try source.verifyUnchanged()
        try await context.confirmed(context.job.size, nil)
        return UploadOutcome(remoteURL: destination.remoteURL(for: context.job, serverURL: location ?? key),
                             sha256: sha256)
    }

    func discard(_ job: Job) async {
        guard let state = S3ResumeState(json: job.resumeState) else { return }
        _ = await companion.abort(uploadID: state.uploadID, key: state.key)
    }

    func probe() async -> Bool {
        await companion.answers()
    }
}
