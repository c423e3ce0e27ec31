import Foundation

/// A reply body written as it comes (HTTP/1.1 chunked): the event stream. The connection writes the head, runs
/// `body` with a sink for its chunks, and ends the reply when it returns; the client going away cancels it.
package struct ControlStream: Sendable {
    /// Where a streamed body's chunks go, each written to the socket before `send` returns (a client that does not
    /// read holds its stream up, never the daemon).
    package struct Sink: Sendable {
        package let send: @Sendable (Data) async throws -> Void
    }

    package let body: @Sendable (Sink) async throws -> Void
}
