import Foundation

/// Turns what went wrong on the wire into a verdict: retry on the schedule, fail for a person, or stop quietly.
///
/// | what                                               | verdict                                   |
/// |----------------------------------------------------|-------------------------------------------|
/// | DNS, connect, timeout, stall, reset, TLS handshake | transient, counts against the destination |
/// | 507 (storage or quota full)                        | interrupted (`quota-full`): the job waits with the destination's others, never a failure |
/// | 5xx, 408, 429 (with `Retry-After`)                 | transient, counts against the destination |
/// | 409, 423 (plain HTTP)                              | transient                                 |
/// | 401 after the token was refreshed, 403, other 4xx  | permanent, with the status and the server's words |
/// | TLS certificate not trusted                        | unverified: a portal intercepting HTTPS looks just like it; the job waits with both causes named |
/// | malformed URL                                      | permanent                                 |
/// | source file shrank while sent                      | permanent ("source changed")              |
/// | cancelled                                          | interrupted                               |
enum FailureClassifier {
    /// The verdict for an exchange that got no response.
    static func failure(for error: TransferError, method: String) -> TransferFailure {
        switch error.code {
        case .cancelled:
            return .interrupted
        case .tlsVerification:
            // A captive portal answering for an HTTPS server cannot show its certificate: no verdict. A private CA
            // or an expired certificate waits the same way, and says so (`uploadq doctor` tells them apart).
            return .unverified("""
                \(method): \(error.message); on a network with a captive portal (log in on it, or wait) this is the \
                portal answering in the server's place
                """, portal: true, code: error.code.rawValue)
        case .invalidURL, .privateTarget:
            return .permanent(error.code.rawValue, "\(method): \(error.message)")
        case .sourceRead:
            return .permanent("source-changed", "source changed while it was sent: \(error.message); "
                + "enqueue it again to upload the new content")
        case .sourceIO:
            return .transient("io", "\(method): \(error.message)")
        case .other:
            return .transient(error.code.rawValue, "\(method): \(error.message)")
        case .dns, .connect, .timeout, .stall, .tls, .send, .receive, .emptyReply, .badReply:
            let what: String
            switch error.code {
            case .emptyReply: what = "\(method): the server closed the connection without an answer"
            case .stall: what = "\(method) \(error.message); it resumes from the confirmed offset"
            default: what = "\(method): \(error.message)"
            }
            return TransferFailure(.transient(retryAfter: nil), code: error.code.rawValue, what, destinationFault: true)
        }
    }

    /// The verdict for an unexpected HTTP status; `request` names it (`PATCH https://…`, already redacted).
    static func failure(for response: HTTPResponse, request: String, destination: String,
                        credentialsConfigured: Bool = true, secrets: [String] = [], now: Date = Date()) -> TransferFailure
    {
        let status = response.status
        let said = response.summary(redacting: secrets)
        let base = "HTTP \(status) from \(request)" + (said.isEmpty ? "" : ": \(said)")
        switch status {
        case 507:
            return TransferFailure.quotaFull(base + "; the destination's storage is full: its jobs wait (quota-full) "
                + "and one of them tries again now and then, until it is taken")
        case 408, 429, 500...599:
            let retryAfter = response.retryAfter(now: now)
            return TransferFailure(.transient(retryAfter: retryAfter), code: "http-\(status)",
                                   base + (retryAfter.map { "; the server asks to wait \($0)" } ?? ""),
                                   destinationFault: true)
        case 409, 423:
            return TransferFailure(.transient(retryAfter: response.retryAfter(now: now)), code: "http-\(status)", base)
        case 401 where !credentialsConfigured:
            return .permanent("unauthorized", base + "; the server wants credentials: set token_env, token_file or "
                + "token_command on destination \"\(destination)\", then `uploadq retry`")
        case 401:
            return .permanent("unauthorized", base + "; the server refused the credentials of destination "
                + "\"\(destination)\" (also after reading them again): fix token_env/token_file/token_command, "
                + "then `uploadq retry`")
        case 403:
            return .permanent("forbidden", base + "; the credentials of destination \"\(destination)\" may not "
                + "upload here: fix them or the server's permissions, then `uploadq retry`")
        case 413:
            return .permanent("too-large", base + "; the server refuses a file this large")
        case 300...399:
            let target = response.header("Location").map { " to \(URLRedaction.redact($0))" } ?? ""
            return .permanent("redirect", base + "; the server redirected\(target): set the destination's url to "
                + "the final address")
        case 400...499:
            return .permanent("http-\(status)", base + "; fix the request or the server, then `uploadq retry`")
        default:
            return TransferFailure(.transient(retryAfter: nil), code: "bad-reply",
                                   "unexpected HTTP \(status) from \(request)", destinationFault: true)
        }
    }
}
