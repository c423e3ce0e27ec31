/// Where a destination's credentials (its bearer token and custom headers) may go: curl's rule for redirects,
/// applied to every URL a server hands uploadq (a tus `Location`, an upload URL kept for a resume).
///
/// They go to the origin of the configured URL and to the origins the admin listed in `trusted_origins`. A URL on
/// any other origin is still used, without them. A URL that would take an `https` destination to plain `http` is
/// refused: the file itself would travel in the clear.
enum CredentialScope: Sendable, Equatable {
    /// The configured origin and the trusted ones; `secure` when the configured URL is `https`.
    case origins(Set<URLOrigin>, secure: Bool)
    /// Any URL: for patches, whose URLs come from the admin's own callers or from `[patch] allowed_urls`.
    case everyURL

    /// The scope of `destination`: its URL's origin and its `trusted_origins`.
    init(destination: Destination) {
        let configured = URLOrigin(url: destination.url)
        self = .origins(Set(destination.trustedOrigins + (configured.map { [$0] } ?? [])),
                        secure: configured?.scheme == "https")
    }

    /// The origins a destination sends to with its credentials; empty for `everyURL`.
    var trustedOrigins: Set<URLOrigin> {
        if case .origins(let trusted, _) = self { return trusted }
        return []
    }

    /// What to do with a request to `url`.
    enum Verdict: Sendable, Equatable {
        case withCredentials
        case withoutCredentials
        /// Not sent at all; the reason says why and what to do.
        case refused(String)
    }

    func verdict(for url: String) -> Verdict {
        guard case .origins(let trusted, let secure) = self else { return .withCredentials }
        guard let origin = URLOrigin(url: url) else {
            return .refused("\(URLRedaction.redact(url)) is not an http:// or https:// URL")
        }
        if trusted.contains(origin) { return .withCredentials }
        if secure && origin.scheme == "http" {
            return .refused("""
                the server sent uploadq from https to plain http (\(URLRedaction.redact(url))); uploadq does not \
                downgrade, as the file would travel in the clear. Fix the server's upload URLs, or list \
                \(origin) in the destination's trusted_origins if that is meant
                """)
        }
        return .withoutCredentials
    }
}
