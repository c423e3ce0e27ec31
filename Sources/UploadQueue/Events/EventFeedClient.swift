import Foundation

/// A reader of a running daemon's event stream (`EventFeed`): connects to its socket and hands over its JSON lines
/// as they come, read on a thread of its own.
public final class EventFeedClient: Sendable {
    private let descriptor: Int32

    /// Connects to the stream at `path` (`Configuration.eventSocketPath`); throws when no daemon serves it.
    public init(path: String) throws(UploadQueueError) {
        guard let address = UnixSocketAddress.make(path) else {
            throw UploadQueueError(.io, "the events socket path is too long for a Unix socket", path: path)
        }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw .system("socket", path: path) }
        guard UnixSocketAddress.with(address, { connect(descriptor, $0, $1) }) == 0 else {
            let error = UploadQueueError.system("connect", path: path)
            close(descriptor)
            throw error
        }
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }

    /// The lines as they arrive, without their newlines; the stream ends when the daemon closes the connection.
    /// Iterate it once.
    public func lines() -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream<String>.makeStream(bufferingPolicy: .unbounded)
        let descriptor = self.descriptor
        // The thread holds the client (and so its descriptor) until the stream ends.
        let thread = Thread { [self] in
            defer { withExtendedLifetime(self) {} }
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 16 << 10)
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                pending += buffer[0..<count]
                while let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    continuation.yield(String(decoding: pending[..<end], as: UTF8.self))
                    pending.removeFirst(end + 1)
                }
            }
            continuation.finish()
        }
        thread.name = "uploadq-events-reader"
        // A reader that stops iterating ends the read.
        continuation.onTermination = { _ in _ = shutdown(descriptor, Int32(SHUT_RDWR)) }
        thread.start()
        return stream
    }
}
