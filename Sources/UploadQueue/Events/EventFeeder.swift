import Foundation
import Synchronization

/// Turns what the running queue does into the live lines the durable log does not keep: progress at most once a
/// second per job, and answers that proved nothing (`unverified`, with what answered). Enqueues, starts, uploads,
/// failures and cancels are in the log already, written with the change they tell.
///
/// It is called as each event is emitted (`EventHub`'s tap), not from a queue of its own: a job's progress line is
/// in its followers' buffers before the upload that ends it is committed, so a follower never reads the end first.
final class EventFeeder: Sendable {
    private let live: LiveEvents
    private let store: QueueStore
    private let throttle = Mutex(ProgressThrottle())

    init(live: LiveEvents, store: QueueStore) {
        self.live = live
        self.store = store
    }

    /// Publishes the live line `event` has, if any, stamped now.
    func take(_ event: UploadEvent) {
        switch event {
        case .stateChanged(let id, .pending):
            // Back to waiting (an interrupted transfer): its progress line may come again at once.
            throttle.withLock { $0.ended(id) }
            // An answer that proved nothing is told, with what answered; a follower with none is not worth a read.
            guard live.count > 0, let job = try? store.job(id, holdsInForce: false),
                  let attempt = try? store.attempts(of: id).last, attempt.outcome == "unverified" else { return }
            live.publish(FeedEvent(.unverified, job: id, fields: [
                "destination": .string(job.destination), "reason": attempt.error.map(FeedEvent.Value.string) ?? .null,
            ]))
        case .stateChanged(let id, _), .cancelled(let id):
            throttle.withLock { $0.ended(id) }
        case .progress(let id, let confirmed, let sent, let size):
            guard throttle.withLock({ $0.admits(id, done: confirmed >= size, at: .now) }) else { return }
            live.publish(FeedEvent(.progress, job: id, fields: [
                "confirmed": .integer(confirmed), "sent": .integer(sent), "size": .integer(size),
            ]))
        case .enqueued, .groupUploaded:
            break
        }
    }
}

/// At most one progress line per job per second (and always the last, at 100 %): the decision alone, tested
/// without a clock.
struct ProgressThrottle: Sendable {
    /// When each running job's last line went out; a job leaves when it ends, so this holds what is in flight.
    private(set) var lastSent: [JobID: ContinuousClock.Instant] = [:]
    var interval: Duration = .seconds(1)

    /// Whether a progress line for `id` goes out now (and, if so, notes it).
    mutating func admits(_ id: JobID, done: Bool, at now: ContinuousClock.Instant) -> Bool {
        if !done, let last = lastSent[id], now - last < interval { return false }
        lastSent[id] = now
        return true
    }

    /// The job stopped moving: forget it.
    mutating func ended(_ id: JobID) {
        lastSent[id] = nil
    }
}
