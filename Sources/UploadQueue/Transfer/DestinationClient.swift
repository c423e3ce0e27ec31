import Foundation

/// Sends requests to one destination: its headers and bearer token added where they may go (`CredentialScope`),
/// a 401 answered by refreshing the token once, and transport errors turned into transfer failures.
struct DestinationClient: Sendable {
    /// The destination's name (or `[patch]`), for messages.
    let name: String
    /// Its headers, credentials, TLS and timeouts.
    let http: HTTPSettings
    let engine: TransferEngine
    let tokens: TokenProvider?
    /// Which URLs get the destination's credentials.
    let scope: CredentialScope
    /// The server never answers with an HTML page (an app's backend speaking JSON): a 4xx page is a portal's.
    var pagesAreForeign = false
    /// A URL outside `scope`'s origins (one the server chose) may lead to a loopback, private or link-local peer.
    var privateTargetsAllowed = true

    /// A client named `name` (a destination, or `[patch]`) whose credentials go where `scope` says.
    init(name: String, http: HTTPSettings, engine: TransferEngine, scope: CredentialScope) {
        self.name = name
        self.http = http
        self.engine = engine
        tokens = http.credentials.map { TokenProvider(source: $0, destination: name) }
        self.scope = scope
    }

    /// A client for `destination`: its credentials go to its own origin and its `trusted_origins`.
    init(destination: Destination, engine: TransferEngine) {
        self.init(name: destination.name, http: destination.http, engine: engine,
                  scope: CredentialScope(destination: destination))
        privateTargetsAllowed = destination.allowsPrivateTargets
    }

    /// Whether libcurl goes through a proxy named in the environment (`https_proxy` and the like): its peer is
    /// then the proxy, whose address says nothing of the target's.
    static let proxied: Bool = {
        let environment = ProcessInfo.processInfo.environment
        return ["http_proxy", "https_proxy", "all_proxy", "HTTPS_PROXY", "ALL_PROXY"].contains {
            !(environment[$0] ?? "").isEmpty
        }
    }()

    /// Refuses a URL a server handed over that this client would not send to (see `CredentialScope`): a
    /// permanent failure, before anything is kept or sent.
    func check(_ url: String) throws(TransferFailure) {
        if case .refused(let why) = scope.verdict(for: url) { throw .permanent("insecure-url", why) }
    }

    /// Sends one request and returns the response whatever its status (after at most one token refresh); throws
    /// when no response came, and when what answered was a captive portal or a proxy, not the server
    /// (`PortalSignal`: an `unverified` failure). The destination's headers and token go only to the URLs its scope
    /// trusts. `htmlExpected`: a 2xx HTML page may be the server's own answer.
    func send(_ method: String, _ url: String, headers: [HTTPHeader] = [], body: RequestBody = .empty,
              paced: Bool = false, htmlExpected: Bool = false, progress: (@Sendable (Int64) -> Void)? = nil)
        async throws(TransferFailure) -> HTTPResponse
    {
        let credentials: Bool
        switch scope.verdict(for: url) {
        case .withCredentials: credentials = true
        case .withoutCredentials: credentials = false
        case .refused(let why): throw .permanent("insecure-url", why)
        }
        var token = credentials ? try await tokens?.token() : nil
        var refreshed = false
        while true {
            var fields = credentials
                ? http.headers.sorted { $0.key < $1.key }.map { HTTPHeader($0.key, $0.value) } : []
            if let token { fields.append(HTTPHeader("Authorization", "Bearer \(token)")) }
            fields += headers
            var options = TransferOptions(http, paced: paced, trafficLabel: name)
            // A URL the server chose (not on the destination's own or trusted origins) must not lead the daemon
            // to what only the device can reach.
            options.refusesPrivatePeers = !credentials && !privateTargetsAllowed && !Self.proxied
            let request = HTTPRequest(method: method, url: url, headers: fields, body: body, options: options)
            let response: HTTPResponse
            do {
                response = try await engine.perform(request, progress: progress)
            } catch {
                throw FailureClassifier.failure(for: error, method: method)
            }
            if response.status == 401, let tokens, let rejected = token, !refreshed {
                refreshed = true
                token = try await tokens.refresh(after: rejected)
                continue
            }
            if let signal = PortalSignal.read(response, requestURL: url, htmlExpected: htmlExpected,
                                              trusted: scope.trustedOrigins, pagesAreForeign: pagesAreForeign) {
                throw signal.failure(request: "\(method) \(URLRedaction.redact(url))", destination: name)
            }
            return response
        }
    }

    /// Whether the server answers at all, for the circuit breaker's probe: any status but 5xx, 408 and 429 counts
    /// (a 404 or 405 from a live server included).
    func answers(_ method: String, _ url: String, headers: [HTTPHeader] = []) async -> Bool {
        guard let response = try? await send(method, url, headers: headers) else { return false }
        return response.status < 500 && response.status != 429 && response.status != 408
    }

    /// The verdict for an answer the uploader did not expect, with this destination's name and credentials.
    func failure(for response: HTTPResponse, request: String) -> TransferFailure {
        FailureClassifier.failure(for: response, request: request, destination: name,
                                  credentialsConfigured: tokens != nil,
                                  secrets: Array(http.headers.values) + (tokens?.recentTokens ?? []))
    }
}
