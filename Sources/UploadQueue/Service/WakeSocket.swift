import Dispatch
import Foundation

/// A Unix datagram socket in the state directory through which the CLI wakes a running daemon.
///
/// Any datagram means "look at the database now"; one may also name the jobs its sender just enqueued or
/// cancelled (`enqueued ID ID…`, `cancelled ID…`), for the event feed. Sending never blocks and never fails loudly; the daemon also polls, so a
/// lost poke costs seconds, not work (and a lost name, one `enqueued` line of `uploadq events`).
final class WakeSocket: Sendable {
    /// Dispatch sources are thread-safe; Swift does not know it.
    nonisolated(unsafe) private let source: DispatchSourceRead
    private let path: String

    /// What a wake-up tells besides "look now": the jobs its sender just enqueued and cancelled.
    struct News: Sendable, Equatable {
        var enqueued: [JobID] = []
        var cancelled: [JobID] = []

        var isEmpty: Bool { enqueued.isEmpty && cancelled.isEmpty }
    }

    /// Binds the socket (replacing a stale one; the caller holds the daemon lock) and calls `onWake` per batch of
    /// datagrams, with the news they carried.
    init(path: String, onWake: @escaping @Sendable (News) -> Void) throws(UploadQueueError) {
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
            var buffer = [UInt8](repeating: 0, count: Self.maximumMessage)
            var news = News()
            while true {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                guard count >= 0 else { break }
                let told = Self.news(in: buffer[0..<count])
                news.enqueued += told.enqueued
                news.cancelled += told.cancelled
            }
            onWake(news)
        }
        source.setCancelHandler { close(descriptor) }
        source.resume()
    }

    deinit {
        source.cancel()
        unlink(path)
    }

    /// The longest datagram read or sent: about 1,700 job ids.
    static let maximumMessage = 64 << 10

    /// Sends a wake-up to whoever listens at `path` with `news` (in datagrams of at most `maximumMessage` bytes);
    /// silently does nothing when no daemon runs.
    static func poke(path: String, news: News = News()) {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0, let address = UnixSocketAddress.make(path) else { return }
        defer { close(descriptor) }
        let perMessage = (maximumMessage - 16) / 37
        var messages: [String] = []
        for (word, ids) in [("enqueued", news.enqueued), ("cancelled", news.cancelled)] {
            messages += stride(from: 0, to: ids.count, by: perMessage).map {
                word + " " + ids[$0..<min(ids.count, $0 + perMessage)].map(\.rawValue).joined(separator: " ")
            }
        }
        if messages.isEmpty { messages = ["wake"] }
        for message in messages {
            let bytes = Array(message.utf8)
            _ = UnixSocketAddress.with(address) { sendto(descriptor, bytes, bytes.count, Int32(MSG_DONTWAIT), $0, $1) }
        }
    }

    /// The job ids an `enqueued ID…` or `cancelled ID…` datagram names; none for any other.
    static func news(in message: ArraySlice<UInt8>) -> News {
        let words = String(decoding: message, as: UTF8.self).split(separator: " ")
        let ids = words.dropFirst().compactMap { JobID(String($0)) }
        switch words.first {
        case "enqueued": return News(enqueued: ids)
        case "cancelled": return News(cancelled: ids)
        default: return News()
        }
    }
}
