import Dispatch
import Foundation
import Synchronization

/// A Unix datagram socket in the state directory through which the CLI wakes a running daemon.
///
/// Any datagram means "look at the database now" (what changed is in it, and in its event log). Sending never
/// blocks and never fails loudly; the daemon also polls, so a lost poke costs seconds, not work.
final class WakeSocket: Sendable {
    /// Dispatch sources are thread-safe; Swift does not know it.
    nonisolated(unsafe) private let source: DispatchSourceRead
    private let path: String
    private let closed = Atomic(false)

    /// Binds the socket (replacing a stale one; the caller holds the daemon lock) and calls `onWake` per batch of
    /// datagrams.
    init(path: String, onWake: @escaping @Sendable () -> Void) throws(UploadQueueError) {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw .system("socket", path: path) }
        unlink(path)
        guard let address = UnixSocketAddress.make(path) else {
            close(descriptor)
            throw UploadQueueError(.io, "the state directory path is too long for a Unix socket (max 107 bytes)", path: path)
        }
        let bound = UnixSocketAddress.with(address) { bind(descriptor, $0, $1) }
        guard bound == 0 else {
            let error = UploadQueueError.system("bind", path: path)
            close(descriptor)
            throw error
        }
        self.path = path
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: DispatchQueue(label: "uploadq.wake"))
        source.setEventHandler {
            var buffer = [UInt8](repeating: 0, count: 256)
            // Every datagram waiting is read (a longer one is cut: its words do not matter).
            while recv(descriptor, &buffer, buffer.count, 0) >= 0 {}
            onWake()
        }
        source.setCancelHandler { close(descriptor) }
        source.resume()
    }

    deinit { stop() }

    /// Stops listening and removes the socket (once; the next call does nothing).
    func stop() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        source.cancel()
        unlink(path)
    }

    /// Sends a wake-up to whoever listens at `path`; silently does nothing when no daemon runs.
    static func poke(path: String) {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0, let address = UnixSocketAddress.make(path) else { return }
        defer { close(descriptor) }
        let bytes = Array("wake".utf8)
        _ = UnixSocketAddress.with(address) { sendto(descriptor, bytes, bytes.count, Int32(MSG_DONTWAIT), $0, $1) }
    }
}
