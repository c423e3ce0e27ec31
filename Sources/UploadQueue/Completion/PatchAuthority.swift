import Foundation

/// What a patch target may be: well formed for everyone, and for a spool sidecar also within what the admin
/// allowed.
///
/// A patch request carries the `[patch]` token and headers. The CLI and the library are the admin's own callers
/// and may name any URL. A sidecar is written by whoever can write into the spool, so its target must lie under
/// one of `[patch] allowed_urls` with no query, use a method that writes a record, set only the headers
/// `[patch] sidecar_headers` lists, and send the config's body: the credentials and the request's framing are
/// uploadq's.
enum PatchAuthority {
    /// Refuses a patch target now rather than at delivery: an http(s) URL, a method token, a body template with
    /// known placeholders, one-line headers.
    static func check(_ patch: PatchTarget) throws(UploadQueueError) {
        let limits = StoredValueLimits.self
        guard patch.url.utf8.count <= limits.patchURLBytes else {
            throw UploadQueueError(.invalidArgument, "the patch URL is \(patch.url.utf8.count) bytes; at most "
                + "\(limits.patchURLBytes / 1024) KiB")
        }
        guard (patch.headers ?? [:]).count <= limits.patchHeaders,
              (patch.headers ?? [:]).allSatisfy({ $0.key.utf8.count + $0.value.utf8.count <= limits.patchHeaderBytes }) else {
            throw UploadQueueError(.invalidArgument, "the patch has more than \(limits.patchHeaders) headers, or one of "
                + "more than \(limits.patchHeaderBytes / 1024) KiB")
        }
        if let body = patch.body, body.utf8.count > limits.patchBodyBytes {
            throw UploadQueueError(.invalidArgument, "the patch body template is \(body.utf8.count) bytes; at most "
                + "\(limits.patchBodyBytes / 1024) KiB")
        }
        if let method = patch.method, method.utf8.count > 32 {
            throw UploadQueueError(.invalidArgument, "the patch method is \(method.utf8.count) bytes; at most 32")
        }
        let lowered = patch.url.lowercased()
        guard lowered.hasPrefix("http://") || lowered.hasPrefix("https://"), URL(string: patch.url)?.host != nil else {
            throw UploadQueueError(.invalidArgument, "patch URL \"\(URLRedaction.redact(patch.url))\" is not an "
                + "http:// or https:// URL")
        }
        if let method = patch.method, !PatchSettings.isMethod(method) {
            throw UploadQueueError(.invalidArgument, "patch method \"\(method)\" is not an HTTP method (PATCH, PUT, POST…)")
        }
        if let body = patch.body {
            do {
                _ = try PatchBody(body)
            } catch {
                throw UploadQueueError(.invalidArgument, error.message)
            }
        }
        for (name, value) in patch.headers ?? [:] {
            let valid = !name.isEmpty && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_".contains($0)) }
            guard valid, !value.contains(where: \.isNewline) else {
                throw UploadQueueError(.invalidArgument, "patch header \"\(name)\" is not a valid header")
            }
        }
    }

    /// The methods a sidecar's patch may use: those that write a record.
    static let sidecarMethods: Set<String> = ["PATCH", "PUT", "POST"]

    /// Whether `[patch] sidecar_headers` may list `name`: a header token that is none of the reserved ones.
    static func mayListForSidecars(_ name: String) -> Bool {
        let lowered = name.lowercased()
        let token = !name.isEmpty && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_".contains($0)) }
        return token && !reservedHeaders.contains(lowered) && !lowered.hasPrefix("proxy-")
            && !lowered.hasPrefix("x-forwarded-")
    }

    /// Headers `[patch] sidecar_headers` may never list, lowercased: the credentials (uploadq adds the `[patch]` ones), the
    /// host, the request's framing, and the rerouting headers. Any `Proxy-*` and `X-Forwarded-*` header is refused
    /// too.
    static let reservedHeaders: Set<String> = [
        "authorization", "cookie", "host", "content-length", "transfer-encoding", "connection", "upgrade", "te",
        "trailer", "expect", "keep-alive", "idempotency-key",
        // Headers frameworks and proxies use to reroute a request or change its method, around `allowed_urls`.
        "forwarded", "x-original-url", "x-rewrite-url", "x-http-method-override", "x-http-method", "x-method-override",
    ]

    /// Why a spool sidecar may not name `patch` under `settings` (said of the sidecar: "names the patch target
    /// …"), or nil when it may (see the type's doc).
    static func sidecarRefusal(_ patch: PatchTarget, settings: PatchSettings) -> String? {
        let url = URLRedaction.redact(patch.url)
        if patch.url.contains("?") || patch.url.contains("#") {
            return """
                names the patch target \(url) with a query or fragment; a sidecar names the record's URL alone (what \
                a query would add to the request is the admin's to choose)
                """
        }
        if settings.allowedURLs.isEmpty {
            return """
                names the patch target \(url), and a sidecar may name one only under a prefix listed in [patch] \
                allowed_urls, where none is listed
                """
        }
        guard settings.allowedURLs.contains(where: { $0.admits(patch.url) }) else {
            return """
                names the patch target \(url), which is not under any of [patch] allowed_urls \
                (\(settings.allowedURLs.map(\.description).joined(separator: ", ")))
                """
        }
        if let method = patch.method, !sidecarMethods.contains(method) {
            return "names the patch method \(method); a sidecar may use PATCH, PUT or POST"
        }
        for name in (patch.headers ?? [:]).keys.sorted() where !settings.sidecarHeaders.contains(name.lowercased()) {
            let listed = settings.sidecarHeaders.sorted().joined(separator: ", ")
            return """
                sets the patch header \(SafeText.escaped(name)), which [patch] sidecar_headers does not list (\
                \(listed.isEmpty ? "it lists none" : listed)); credentials, the host and the request's framing come \
                from the config alone
                """
        }
        return nil
    }
}
