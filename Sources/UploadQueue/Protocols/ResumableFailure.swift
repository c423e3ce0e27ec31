import Foundation

/// The failures tus and IETF resumable uploads share: a server whose offset or reply cannot be right.
enum ResumableFailure {
    /// The server reports more bytes than the file has: its upload is abandoned, and the job fails for good (a
    /// retry starts a new one).
    static func beyondFile(_ offset: Int64, job: Job, url: String, server: String) -> TransferFailure {
        .permanent("offset-beyond-file", "the \(server) reports offset \(offset) for \(URLRedaction.redact(url)) but "
            + "the file has \(job.size) bytes; that upload was abandoned, `uploadq retry \(job.id)` starts a new one")
    }

    /// A reply the protocol does not allow: a fault of the server, tried again later.
    static func badReply(_ request: String, _ url: String, _ detail: String, protocolName: String) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: "bad-reply",
                        "bad \(protocolName) reply to \(request) \(URLRedaction.redact(url)): \(detail)",
                        destinationFault: true)
    }
}
