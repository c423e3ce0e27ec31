import Foundation
import Synchronization

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

    /// The lines as they arrive, without their newlines; the sequence ends when the daemon closes the connection.
    /// Iterate it once.
    ///
    /// At most `EventLines.window` lines wait to be taken: past that the socket is not read, so a consumer that
    /// cannot keep up is dropped by the daemon (with its `dropped` line) instead of growing this process.
    public func lines() -> EventLines {
        let (stream, continuation) = AsyncStream<String>.makeStream(bufferingPolicy: .unbounded)
        let slots = DispatchSemaphore(value: EventLines.window)
        let stopped = StopFlag()
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
                    slots.wait()
                    if stopped.isSet { break }
                    if case .terminated = continuation.yield(String(decoding: pending[..<end], as: UTF8.self)) {
                        continuation.finish()
                        return
                    }
                    pending.removeFirst(end + 1)
                }
                if stopped.isSet { break }
            }
            continuation.finish()
        }
        thread.name = "uploadq-events-reader"
        // A consumer that stops iterating ends the read (and frees a reader waiting for a slot).
        continuation.onTermination = { _ in
            stopped.set()
            _ = shutdown(descriptor, Int32(SHUT_RDWR))
            slots.signal()
        }
        thread.start()
        return EventLines(stream: stream, slots: slots)
    }
}

/// The lines of an event stream, handed over as the consumer takes them (see `EventFeedClient.lines()`).
public struct EventLines: AsyncSequence, Sendable {
    /// How many lines may wait to be taken.
    public static let window = 1024
    let stream: AsyncStream<String>
    let slots: DispatchSemaphore

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<String>.Iterator
        let slots: DispatchSemaphore

        public mutating func next() async -> String? {
            let line = await base.next()
            if line != nil { slots.signal() }
            return line
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator(), slots: slots)
    }
}

/// Set once a consumer stopped taking lines: the reading thread ends instead of waiting for a slot.
private final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}
