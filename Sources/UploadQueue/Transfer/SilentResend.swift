/// What libcurl did out of sight with one request's connections, so that its error says what ended it.
///
/// When a reused connection dies before any answer (a receive error or a close), libcurl sends the request again
/// on another connection (a new one, or another from its pool) without telling. It keeps the text of that first
/// failure, the one it recovered from, in the error buffer, and writes none for a later failure: read as it
/// stands, a resent request that then stalls reads "Recv failure: Connection reset by peer" and passes for a
/// timeout. The engine thread feeds this from libcurl's socket and pre-request callbacks; the decisions are pure
/// and tested without a network.
struct SilentResend: Sendable {
    /// Times the request went out on a ready connection.
    private(set) var sends = 0
    /// Whether a connection was being made after the last send (a resend still connecting when it failed).
    private(set) var connecting = false
    /// The error text of the failure libcurl recovered from by resending, once it did.
    private(set) var recovered: String?

    /// Whether libcurl began sending the request again (it may still be connecting for it).
    var hasResent: Bool { sends > 1 || (sends > 0 && connecting) }

    /// A socket was opened; true when that is for a resend, and the error text so far belongs to the failure it
    /// recovers from.
    mutating func socketOpened() -> Bool {
        connecting = true
        return sends > 0
    }

    /// The request is about to go out on a ready connection; true when it is a resend.
    mutating func requestGoingOut() -> Bool {
        sends += 1
        connecting = false
        return sends > 1
    }

    /// Keeps the error text written before a resend (the first one, if libcurl resent more than once).
    mutating func recover(_ text: String) {
        if recovered == nil, !text.isEmpty { recovered = text }
    }

    /// Whether a timeout that ended the request was libcurl's stall check (`stall_timeout`) rather than the connect
    /// timeout, when libcurl left no text to tell: after a resend that had its connection, the stall check is the
    /// only timer still running (uploadq sets no overall timeout).
    var timeoutIsStall: Bool { hasResent && !connecting }
}
