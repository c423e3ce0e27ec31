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
    /// The socket file this feed made (device and inode): on stopping, it removes that file alone, never one a
    /// feed started next on the same path has made meanwhile.
    private let socketFile: (device: UInt64, inode: UInt64)
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
        let made = try UnixListener(path: path, group: group, table: "events", backlog: 16)
        let descriptor = made.descriptor
        socketFile = (made.device, made.inode)
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

    /// Sends `event` to every reader connected now; returns at once. After `stop()` it does nothing.
    func publish(_ event: FeedEvent) {
        let taken = inbox.withLock { inbox -> Bool in
            guard !inbox.stopping else { return false }
            inbox.sequence += 1
            var numbered = event
            numbered.sequence = inbox.sequence
            // The gap shows in `seq`.
            if inbox.lines.count >= Self.inboxLimit { inbox.lines.removeFirst(inbox.lines.count / 2) }
            inbox.lines.append(numbered.jsonLine + "\n")
            return true
        }
        if taken { poke() }
    }

    /// Closes every reader and the socket (the thread does, at once); returns without waiting. The wake-up pipe
    /// stays open until the feed is gone, so a late `publish` never writes to a descriptor that was closed and
    /// reused.
    func stop() {
        inbox.withLock { $0.stopping = true }
        poke()
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    private func poke() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)  // a full pipe already wakes the thread
    }

    /// Readers served at once; more are turned away (their connection closed at once).
    static let maximumReaders = 64

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
        // While the process is out of descriptors, the listener is not watched (it would stay readable).
        var listenerPausedUntil: ContinuousClock.Instant?
        while true {
            let listening = listenerPausedUntil.map { ContinuousClock.now >= $0 } ?? true
            var polled = [pollfd(fd: listening ? listener : -1, events: Int16(POLLIN), revents: 0),
                          pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            for reader in readers {
                polled.append(pollfd(fd: reader.descriptor,
                                     events: Int16(POLLIN) | (reader.pending.isEmpty ? 0 : Int16(POLLOUT)), revents: 0))
            }
            let closing = readers.contains { $0.closingBy != nil } || !listening
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
                // The path goes first: a reader that sees its stream end finds no socket to reconnect to.
                close(listener)
                if UnixListener.isStill(path, device: socketFile.device, inode: socketFile.inode) { unlink(path) }
                for reader in readers { close(reader.descriptor) }
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
            if listening, polled[0].revents != 0 {
                let wasPaused = listenerPausedUntil != nil
                listenerPausedUntil = nil
                while true {
                    let descriptor = accept(listener, nil, nil)
                    guard descriptor >= 0 else {
                        if errno == EMFILE || errno == ENFILE {
                            listenerPausedUntil = .now + .seconds(1)
                            if !wasPaused { logger.warning("events: out of file descriptors; new readers wait") }
                        }
                        break
                    }
                    guard readers.count < Self.maximumReaders else {
                        // Told why (the line fits its empty socket buffer), so it is not taken for a daemon gone.
                        let refusal = FeedEvent(.dropped, fields: [
                            "lost": .integer(0),
                            "reason": .string("the daemon serves at most \(Self.maximumReaders) readers at once"),
                        ]).jsonLine + "\n"
                        _ = refusal.withCString { send(descriptor, $0, strlen($0), Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
                        close(descriptor)
                        continue
                    }
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
