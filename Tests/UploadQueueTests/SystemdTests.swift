import Foundation
import Synchronization
import Logging
import Testing
@testable import UploadQueue

/// The daemon under systemd's eyes: `READY=1` on a notify socket of the test's own, then `WATCHDOG=1` at half the
/// `WATCHDOG_USEC` interval while it is healthy, and `STOPPING=1` at the end.
struct SystemdTests {
    /// A datagram socket collecting what the daemon sends, read all the time on a thread of its own as systemd
    /// reads its notify socket, each message with the time it came (taken on that thread, so a busy concurrency
    /// pool does not move it); or, with `reading: false`, never read at all, as by a manager that hangs.
    final class NotifySocket: Sendable {
        typealias Message = (at: ContinuousClock.Instant, text: String)
        let path: String
        /// What was received; `open` turns false when the socket goes, which ends the reading thread.
        private final class Inbox: Sendable {
            let state = Mutex<(messages: [Message], open: Bool)>(([], true))
        }
        private let inbox = Inbox()
        /// The sockets `fill()` sent from, open until this one goes.
        private let senders = Mutex<[Int32]>([])
        private let descriptor: Int32
        private let reading: Bool

        init(path: String, reading: Bool = true) throws {
            self.path = path
            self.reading = reading
            descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard descriptor >= 0 else { throw UploadQueueError.system("socket", path: path) }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            guard bound == 0 else {
                let error = UploadQueueError.system("bind", path: path)
                close(descriptor)
                throw error
            }
            var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            guard reading else { return }
            // The thread owns the descriptor from here: it closes it once the socket is let go.
            Thread { [inbox, descriptor, path] in
                var buffer = [UInt8](repeating: 0, count: 4096)
                while inbox.state.withLock({ $0.open }) {
                    let count = recv(descriptor, &buffer, buffer.count, 0)
                    if count > 0 {
                        let message = (ContinuousClock.now, String(decoding: buffer[0..<count], as: UTF8.self))
                        inbox.state.withLock { $0.messages.append(message) }
                    }
                }
                close(descriptor)
                unlink(path)
            }.start()
        }

        /// Everything received so far, in order.
        var messages: [Message] { inbox.state.withLock { $0.messages } }

        /// Fills the socket's queue with datagrams of its own until it takes no more, whatever
        /// `net.unix.max_dgram_qlen` is here; returns whether a fresh sender then finds it full. A sender whose own
        /// buffer runs out first is kept open (its datagrams stay queued) and another one goes on.
        func fill() -> Bool {
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
            /// Sends one datagram without waiting; whether it went.
            func send(from sender: Int32) -> Bool {
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(sender, "X=1", 3, Int32(MSG_DONTWAIT), $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 3
                    }
                }
            }
            for _ in 0..<1000 {
                let sender = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                guard sender >= 0 else { return false }
                senders.withLock { $0.append(sender) }
                guard send(from: sender) else { return errno == EAGAIN }
                while send(from: sender) {}
            }
            return false
        }

        deinit {
            for sender in senders.withLock({ $0 }) { close(sender) }
            inbox.state.withLock { $0.open = false }
            if !reading {
                close(descriptor)
                unlink(path)
            }
        }
    }

    @Test("READY=1 once the queue runs, WATCHDOG=1 about every WATCHDOG_USEC/2 while healthy, STOPPING=1 at the end")
    func notifyAndWatchdog() async throws {
        let sandbox = try Sandbox()
        let socket = try NotifySocket(path: sandbox.root + "/notify.sock")
        let daemon = try DaemonProcess(sandbox: sandbox, environment: [
            "NOTIFY_SOCKET": socket.path, "WATCHDOG_USEC": "400000",
        ])
        let ready = await eventually(timeout: .seconds(20)) { socket.messages.first?.text.hasPrefix("READY=1") == true }
        #expect(ready, "\(socket.messages.map(\.text))\n\(daemon.log.suffix(2000))")
        let readyAt = try #require(socket.messages.first?.at)
        // The pings of the 2.5 s after READY=1, by the time each came.
        try await Task.sleep(until: readyAt + .seconds(2.6))
        let window = socket.messages.filter { $0.at <= readyAt + .seconds(2.5) }.map(\.text)
        #expect(await daemon.terminate() < .seconds(5))
        let stopping = await eventually(timeout: .seconds(2)) { socket.messages.last?.text == "STOPPING=1" }
        let pings = window.filter { $0 == "WATCHDOG=1" }.count
        #expect(pings >= 6 && pings <= 16, "\(pings) watchdog pings in 2.5 s at a 0.2 s period")
        #expect(socket.messages.allSatisfy { !$0.text.hasPrefix("ERRNO=") },
                "a child process spoke for the daemon: \(socket.messages.map(\.text))")
        #expect(stopping, "\(socket.messages.suffix(3).map(\.text))")
    }

    @Test("a notify socket nobody reads does not hold the daemon: it gets ready, uploads, and stops within 5 s")
    func notifySocketNotRead() async throws {
        let sandbox = try Sandbox()
        // Full before the daemon starts: a blocking send would hang READY=1, the watchdog's pings and the stop.
        let socket = try NotifySocket(path: sandbox.root + "/notify.sock", reading: false)
        #expect(socket.fill(), "the notify socket's queue could not be filled")
        let daemon = try DaemonProcess(sandbox: sandbox, environment: [
            "NOTIFY_SOCKET": socket.path, "WATCHDOG_USEC": "400000",
        ])
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        try await Task.sleep(for: .seconds(1))
        let path = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 1000, seed: 5)
        let id = try await BinaryRunner.enqueue([path, "--config", sandbox.configPath])
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        #expect(await eventually(timeout: .seconds(20)) { (try? store.job(id))??.state == .uploaded },
                "a full notify socket stops nothing: \(daemon.log.suffix(2000))")
        #expect(await daemon.terminate() < .seconds(5), "daemon log:\n\(daemon.log.suffix(2000))")
        withExtendedLifetime(socket) {}
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
