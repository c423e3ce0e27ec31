import Synchronization

/// Something that happened in the queue: a job arrived, changed state or moved bytes.
public enum UploadEvent: Sendable, Equatable {
    /// A file was accepted as a new job.
    case enqueued(JobID)
    /// A job entered `state` (for `pending`, with its waiting reason if any).
    case stateChanged(JobID, JobState)
    /// A transfer moved: `confirmed` bytes are durable at the destination, `sent` were handed over (≥ confirmed).
    case progress(JobID, confirmed: Int64, sent: Int64, size: Int64)
    /// A job was cancelled and left the queue.
    case cancelled(JobID)
    /// Every member of this closed group is uploaded: its completion went out (`UploadQueue.groupCompletions()`).
    case groupUploaded(String)
}

extension UploadEvent {
    /// The job the event is about; nil for a group's.
    var jobID: JobID? {
        switch self {
        case .enqueued(let id), .stateChanged(let id, _), .progress(let id, _, _, _), .cancelled(let id): id
        case .groupUploaded: nil
        }
    }

    /// The event's name in a `HopTrace`.
    var traceName: String {
        switch self {
        case .enqueued: "enqueued"
        case .stateChanged(_, let state): "\(state.rawValue)"
        case .progress: "progress"
        case .cancelled: "cancelled"
        case .groupUploaded: "group uploaded"
        }
    }
}

/// The queue's events as an `AsyncSequence`; each iteration gets every event from the moment it starts.
public struct UploadEvents: AsyncSequence, Sendable {
    public typealias Element = UploadEvent
    let hub: EventHub

    public func makeAsyncIterator() -> AsyncStream<UploadEvent>.Iterator {
        hub.subscribe().makeAsyncIterator()
    }
}

/// Fans events out to every current subscriber; a slow subscriber loses old progress, never state changes.
final class EventHub: Sendable {
    private let subscribers = Mutex<[Int: Subscriber]>([:])

    /// A subscriber's stream, and which events it takes: one that ignores progress is not woken for it (a wake-up
    /// per progress line and subscriber was a good part of what a small file cost).
    private struct Subscriber: Sendable {
        let continuation: AsyncStream<UploadEvent>.Continuation
        let takes: @Sendable (UploadEvent) -> Bool
    }
    private let nextID = Atomic<Int>(0)
    /// Where lines for the daemon's event feed go that are no `UploadEvent` (link changes), while one runs.
    private let feed = Mutex<Receiver<FeedEvent>?>(nil)
    /// Called with each event as it is emitted, on the emitting thread, before any subscriber gets it: the daemon's
    /// own listeners (the live feed's `EventFeeder`, the owed work's wake-up, the control API's wake-up). It must be quick:
    /// locks and wake-ups (the feeder reads one row for an unverified answer, and only while someone follows).
    private let tap = Mutex<Receiver<UploadEvent>?>(nil)

    /// A closure in a box. Read straight out of a `Mutex`, a closure is re-wrapped at each read (the lock's
    /// `inout` value goes through a generic abstraction and back, and is written back wrapped): after a million
    /// events a call went through a million thunks. A class reference is read as it is.
    private final class Receiver<Event>: Sendable {
        let receive: @Sendable (Event) -> Void

        init(_ receive: @escaping @Sendable (Event) -> Void) {
            self.receive = receive
        }
    }

    /// Calls `take` with each event as it is emitted from now on (nil: no one).
    func attachTap(_ take: (@Sendable (UploadEvent) -> Void)?) {
        let receiver = take.map(Receiver.init)
        tap.withLock { $0 = receiver }
    }

    /// Sends `notice`s to `publish` from now on (nil: nowhere).
    func attachFeed(_ publish: (@Sendable (FeedEvent) -> Void)?) {
        let receiver = publish.map(Receiver.init)
        feed.withLock { $0 = receiver }
    }

    /// A line for the event feed, if one is attached.
    func notice(_ event: FeedEvent) {
        feed.withLock { $0 }?.receive(event)
    }

    /// The events emitted from now on that `takes` accepts (all of them by default).
    func subscribe(taking takes: @escaping @Sendable (UploadEvent) -> Bool = { _ in true }) -> AsyncStream<UploadEvent> {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let (stream, continuation) = AsyncStream<UploadEvent>.makeStream(bufferingPolicy: .bufferingNewest(4096))
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: id) }
        }
        subscribers.withLock { $0[id] = Subscriber(continuation: continuation, takes: takes) }
        return stream
    }

    func emit(_ event: UploadEvent) {
        if let job = event.jobID { HopTrace.record(job, "\(event.traceName)") }
        tap.withLock { $0 }?.receive(event)
        let current = subscribers.withLock { Array($0.values) }
        for subscriber in current where subscriber.takes(event) { subscriber.continuation.yield(event) }
    }

    func finish() {
        let current = subscribers.withLock { all -> [AsyncStream<UploadEvent>.Continuation] in
            defer { all.removeAll() }
            return all.values.map(\.continuation)
        }
        for continuation in current { continuation.finish() }
    }
}
