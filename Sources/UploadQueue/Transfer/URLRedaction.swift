/// Makes a URL safe to log or print: drops `user:password@` and masks query values that look like credentials
/// (presigned S3 and GCS URLs, signed CDN URLs, tokens).
package enum URLRedaction {
    private static let secretParameters: Set<String> = [
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature", "sig", "token", "access_token",
        "auth", "key", "apikey", "api_key", "password", "secret",
        // Google Cloud Storage, CloudFront, OAuth and the like.
        "x-goog-signature", "x-goog-credential", "x-goog-security-token", "googleaccessid", "key-pair-id", "policy",
        "client_secret", "session_token", "refresh_token", "id_token", "upload_token", "jwt",
    ]

    /// `text` with every query (from `?` to the next space, quote or bracket) cut to `?…`: for free text that may
    /// hold URLs whose parameters are not all known, such as a storage's error echoing a presigned URL it refused.
    static func withoutQueries(_ text: String) -> String {
        text.replacingOccurrences(of: "\\?[^\\s\"'<>]*", with: "?…", options: .regularExpression)
    }

    /// `url` with its user info dropped and its credential-like query values replaced by `REDACTED`.
    package static func redact(_ url: String) -> String {
        var text = url
        if let scheme = text.range(of: "://") {
            let afterScheme = text[scheme.upperBound...]
            let authorityEnd = afterScheme.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? text.endIndex
            if let at = text[scheme.upperBound..<authorityEnd].lastIndex(of: "@") {
                text.replaceSubrange(scheme.upperBound...at, with: "")
            }
        }
        guard let question = text.firstIndex(of: "?") else { return text }
        let base = text[..<question]
        let query = text[text.index(after: question)...]
        let parts = query.split(separator: "&", omittingEmptySubsequences: false).map { part -> String in
            let pieces = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pieces.count == 2, secretParameters.contains(pieces[0].lowercased()) else { return String(part) }
            return "\(pieces[0])=REDACTED"
        }
        return base + "?" + parts.joined(separator: "&")
    }
}
