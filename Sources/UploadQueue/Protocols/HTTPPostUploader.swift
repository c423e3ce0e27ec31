import Foundation

/// Uploads a file with one `POST` as `multipart/form-data`: the job's meta as form fields, then the file.
struct HTTPPostUploader: Uploader {
    let sender: WholeFileSender
    let settings: HTTPPostSettings
    /// The URL template, or the backend that mints each file's target.
    let route: WholeFileRoute

    init(destination: Destination, settings: HTTPPostSettings, engine: TransferEngine, bodyLimit: RequestBodyLimit? = nil,
         mint: MintSettings = MintSettings()) {
        self.settings = settings
        route = WholeFileRoute(settings.target, destination: destination, mint: mint, engine: engine)
        sender = WholeFileSender(destination: destination, client: DestinationClient(destination: destination, engine: engine),
                                 bodyLimit: bodyLimit ?? RequestBodyLimit(destination: destination.name),
                                 verify: settings.verify, remoteURLFrom: settings.remoteURLFrom)
    }

    func upload(_ context: TransferContext) async throws(TransferFailure) -> UploadOutcome {
        let settings = settings
        return try await sender.upload(context, route: route) { job, source, template in
            let form = MultipartForm(boundary: "uploadq-\(job.id.rawValue)-\(UInt64.random(in: 0...UInt64.max))")
            let body = form.body(fields: job.meta.sorted { $0.key < $1.key }, fileField: settings.formField,
                                 fileName: job.originalName, contentType: job.contentType,
                                 file: .source(source, offset: 0, length: job.size))
            return WholeFileSender.Request(
                method: "POST", url: template.expand(for: job),
                headers: [HTTPHeader("Content-Type", "multipart/form-data; boundary=\(form.boundary)")], body: body)
        }
    }

    /// A POST leaves nothing behind that uploadq could address.
    func discard(_ job: Job) async {}

    func probe() async -> Bool { await sender.probe(route) }
}

/// A `multipart/form-data` body (RFC 7578) whose file part is streamed from disk.
struct MultipartForm: Sendable {
    let boundary: String

    func body(fields: [(key: String, value: String)], fileField: String, fileName: String, contentType: String,
              file: RequestBody) -> RequestBody {
        var head = ""
        for (key, value) in fields {
            head += "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(Self.quoted(key))\"\r\n\r\n\(value)\r\n"
        }
        head += "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(Self.quoted(fileField))\"; "
            + "filename=\"\(Self.quoted(fileName))\"\r\nContent-Type: \(contentType)\r\n\r\n"
        let tail = "\r\n--\(boundary)--\r\n"
        return .sequence([.bytes(Array(head.utf8)), file, .bytes(Array(tail.utf8))])
    }

    /// Escapes a name for a quoted parameter the way browsers do: `"`, CR and LF percent-encoded.
    static func quoted(_ text: String) -> String {
        text.replacingOccurrences(of: "\"", with: "%22").replacingOccurrences(of: "\r", with: "%0D")
            .replacingOccurrences(of: "\n", with: "%0A")
    }
}
