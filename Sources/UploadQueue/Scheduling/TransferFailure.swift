/// Why a transfer did not finish, and whether trying again can help.
///
/// Uploaders classify their own errors (a 503 is transient, a 403 permanent); the scheduler only reads `kind`.
package struct TransferFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What the scheduler does next.
    public enum Kind: Sendable, Equatable {
        /// Try again on the retry schedule (or after the server's `Retry-After`, when longer).
        case transient(retryAfter: Duration?)
        /// Needs a person: the job fails permanently with this message.
        case permanent
        /// Stopped on request (graceful stop or cancel): no verdict, the job keeps its resume state.
        case interrupted
    }

    /// What the scheduler does next.
    public var kind: Kind
    /// Stable short code, e.g. `io`, `source-changed`, `target-exists`, `verification`.
    public var code: String
    /// What happened, with the job's context, and what to do next.
    public var message: String
    /// True when the destination itself failed (unreachable, stalled, 5xx): these failures open its circuit
    /// breaker; local problems (disk, source file) do not.
    public var destinationFault: Bool

    /// A failure with its verdict, stable code and message.
    public init(_ kind: Kind, code: String, _ message: String, destinationFault: Bool = false) {
        self.kind = kind
        self.code = code
        self.message = message
        self.destinationFault = destinationFault
    }

    /// The target's disk (or quota) is full: retried on the schedule, the partial copy kept to resume from.
    static func targetFull(_ message: String) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: "target-full",
                        message + "; the target's disk is full: the copy resumes once there is room", destinationFault: true)
    }

    static func transient(_ code: String, _ message: String) -> TransferFailure {
        TransferFailure(.transient(retryAfter: nil), code: code, message)
    }

    static func permanent(_ code: String, _ message: String) -> TransferFailure {
        TransferFailure(.permanent, code: code, message)
    }

    static let interrupted = TransferFailure(.interrupted, code: "interrupted", "the transfer was stopped")

    /// The destination's storage is full (507, a quota): the job goes back to pending without a failure counted;
    /// the scheduler holds the destination's jobs as `quota-full` and tries one now and then.
    static func quotaFull(_ message: String) -> TransferFailure {
        TransferFailure(.interrupted, code: quotaFullCode, message)
    }

    /// The failure with `secret` (a minted, presigned URL) named as `shown` wherever its message has it, whole
    /// or redacted by `URLRedaction` (which knows only some signature parameters).
    func hiding(_ secret: String, as shown: String) -> TransferFailure {
        var failure = self
        for form in [secret, URLRedaction.redact(secret)] where !form.isEmpty {
            failure.message = failure.message.replacingOccurrences(of: form, with: shown)
        }
        return failure
    }

    /// The code of `quotaFull`.
    static let quotaFullCode = "quota-full"

    /// What answered proved nothing (a captive portal, a proxy, a server that does not show it holds the bytes):
    /// a network condition, not the server's verdict. The job goes back to pending without a failure counted and
    /// keeps its resume state; the scheduler holds the destination's jobs as `unverified-answer` and tries one now
    /// and then. `message` says what answered and what to do. `portal`: the answer bears a portal's marks (a login
    /// page, a redirect away, a 511, an intercepted TLS handshake), which a person logging in removes: the trials
    /// then come at most a minute apart; a proof that failed otherwise (a size, a digest) waits as a circuit does.
    /// `code`: a more precise one among `portalCodes` (`tls-verification`).
    static func unverified(_ message: String, portal: Bool = false, code: String? = nil) -> TransferFailure {
        TransferFailure(.interrupted, code: code ?? (portal ? portalAnswerCode : unverifiedAnswerCode), message)
    }

    /// The code of `unverified` for a proof that failed.
    static let unverifiedAnswerCode = "unverified-answer"
    /// The code of `unverified` for an answer with a captive portal's marks.
    static let portalAnswerCode = "portal-answer"
    /// The codes of answers with a portal's marks: a portal's own, and a certificate that does not verify.
    static let portalCodes: Set<String> = [portalAnswerCode, "tls-verification"]

    /// Whether this is an answer that proved nothing (`unverified`): no verdict.
    var isUnverified: Bool {
        kind == .interrupted && (code == Self.unverifiedAnswerCode || Self.portalCodes.contains(code))
    }

    /// Whether it bears a captive portal's marks (which a person logging in removes).
    var bearsPortalMarks: Bool { isUnverified && Self.portalCodes.contains(code) }

    /// A failed system call while reading or writing local files: transient unless the file is gone or the
    /// disk refuses for good.
    static func system(_ call: String, path: String, errno code: Int32) -> TransferFailure {
        let reason = String(cString: strerror(code))
        switch code {
        case ENOENT:
            return .permanent("source-missing", "\(call) \(path): \(reason)")
        case EACCES, EPERM, EROFS:
            return .permanent("io", "\(call) \(path): \(reason); fix the permissions, then `uploadq retry`")
        case ENOSPC, EDQUOT:
            return .targetFull("\(call) \(path): \(reason)")
        default:
            return .transient("io", "\(call) \(path): \(reason)")
        }
    }

    public var description: String { message }
}

import Foundation
