import Foundation

/// Sends a whole file in one request (plain HTTP has no resume): what `HTTPPutUploader` and `HTTPPostUploader`
/// share. An interrupted transfer is simply sent again whole; `Content-Range` is never used.
struct WholeFileSender: Sendable {
    let destination: Destination
    let client: DestinationClient

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
        try context.checkLink()
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
        // The job id lets servers that deduplicate retries recognise a re-sent file.
        request.headers.append(HTTPHeader("Idempotency-Key", job.id.rawValue))
        let response = try await client.send(request.method, request.url, headers: request.headers, body: request.body,
                                             paced: true, progress: { context.sent($0) })
        guard response.isSuccess else {
            throw client.failure(for: response, request: "\(request.method) \(URLRedaction.redact(request.url))")
        }
        // The digest of a job hashed while sending: read once more only for what the request did not read itself
        // (nothing, unless it was cut short).
        let sha256: String?
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
        try await context.confirmed(job.size, nil)
        let stored = response.location(resolvedAgainst: request.url) ?? request.url
        return UploadOutcome(remoteURL: destination.remoteURL(for: job, serverURL: stored), sha256: sha256)
    }

    /// A `HEAD` on the URL's fixed part (before its first placeholder) tells whether the server is up.
    func probe() async -> Bool {
        await client.answers("HEAD", destination.serverURL ?? destination.url)
    }
}
