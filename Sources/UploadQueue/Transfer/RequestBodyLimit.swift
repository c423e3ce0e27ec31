import Foundation
import Synchronization

/// What a destination's server, or a proxy in front of it (Cloudflare's 100 MB, an nginx `client_max_body_size`),
/// taught with `413 Content Too Large`: shared by the destination's transfers and kept in the queue, so neither
/// each file nor each restart pays to learn it again.
///
/// A chunked protocol (tus, RUFH) halves its requests after a 413 and keeps the size that is tried next as its
/// cap. A whole-file PUT or POST cannot be cut: the smallest body refused is kept, and a later file at least that
/// large fails for good before a byte is sent, with the limit in its message.
final class RequestBodyLimit: Sendable {
    let destination: String
    private let learnt: Mutex<RequestLimit>
    private let persist: @Sendable (String, RequestLimit) -> Void

    /// What the queue kept for `destination`; `persist` keeps every change, called under the limit's lock (it must
    /// not block: it queues the write; nor throw: the next change writes it again).
    init(destination: String, learnt: RequestLimit = RequestLimit(), persist: @escaping @Sendable (String, RequestLimit) -> Void = { _, _ in }) {
        self.destination = destination
        self.learnt = Mutex(learnt)
        self.persist = persist
    }

    /// The cap on a chunked request's body, if one was learnt (within `RequestLimit.chunkCapLifetime`).
    var chunkCap: Int64? { learnt.withLock { $0.current().chunkCap } }

    /// The smallest whole-file body refused, if one was (within `RequestLimit.refusalLifetime`).
    var refusedAt: Int64? { learnt.withLock { $0.current().refusedAt } }

    /// Seconds until the whole-file refusal is forgotten, while it holds.
    var refusalRemaining: Int64? {
        learnt.withLock { value in
            guard value.current().refusedAt != nil, let learntAt = value.refusalLearntAt else { return nil }
            return max(1, Int64((RequestLimit.refusalLifetime - Date().timeIntervalSince(learntAt)).rounded(.up)))
        }
    }

    /// Chunked requests go no larger than `size` from now on (kept when below what still holds).
    func capChunks(at size: Int64) {
        update { limit, now in
            guard size < limit.chunkCap ?? .max else { return }
            limit.chunkCap = size
            limit.chunkCapLearntAt = now
        }
    }

    /// A whole-file body of `size` bytes was refused.
    func refused(_ size: Int64) {
        update { limit, now in
            guard size < limit.refusedAt ?? .max else { return }
            limit.refusedAt = size
            limit.refusalLearntAt = now
        }
    }

    private func update(_ change: (inout RequestLimit, Date) -> Void) {
        learnt.withLock { value in
            let before = value
            // Against what still holds: a limit learnt again after its lifetime is renewed, not taken as known.
            var updated = value.current()
            change(&updated, Date())
            guard updated != before else { return }
            value = updated
            // Handed on under the lock, so two transfers' lessons are kept in the order they were learnt (`persist`
            // only queues the write).
            persist(destination, updated)
        }
    }
}
