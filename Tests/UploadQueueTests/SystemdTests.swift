import Foundation
import Logging
import Testing
@testable import UploadQueue

/// The daemon under systemd's eyes: `READY=1` on a notify socket of the test's own, then `WATCHDOG=1` at half the
/// `WATCHDOG_USEC` interval while it is healthy, and `STOPPING=1` at the end.
struct SystemdTests {
    /// A datagram socket collecting what the daemon sends.
    final class NotifySocket: @unchecked Sendable {
        let path: String
        let descriptor: Int32

        init(path: String) throws {
            self.path = path
            descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            #expect(bound == 0)
            var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        /// Messages received within `seconds`.
        func receive(for seconds: Double) -> [String] {
            var messages: [String] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                if count > 0 { messages.append(String(decoding: buffer[0..<count], as: UTF8.self)) }
            }
            return messages
        }

        deinit {
            close(descriptor)
            unlink(path)
        }
    }

    @Test("READY=1 once the queue runs, WATCHDOG=1 about every WATCHDOG_USEC/2 while healthy, STOPPING=1 at the end")
    func notifyAndWatchdog() throws {
        let sandbox = try Sandbox()
        let socket = try NotifySocket(path: sandbox.root + "/notify.sock")
        let daemon = try DaemonProcess(sandbox: sandbox, environment: [
            "NOTIFY_SOCKET": socket.path, "WATCHDOG_USEC": "400000",
        ])
        let messages = socket.receive(for: 2.5)
        #expect(daemon.terminate() < .seconds(5))
        let stopping = socket.receive(for: 0.5)
        #expect(messages.first?.hasPrefix("READY=1") == true, "\(messages)")
        let pings = messages.filter { $0 == "WATCHDOG=1" }.count
        #expect(pings >= 6 && pings <= 16, "\(pings) watchdog pings in 2.5 s at a 0.2 s period")
        #expect(messages.allSatisfy { !$0.hasPrefix("ERRNO=") }, "a child process spoke for the daemon: \(messages)")
        #expect(stopping.contains("STOPPING=1"), "\(stopping)")
    }

    @Test("no watchdog when systemd asks for none, or asks another process")
    func noWatchdog() throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let notifier = SystemdNotifier(environment: [:])
        let logger = Logger(label: "test")
        #expect(SystemdWatchdog(queue: queue, notifier: notifier, logger: logger, environment: [:]) == nil)
        #expect(SystemdWatchdog(queue: queue, notifier: notifier, logger: logger,
                                environment: ["WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"]) == nil)
        #expect(SystemdWatchdog(queue: queue, notifier: notifier, logger: logger,
                                environment: ["WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "\(getpid())"]) != nil)
    }
}
