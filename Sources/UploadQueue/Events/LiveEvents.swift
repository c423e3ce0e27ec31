import Synchronization

/// The events the durable log does not keep (progress, unverified answers, patch and hook outcomes, link changes),
/// handed to each follower of `GET /v1/events/stream?live=true` while it is connected.
///
/// Publishing never waits: a line goes into every subscriber's buffer under a lock, and its wake-up is signalled. A
/// subscriber that lets more than `readerBuffer` bytes pile up is dropped: its buffer is given up, it learns how
/// many lines it lost, and its stream ends with a `dropped` line (it reconnects with `since=` and loses nothing
/// durable). A slow reader costs the daemon at most its buffer, never time.
final class LiveEvents: Sendable {
    private let readerBuffer: Int
    private let subscribers = Mutex<[Int: Subscriber]>([:])
    private let nextID = Atomic<Int>(0)

    private struct Subscriber {
        let wake: WakeSignal
        var lines: [Line] = []
        var bytes = 0
        /// Lines lost since it was dropped; nil while it keeps up.
        var lost: Int?

        /// Keeps `line`, unless the buffer would grow past `limit`: then everything kept is lost, and so is what
        /// comes after, until the subscriber takes its `dropped` notice and goes.
        mutating func add(_ line: Line, limit: Int) {
            if let lost {
                self.lost = lost + 1
            } else if bytes + line.size > limit {
                lost = lines.count + 1
                lines.removeAll()
                bytes = 0
            } else {
                lines.append(line)
                bytes += line.size
            }
        }
    }

    /// A line as a subscriber takes it: the event, and when it was published.
    struct Line: Sendable, Equatable {
        let event: FeedEvent
        /// The monotonic instant of its publishing: a follower tells by it whether the line came before or after
        /// it began a read of the durable log.
        let published: ContinuousClock.Instant
        /// Its bytes as a JSON line, newline included (what it costs a follower's buffer).
        let size: Int
    }

    /// What a subscriber takes at once: the lines since its last take, or how many it lost.
    enum Taken: Equatable {
        case lines([Line])
        case dropped(lost: Int)
    }

    init(readerBuffer: Int) {
        self.readerBuffer = readerBuffer
    }

    /// Subscribers now (the control API's followers with `live=true`).
    var count: Int { subscribers.withLock { $0.count } }

    /// Hands `event` to every subscriber; returns at once.
    func publish(_ event: FeedEvent) {
        // No follower: nothing to write (the common case, at every progress line).
        guard subscribers.withLock({ !$0.isEmpty }) else { return }
        let size = event.jsonLine.utf8.count + 1
        let wakes = subscribers.withLock { subscribers -> [WakeSignal] in
            // Stamped under the lock: lines reach every buffer in the order of their instants.
            let line = Line(event: event, published: .now, size: size)
            var wakes: [WakeSignal] = []
            for id in Array(subscribers.keys) {
                subscribers[id]!.add(line, limit: readerBuffer)
                wakes.append(subscribers[id]!.wake)
            }
            return wakes
        }
        for wake in wakes { wake.signal() }
    }

    /// Wakes every subscriber (the durable log changed: its followers read it).
    func signalSubscribers() {
        for wake in subscribers.withLock({ $0.values.map(\.wake) }) { wake.signal() }
    }

    /// A new subscriber: it gets every line published from now until `unsubscribe`.
    func subscribe() -> Subscription {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let wake = WakeSignal()
        subscribers.withLock { $0[id] = Subscriber(wake: wake) }
        return Subscription(id: id, wake: wake, events: self)
    }

    fileprivate func take(_ id: Int) -> Taken {
        subscribers.withLock { subscribers in
            guard var subscriber = subscribers[id] else { return .lines([]) }
            if let lost = subscriber.lost { return .dropped(lost: lost) }
            defer {
                subscriber.lines.removeAll()
                subscriber.bytes = 0
                subscribers[id] = subscriber
            }
            return .lines(subscriber.lines)
        }
    }

    fileprivate func unsubscribe(_ id: Int) {
        _ = subscribers.withLock { $0.removeValue(forKey: id) }
    }

    /// One follower's subscription: its lines, and a wake-up signalled when there are new ones (or the durable log
    /// changed).
    final class Subscription: Sendable {
        private let id: Int
        let wake: WakeSignal
        private let events: LiveEvents

        fileprivate init(id: Int, wake: WakeSignal, events: LiveEvents) {
            self.id = id
            self.wake = wake
            self.events = events
        }

        /// The lines published since the last take, oldest first; or, once this subscriber fell behind, how many it
        /// lost.
        func take() -> Taken { events.take(id) }

        deinit { events.unsubscribe(id) }
    }
}
