import Foundation

/// Asks the app's backend for a file's upload target (`mint_url`, with `[mint]`'s credentials), or runs
/// `mint_command`, and reads its answer strictly. The job goes as JSON: `id`, `name`, `size`, `sha256` (empty
/// when not taken yet), `content_type`, `meta`.
///
/// | the backend                        | verdict                                              |
/// |------------------------------------|------------------------------------------------------|
/// | 2xx with a target                  | the target                                           |
/// | 5xx, 408, 429, no answer           | transient (its `Retry-After` honoured)               |
/// | other 4xx                          | permanent, with its status and words                 |
/// | 2xx with something else            | transient `bad-reply`, saying what is wrong          |
/// | the command fails or times out     | transient (what it wrote on standard error is kept nowhere) |
struct Minter: Sendable {
    let source: MintSource
    let destination: String
    /// The backend's client: `[mint]`'s headers and token, to the mint URL's origin only.
    let client: DestinationClient

    init(source: MintSource, destination: String, settings: MintSettings, engine: TransferEngine) {
        self.source = source
        self.destination = destination
        let origin = { () -> CredentialScope in
            guard case .url(let url) = source, let origin = URLOrigin(url: url) else { return .origins([], secure: false) }
            return .origins([origin], secure: origin.scheme == "https")
        }()
        var client = DestinationClient(name: "[mint]", http: settings.http, engine: engine, scope: origin)
        client.pagesAreForeign = true  // a minting backend speaks JSON
        self.client = client
    }

    /// Whether the backend answers at all (the circuit breaker's probe). A command cannot be asked without a
    /// job: the next transfer is the probe.
    func answers() async -> Bool {
        guard case .url(let url) = source else { return true }
        return await client.answers("HEAD", url)
    }

    /// The job as the backend gets it.
    static func request(for job: Job) -> [UInt8] {
        let object: [String: Any] = ["id": job.id.rawValue, "name": job.originalName, "size": job.size,
                                     "sha256": job.sha256, "content_type": job.contentType, "meta": job.meta]
        return Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8))
    }

    /// A fresh target for `job`.
    func mint(for job: Job) async throws(TransferFailure) -> MintedTarget {
        switch source {
        case .url(let url):
            return try await ask(url, job: job)
        case .command(let arguments, let timeout, let passed):
            let input = Self.request(for: job)
            let destination = self.destination
            return try await BlockingWork.runResult { () throws(TransferFailure) -> MintedTarget in
                try Self.run(arguments, timeout: timeout, passing: passed, input: input, destination: destination)
            }.get()
        }
    }

    private func ask(_ url: String, job: Job) async throws(TransferFailure) -> MintedTarget {
        let shown = "POST \(URLRedaction.redact(url))"
        let response = try await client.send("POST", url, headers: [HTTPHeader("Content-Type", "application/json"),
                                                                    HTTPHeader("Accept", "application/json")],
                                             body: .bytes(Self.request(for: job)))
        guard response.isSuccess else {
            let failure = FailureClassifier.failure(for: response, request: "the minting backend's \(shown)",
                                                    destination: destination,
                                                    credentialsConfigured: client.tokens != nil)
            guard failure.kind == .permanent else { throw failure }
            let said = response.bodySummary
            throw .permanent("mint-refused", """
                the minting backend refused to give destination "\(destination)" an upload target for this file: \
                HTTP \(response.status) from \(shown)\(said.isEmpty ? "" : ": \(said)"); fix it at the backend (or \
                [mint]'s credentials), then `uploadq retry`
                """)
        }
        do {
            return try MintedTarget(json: response.body)
        } catch {
            throw TransferFailure(.transient(retryAfter: nil), code: "bad-reply", """
                the minting backend's answer to \(shown) (HTTP \(response.status)) is not an upload target: \
                \(error.reason); it must be {"method": "PUT" or "POST", "url": …, "headers": {…}, "fields": {…}, \
                "expires_at": …, "remote_url": …}
                """, destinationFault: true)
        }
    }

    /// The most a mint command may print.
    static let maximumOutput = 64 << 10

    private static func run(_ arguments: [String], timeout: Duration, passing: [String], input: [UInt8],
                            destination: String) throws(TransferFailure) -> MintedTarget {
        let environment = BoundedCommand.scrubbedEnvironment(passing: passing)
        let program = arguments[0]
        switch BoundedCommand.run(arguments, timeout: timeout, environment: environment, maximumOutput: maximumOutput,
                                  input: input) {
        case .notStarted(let reason):
            throw .permanent("mint-command", "destination \"\(destination)\": cannot run mint_command \(program): \(reason)")
        case .timedOut:
            throw .transient("mint-command", "destination \"\(destination)\": mint_command \(program) did not finish "
                + "within \(timeout) and was killed")
        case .tooMuchOutput:
            throw .transient("mint-command", "destination \"\(destination)\": mint_command \(program) printed more "
                + "than \(maximumOutput / 1024) KiB and was killed")
        case .exited(let status, let stdout, _):
            guard status == 0 else {
                throw .transient("mint-command", "destination \"\(destination)\": mint_command \(program) failed "
                    + "(status \(status)); run it by hand to see why (what it writes on standard error is not kept)")
            }
            do {
                return try MintedTarget(json: Array(stdout.utf8))
            } catch {
                throw .transient("bad-reply", "destination \"\(destination)\": what mint_command \(program) printed is "
                    + "not an upload target: \(error.reason)")
            }
        }
    }
}
