import Foundation

/// Where and how to patch the app's record once the file is uploaded (delivered by the patch step).
///
/// From the CLI (`--patch-url`) and the library, any http(s) URL; from a spool sidecar, only one under `[patch]
/// allowed_urls` (`PatchAuthority`).
public struct PatchTarget: Sendable, Equatable, Codable {
    /// The record's URL.
    public var url: String
    /// The HTTP method; nil: `[patch] method`.
    public var method: String?
    /// The body template; nil: `[patch] body`.
    public var body: String?
    /// Headers of this job's own, beside the `[patch]` ones.
    public var headers: [String: String]?

    /// A target at `url`, with `[patch]`'s method and body unless given.
    public init(url: String, method: String? = nil, body: String? = nil, headers: [String: String]? = nil) {
        self.url = url
        self.method = method
        self.body = body
        self.headers = headers
    }

    /// The URL safe to show: credentials in it masked.
    public var displayURL: String { URLRedaction.redact(url) }
}
