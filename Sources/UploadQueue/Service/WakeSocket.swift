import Dispatch
import Foundation

/// A Unix datagram socket in the state directory through which the CLI wakes a running daemon.
///
/// The message carries no data that matters: any datagram means "look at the database now". Sending never
/// blocks and never fails loudly; the daemon also polls, so a lost poke costs seconds, not work.
final class WakeSocket: Sendable {
    /// Dispatch sources are thread-safe; Swift does not know it.
    nonisolated(unsafe) private let source: DispatchSourceRead
    private let path: String

    /// Binds the socket (replacing a stale one; the caller holds the daemon lock) and calls `onWake` per datagram.
    init(path: String, onWake: @escaping @Sendable () -> Void) throws(UploadQueueError) {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw .system("socket", path: path) }
        unlink(path)
        guard var address = Self.address(path) else {
            close(descriptor)
            throw UploadQueueError(.io, "the state directory path is too long for a Unix socket (max 107 bytes)", path: path)
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else {
            let error = UploadQueueError.system("bind", path: path)
            close(descriptor)
            throw error
        }
        self.path = path
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: DispatchQueue(label: "uploadq.wake"))
        source.setEventHandler {
            var buffer = [UInt8](repeating: 0, count: 64)
            while recv(descriptor, &buffer, buffer.count, 0) >= 0 {}
            onWake()
        }
        source.setCancelHandler { close(descriptor) }
        source.resume()
    }

    deinit {
        source.cancel()
        unlink(path)
    }

    /// Sends a wake-up to whoever listens at `path`; silently does nothing when no daemon runs.
    static func poke(path: String) {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0, var address = address(path) else { return }
        defer { close(descriptor) }
        var byte: UInt8 = 1
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(descriptor, &byte, 1, Int32(MSG_DONTWAIT), $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }

    private static func address(_ path: String) -> sockaddr_un? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
        }
        return address
    }
}
