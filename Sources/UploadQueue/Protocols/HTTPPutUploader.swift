/// Uploads a file with one whole-file `PUT` to the destination's URL template (WebDAV, nginx DAV, presigned URLs).
struct HTTPPutUploader: Uploader {
    let sender: WholeFileSender
    let settings: HTTPPutSettings
    /// The URL template, or the backend that mints each file's target.
    let route: WholeFileRoute

    init(destination: Destination, settings: HTTPPutSettings, engine: TransferEngine, bodyLimit: RequestBodyLimit? = nil,
         mint: MintSettings = MintSettings()) {
        self.settings = settings
        route = WholeFileRoute(settings.target, destination: destination, mint: mint, engine: engine)
        sender = WholeFileSender(destination: destination, client: DestinationClient(destination: destination, engine: engine),
                                 bodyLimit: bodyLimit ?? RequestBodyLimit(destination: destination.name),
                                 verify: settings.verify)
    }

    func upload(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome {
        try await sender.upload(context, route: route) { job, source, template in
            WholeFileSender.Request(
                method: "PUT", url: template.expand(for: job),
                headers: [HTTPHeader("Content-Type", job.contentType)],
                body: .source(source, offset: 0, length: job.size))
        }
    }

    /// A PUT leaves nothing behind when it is cut off (the server stores the body atomically or not at all).
    func discard(_ job: Job) async {}

    func probe() async -> Bool { await sender.probe(route) }
}
