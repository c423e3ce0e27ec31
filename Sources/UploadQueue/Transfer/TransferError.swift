/// Why an HTTP exchange produced no response: the network, TLS, a stall, our own body, or a cancel.
///
/// `code` is stable (metric labels, classification); `message` says what happened for people and never holds
/// header values, so no token can leak through it.
struct TransferError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Code: String, Sendable, Equatable {
        case dns
        case connect
        case timeout
        /// Below the minimum rate for the stall window.
        case stall
        case tls
        /// The server's certificate did not verify: needs `ca_file` or a fixed server, never a retry storm.
        case tlsVerification = "tls-verification"
        case send
        case receive
        /// The connection closed before a response arrived.
        case emptyReply = "empty-reply"
        /// The reply was not HTTP, or not HTTP we can read.
        case badReply = "bad-reply"
        case invalidURL = "invalid-url"
        /// Our own body ended early: the file shrank while it was sent.
        case sourceRead = "source-read"
        /// Our own body could not be read (an I/O error on the local disk).
        case sourceIO = "source-io"
        case cancelled
        /// The peer was a loopback, private or link-local address where the request may not go (`PrivateAddress`).
        case privateTarget = "private-target"
        case other
    }

    var code: Code
    var message: String
    /// libcurl's CURLcode, when it came from libcurl.
    var curlCode: Int?

    var description: String { message }
}
