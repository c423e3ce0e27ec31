import Foundation
import Synchronization

/// A destination's bearer token: read from the environment or a file, or printed by a program, and read again
/// when the server rejects it.
///
/// The token itself never appears in an error or a log line; failures name the source (variable, file, program).
actor TokenProvider {
    let source: CredentialSource
    let destination: String
    private var cached: String?
    private var loading: Task<Result<String, TransferFailure>, Never>?
    /// The tokens handed out (the current one and the one before), for redacting a server's echo of them
    /// (`SecretRedaction`) where the actor cannot be asked.
    private let handedOut = Mutex<[String]>([])

    /// The tokens handed out lately.
    nonisolated var recentTokens: [String] { handedOut.withLock { $0 } }

    init(source: CredentialSource, destination: String) {
        self.source = source
        self.destination = destination
    }

    /// The current token, loading it on first use.
    func token() async throws(TransferFailure) -> String {
        if let cached { return cached }
        if let loading { return try await loading.value.get() }
        let source = self.source
        let destination = self.destination
        let task = Task { () -> Result<String, TransferFailure> in
            await BlockingWork.runResult { () throws(TransferFailure) -> String in
                try Self.load(source, destination: destination)
            }
        }
        loading = task
        let result = await task.value
        loading = nil
        if case .success(let token) = result {
            cached = token
            handedOut.withLock { $0 = Array(($0 + [token]).suffix(2)) }
        }
        return try result.get()
    }

    /// Loads the token again after the server refused `rejected`; a token already replaced by another transfer's
    /// refresh is returned as it is, so one 401 burst runs the command once.
    func refresh(after rejected: String) async throws(TransferFailure) -> String {
        if let cached, cached != rejected { return cached }
        cached = nil
        return try await token()
    }

    private static func load(_ source: CredentialSource, destination: String) throws(TransferFailure) -> String {
        let token: String
        switch source {
        case .environment(let name):
            guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
                throw .permanent("credentials", "destination \"\(destination)\": the environment variable \(name) "
                    + "(token_env) is not set for the daemon. Better than setting it (Environment= is readable by "
                    + "any local user with `systemctl show`): put the token in a file, give it to the unit with "
                    + "LoadCredential=token:/etc/uploadq/token and set token_file = \"%d/token\"; restart, then "
                    + "`uploadq retry`")
            }
            token = value
        case .file(let named):
            guard let path = CredentialPath.resolve(named, environment: ProcessInfo.processInfo.environment) else {
                throw .permanent("credentials", "destination \"\(destination)\": token_file "
                    + CredentialPath.missing(named) + "; then `uploadq retry`")
            }
            guard let data = FileManager.default.contents(atPath: path) else {
                throw .permanent("credentials", "destination \"\(destination)\": cannot read token_file \(path); "
                    + "fix it, then `uploadq retry`")
            }
            token = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        case .command(let arguments, let timeout, let passed):
            token = try runCommand(arguments, timeout: timeout, passing: passed, destination: destination)
        }
        let trimmed = token.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, !trimmed.contains(where: { $0.isNewline || $0 == "\0" }) else {
            throw .permanent("credentials", "destination \"\(destination)\": the token from \(describe(source)) is empty "
                + "or not one line")
        }
        return trimmed
    }

    /// The most a token program may print: a token is a line; more is a program gone wrong.
    static let maximumOutput = 64 << 10

    /// Runs the token program (see `BoundedCommand`) with a scrubbed environment (`PATH`, `HOME`, `LANG` and the
    /// variables in `passing`), and returns its first line of output. What it says on standard error is not
    /// repeated anywhere: it may hold what the token is made from.
    private static func runCommand(_ arguments: [String], timeout: Duration, passing: [String], destination: String)
        throws(TransferFailure) -> String
    {
        let environment = BoundedCommand.scrubbedEnvironment(passing: passing)
        switch BoundedCommand.run(arguments, timeout: timeout, environment: environment, maximumOutput: maximumOutput) {
        case .notStarted(let reason):
            throw .permanent("credentials", "destination \"\(destination)\": cannot run token_command \(arguments[0]): "
                + reason)
        case .timedOut:
            throw .transient("credentials", "destination \"\(destination)\": token_command \(arguments[0]) did not "
                + "finish within \(timeout) and was killed")
        case .tooMuchOutput:
            throw .transient("credentials", "destination \"\(destination)\": token_command \(arguments[0]) printed more "
                + "than \(maximumOutput / 1024) KiB and was killed; a token is one line")
        case .exited(let status, let stdout, _):
            guard status == 0 else {
                throw .transient("credentials", "destination \"\(destination)\": token_command \(arguments[0]) failed "
                    + "(status \(status)); run it by hand to see why (what it writes on standard error is not kept: it "
                    + "may hold secrets)")
            }
            return stdout.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        }
    }

    private static func describe(_ source: CredentialSource) -> String {
        switch source {
        case .environment(let name): "token_env \(name)"
        case .file(let path): "token_file \(path)"
        case .command(let arguments, _, _): "token_command \(arguments[0])"
        }
    }
}
