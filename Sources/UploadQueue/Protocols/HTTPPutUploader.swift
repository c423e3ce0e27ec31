/// Uploads a file with one whole-file `PUT` to the destination's URL template (WebDAV, nginx DAV, presigned URLs).
struct HTTPPutUploader: Uploader {
    let sender: WholeFileSender

    init(destination: Destination, engine: TransferEngine) {
        sender = WholeFileSender(destination: destination, client: DestinationClient(destination: destination, engine: engine))
    }

    func upload(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome {
        let template = sender.destination.urlTemplate
        return try await sender.upload(context) { job, source in
            WholeFileSender.Request(
                method: "PUT", url: template?.expand(for: job) ?? sender.destination.url,
                headers: [HTTPHeader("Content-Type", job.contentType)],
                body: .source(source, offset: 0, length: job.size))
        }
    }

    /// A PUT leaves nothing behind when it is cut off (the server stores the body atomically or not at all).
    func discard(_ job: Job) async {}

    func probe() async -> Bool { await sender.probe() }
}
