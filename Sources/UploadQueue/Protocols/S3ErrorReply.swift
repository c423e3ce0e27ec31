import Foundation

/// S3's `<Error>` body (`Code`, `Message`, and `ServerTime` for clock skew), and what each code means for a job.
struct S3ErrorReply: Sendable, Equatable {
    var code: String
    var message: String
    var serverTime: Date?

    /// The error in a response body, also after leading whitespace (as a 200 to CompleteMultipartUpload may
    /// carry one); nil when the body is not an S3 error.
    init?(_ response: HTTPResponse) {
        guard let root = S3XMLElement.parse(response.body) else { return nil }
        self.init(root)
    }

    init?(_ root: S3XMLElement) {
        guard root.name == "Error", let code = root.value("Code"), !code.isEmpty else { return nil }
        self.code = code
        message = root.value("Message") ?? ""
        serverTime = root.value("ServerTime").flatMap { Date(rfc3339: $0) }
    }

    /// `Code: Message`, one line, at most 200 characters.
    var summary: String {
        let text = message.isEmpty ? code : "\(code): \(message)"
        let line = text.split(whereSeparator: \.isNewline).joined(separator: " ")
        return line.count > 200 ? String(line.prefix(200)) + "…" : line
    }

    /// The verdict for an unexpected answer from an S3 store; `request` is `METHOD URL`, already redacted.
    static func failure(for response: HTTPResponse, request: String, destination: String, bucket: String)
        -> TransferFailure
    {
        guard let reply = S3ErrorReply(response) else {
            return FailureClassifier.failure(for: response, request: request, destination: destination)
        }
        let base = "HTTP \(response.status) from \(request): \(reply.summary)"
        let retry = "then `uploadq retry`"
        switch reply.code {
        case "SignatureDoesNotMatch":
            return .permanent("signature", base + "; the secret key of destination \"\(destination)\" does not "
                + "belong to its access key (or a proxy changed the request): fix the credentials, \(retry)")
        case "ExpiredToken", "TokenRefreshRequired":
            // Session credentials run out and get refreshed (a helper or SSO rewrites the credentials file): the
            // next attempt reads them again.
            return .transient("credentials-expired", base + "; the session token of destination \"\(destination)\" "
                + "expired: refresh the credentials; the upload resumes with them")
        case "InvalidAccessKeyId", "InvalidToken":
            return .permanent("credentials", base + "; the store does not accept the access key or session token "
                + "of destination \"\(destination)\": fix the credentials, \(retry)")
        case "AccessDenied", "AllAccessDisabled", "AccountProblem":
            return .permanent("forbidden", base + "; the credentials of destination \"\(destination)\" may not "
                + "write to bucket \"\(bucket)\": fix the bucket policy or the key's permissions, \(retry)")
        case "NoSuchBucket":
            return .permanent("no-such-bucket", base + "; create bucket \"\(bucket)\" or fix `bucket` of "
                + "destination \"\(destination)\", \(retry)")
        case "AuthorizationHeaderMalformed", "PermanentRedirect", "IllegalLocationConstraintException",
             "InvalidRegion":
            return .permanent("region", base + "; the bucket lives elsewhere: check `region` and `endpoint` of "
                + "destination \"\(destination)\", \(retry)")
        case "EntityTooLarge", "MetadataTooLarge", "KeyTooLongError":
            return .permanent("too-large", base + "; the store refuses this object: \(retry) after changing the "
                + "file, its metadata or key_template")
        case "RequestTimeout", "RequestTimeTooSkewed", "BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch",
             "IncompleteBody", "OperationAborted", "ServiceUnavailable", "SlowDown", "InternalError":
            return TransferFailure(.transient(retryAfter: response.retryAfter()), code: "s3-\(reply.code)", base,
                                   destinationFault: response.status >= 500 || reply.code == "RequestTimeout")
        default:
            var cleaned = response
            cleaned.body = Array(reply.summary.utf8)
            return FailureClassifier.failure(for: cleaned, request: request, destination: destination)
        }
    }

}
