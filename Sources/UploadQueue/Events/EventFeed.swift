import Foundation
import Logging
import Synchronization

/// The daemon's event stream for other processes: a Unix stream socket (`[events] socket`, by default
/// `state_dir/events.sock`, mode 0600, or 0660 for `[events] group`) on which every reader gets each `FeedEvent` as
/// a JSON line, from the moment it connects.
///
/// Publishing never waits: a line goes into an inbox under a lock and a byte into a pipe. One thread of its own
/// accepts readers and writes to them without blocking. A reader that lets more than `readerBuffer` bytes pile
/// up is dropped: what it had not received is discarded, a last `dropped` line says how many lines it lost, and the
/// connection is closed once that line went out (or after 30 s). A slow reader costs the daemon at most its
/// buffer, never time.
final class EventFeed: Sendable {
    /// The socket's path.
    let path: String
    private let listener: Int32
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let readerBuffer: Int
    private let logger: Logger
    private let inbox = Mutex(Inbox())
    /// Lines published while the thread has not taken them yet, at most this many (it takes them within
    /// milliseconds; the bound holds should it ever stall).
    private static let inboxLimit = 10_000

    private struct Inbox {
        var lines: [String] = []
        var sequence: Int64 = 0
        var stopping = false
    }

    /// Binds the socket (replacing a stale one: the caller holds the daemon lock) and starts serving readers.
    init(path: String, group: String?, readerBuffer: Int, logger: Logger) throws(UploadQueueError) {
        guard let address = UnixSocketAddress.make(path) else {
            throw UploadQueueError(.io, "the events socket path is too long for a Unix socket (max 107 bytes)", path: path)
        }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw .system("socket", path: path) }
        unlink(path)
        // Made 0600 first, so no other user can connect before the mode is set.
        let previous = umask(0o177)
        let bound = UnixSocketAddress.with(address) { bind(descriptor, $0, $1) }
        umask(previous)
        guard bound == 0, listen(descriptor, 16) == 0 else {
            let error = UploadQueueError.system(bound == 0 ? "listen" : "bind", path: path)
            close(descriptor)
            throw error
        }
        if let group {
            guard let entry = getgrnam(group) else {
                close(descriptor)
                unlink(path)
                throw UploadQueueError(.io, "[events] group \"\(group)\" does not exist (getent group \(group))", path: path)
            }
            guard chown(path, uid_t.max, entry.pointee.gr_gid) == 0, chmod(path, 0o660) == 0 else {
                let error = UploadQueueError.system("chown/chmod to group \(group)", path: path)
                close(descriptor)
                unlink(path)
                throw error
            }
        }
        var pipeEnds: [Int32] = [-1, -1]
        guard pipe(&pipeEnds) == 0 else {
            close(descriptor)
            throw .system("pipe", path: path)
        }
        for end in pipeEnds { Self.makeNonBlocking(end) }
        self.path = path
        listener = descriptor
        wakeRead = pipeEnds[0]
        wakeWrite = pipeEnds[1]
        self.readerBuffer = readerBuffer
        self.logger = logger
        let thread = Thread { [self] in serve() }
        thread.name = "uploadq-events"
        thread.start()
    }

    /// Sends `event` to every reader connected now; returns at once.
    func publish(_ event: FeedEvent) {
        inbox.withLock { inbox in
            guard !inbox.stopping else { return }
            inbox.sequence += 1
            var numbered = event
            numbered.sequence = inbox.sequence
            if inbox.lines.count >= Self.inboxLimit { inbox.lines.removeFirst(inbox.lines.count / 2) }
            inbox.lines.append(numbered.jsonLine + "\n")
        }
        poke()
    }

    /// Closes every reader and the socket; the thread ends.
    func stop() {
        inbox.withLock { $0.stopping = true }
        poke()
    }

    private func poke() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)  // a full pipe already wakes the thread
    }

    // MARK: The thread

    /// One connected reader: what it has still to receive.
    private struct Reader {
        let descriptor: Int32
        var pending: [UInt8] = []
        /// The last write ended inside a line (its rest is at the start of `pending`).
        var midLine = false
        /// Dropped: only the `dropped` line is left to send; closed then, or at this time.
        var closingBy: ContinuousClock.Instant?
    }

    private func serve() {
        var readers: [Reader] = []
        while true {
            var polled = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                          pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            for reader in readers {
                polled.append(pollfd(fd: reader.descriptor,
                                     events: Int16(POLLIN) | (reader.pending.isEmpty ? 0 : Int16(POLLOUT)), revents: 0))
            }
            let closing = readers.contains { $0.closingBy != nil }
            _ = poll(&polled, nfds_t(polled.count), closing ? 1000 : -1)
            if polled[1].revents != 0 {
                var sink = [UInt8](repeating: 0, count: 256)
                while read(wakeRead, &sink, sink.count) > 0 {}
            }
            let (lines, sequence, stopping) = inbox.withLock { inbox -> ([String], Int64, Bool) in
                defer { inbox.lines.removeAll(keepingCapacity: true) }
                return (inbox.lines, inbox.sequence, inbox.stopping)
            }
            if stopping {
                for reader in readers { close(reader.descriptor) }
                close(listener)
                close(wakeRead)
                close(wakeWrite)
                unlink(path)
                return
            }
            // Readers that hung up or failed.
            var gone: Set<Int32> = []
            for entry in polled.dropFirst(2) where entry.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                var sink = [UInt8](repeating: 0, count: 512)
                let count = recv(entry.fd, &sink, sink.count, Int32(MSG_DONTWAIT))
                if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) || entry.revents & Int16(POLLERR) != 0 {
                    gone.insert(entry.fd)
                }
            }
            for line in lines {
                let bytes = Array(line.utf8)
                for index in readers.indices where readers[index].closingBy == nil {
                    queue(bytes, to: &readers[index])
                }
            }
            if polled[0].revents != 0 {
                while true {
                    let descriptor = accept(listener, nil, nil)
                    guard descriptor >= 0 else { break }
                    Self.makeNonBlocking(descriptor)
                    var reader = Reader(descriptor: descriptor)
                    reader.pending = Array((FeedEvent(.following, fields: ["from_seq": .integer(sequence + 1)]).jsonLine + "\n").utf8)
                    readers.append(reader)
                    logger.debug("events: a reader connected (\(readers.count) now)")
                }
            }
            let now = ContinuousClock.now
            for index in readers.indices where !gone.contains(readers[index].descriptor) {
                if !flush(&readers[index]) { gone.insert(readers[index].descriptor) }
                if let deadline = readers[index].closingBy, readers[index].pending.isEmpty || now > deadline {
                    gone.insert(readers[index].descriptor)
                }
            }
            for descriptor in gone { close(descriptor) }
            readers.removeAll { gone.contains($0.descriptor) }
        }
    }

    /// Adds a line to a reader's pending bytes, or drops the reader when it would hold more than `readerBuffer`.
    private func queue(_ line: [UInt8], to reader: inout Reader) {
        guard reader.pending.count + line.count > readerBuffer else {
            reader.pending += line
            return
        }
        // What it has not received is given up, all but the rest of a line already begun.
        var kept: [UInt8] = []
        if reader.midLine, let end = reader.pending.firstIndex(of: UInt8(ascii: "\n")) {
            kept = Array(reader.pending[...end])
        }
        let lost = reader.pending.count(where: { $0 == UInt8(ascii: "\n") }) - (kept.isEmpty ? 0 : 1) + 1
        let farewell = FeedEvent(.dropped, fields: [
            "lost": .integer(Int64(lost)),
            "reason": .string("this reader fell more than \(readerBuffer) bytes behind; reconnect, and replay with --since"),
        ])
        reader.pending = kept + Array((farewell.jsonLine + "\n").utf8)
        reader.closingBy = .now + .seconds(30)
        logger.notice("events: a reader fell \(readerBuffer) bytes behind and was dropped (\(lost) lines lost)")
    }

    /// Non-blocking, and closed on exec (no helper program inherits it).
    private static func makeNonBlocking(_ descriptor: Int32) {
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        _ = fcntl(descriptor, F_SETFD, fcntl(descriptor, F_GETFD) | FD_CLOEXEC)
    }

    /// Writes what the socket takes now; false when the reader is gone.
    private func flush(_ reader: inout Reader) -> Bool {
        guard !reader.pending.isEmpty else { return true }
        let written = reader.pending.withUnsafeBytes {
            send(reader.descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
        }
        if written < 0 { return errno == EAGAIN || errno == EINTR }
        guard written > 0 else { return true }
        reader.midLine = reader.pending[written - 1] != UInt8(ascii: "\n")
        reader.pending.removeFirst(written)
        return true
    }
}
