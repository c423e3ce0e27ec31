import Foundation

/// Tells systemd about the daemon's state (`READY=1`, `STATUS=…`) through `$NOTIFY_SOCKET`, if it is set.
package struct SystemdNotifier: Sendable {
    private let socketPath: String?

    /// Reads `$NOTIFY_SOCKET` (a leading `@` names an abstract socket).
    package init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        socketPath = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Sends one notification (`READY=1`, `STATUS=…`, `STOPPING=1`); does nothing outside systemd.
    ///
    /// A datagram to a receiver that does not read (its queue holds `net.unix.max_dgram_qlen` messages: 10 by the
    /// kernel's default, 512 once systemd raised it) would block the sender for as long as it does not read: a
    /// daemon whose notify socket is not read would stop at its next watchdog ping, and never end when told to
    /// stop. So a send waits at most `patience` for room, blocking the calling thread that long at worst, and is
    /// then dropped. Under a microsecond (the watchdog's pings) it never waits: a ping lost to a manager too busy
    /// to read is followed by the next, half a watchdog interval later.
    package func notify(_ message: String, patience: Duration = .seconds(1)) {
        guard let socketPath else { return }
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(socketPath.utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        let payload = Array(message.utf8)
        var flags = Int32(MSG_NOSIGNAL)
        let (seconds, attoseconds) = patience.components
        // A zero timeval would mean "no timeout": below a microsecond, and if the timeout cannot be set, the send
        // does not wait at all.
        var timeout = timeval(tv_sec: Int(clamping: seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        if patience < .microseconds(1)
            || setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size)) != 0 {
            flags |= Int32(MSG_DONTWAIT)
        }
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(descriptor, payload, payload.count, flags, $0, length)
            }
        }
    }
}
