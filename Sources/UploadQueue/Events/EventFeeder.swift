import Foundation

/// Turns what the running queue does into `EventFeed` lines: its `UploadEvent`s, with what a reader wants to know
/// read from the job (where it went, why it failed), progress at most once a second per job, and the jobs other
/// processes enqueued (named in their wake-up).
actor EventFeeder {
    private let feed: EventFeed
    private let store: QueueStore
    private var throttle = ProgressThrottle()
    /// The jobs enqueued while this feed runs whose `enqueued` line went out, until they end: a job may be claimed
    /// before its enqueuer's event arrives, and its `enqueued` line must still come first, once.
    private var announced: Set<JobID> = []
    private let started = Date()

    init(feed: EventFeed, store: QueueStore) {
        self.feed = feed
        self.store = store
    }

    /// Publishes a line for each event until the stream ends.
    func run(_ events: AsyncStream<UploadEvent>) async {
        for await event in events { publish(event) }
    }

    /// Tells of the jobs another process enqueued or cancelled (what its wake-up named). An enqueued job that was
    /// claimed already was announced then; one gone already is skipped.
    func tell(_ news: WakeSocket.News) {
        for id in news.enqueued { enqueued(id) }
        for id in news.cancelled {
            throttle.ended(id)
            announced.remove(id)
            feed.publish(FeedEvent(.cancelled, job: id))
        }
    }

    private func publish(_ event: UploadEvent) {
        switch event {
        case .enqueued(let id):
            enqueued(id)
        case .stateChanged(let id, .uploading):
            guard let job = try? store.job(id, holdsInForce: false) else { return }
            // Claimed before its enqueuer's event came: announced now, so `enqueued` comes before `started`.
            if job.createdAt >= started, job.attempts <= 1, !announced.contains(id) { enqueued(job) }
            feed.publish(FeedEvent(.started, job: id, fields: [
                "destination": .string(job.destination), "attempt": .integer(Int64(job.attempts)),
                "offset": .integer(job.bytesConfirmed),
            ]))
        case .stateChanged(let id, .uploaded):
            throttle.ended(id)
            announced.remove(id)
            guard let job = try? store.job(id, holdsInForce: false) else { return }
            feed.publish(FeedEvent(.uploaded, job: id, fields: [
                "destination": .string(job.destination), "size": .integer(job.size),
                "remote_url": job.remoteURL.map { .string(URLRedaction.redact($0)) } ?? .null,
            ]))
        case .stateChanged(let id, .failed):
            throttle.ended(id)
            guard let job = try? store.job(id, holdsInForce: false) else { return }
            if job.permanent { announced.remove(id) }
            feed.publish(FeedEvent(.failed, job: id, fields: [
                "destination": .string(job.destination), "error": job.lastError.map(FeedEvent.Value.string) ?? .null,
                "permanent": .boolean(job.permanent),
                "retry_at": job.permanent ? .null : job.nextAttemptAt.map { .string(FeedEvent.timeText($0)) } ?? .null,
            ]))
        case .stateChanged(let id, .pending):
            // Back to waiting (an interrupted transfer): its progress line may come again at once.
            throttle.ended(id)
            // An answer that proved nothing is told, with what answered.
            guard let job = try? store.job(id, holdsInForce: false),
                  let attempt = try? store.attempts(of: id).last, attempt.outcome == "unverified" else { return }
            feed.publish(FeedEvent(.unverified, job: id, fields: [
                "destination": .string(job.destination), "reason": attempt.error.map(FeedEvent.Value.string) ?? .null,
            ]))
        case .progress(let id, let confirmed, let sent, let size):
            guard throttle.admits(id, done: confirmed >= size, at: .now) else { return }
            feed.publish(FeedEvent(.progress, job: id, fields: [
                "confirmed": .integer(confirmed), "sent": .integer(sent), "size": .integer(size),
            ]))
        case .cancelled(let id):
            throttle.ended(id)
            announced.remove(id)
            feed.publish(FeedEvent(.cancelled, job: id))
        }
    }

    private func enqueued(_ id: JobID) {
        // A job that has been claimed already had its `enqueued` line then.
        guard !announced.contains(id), let job = try? store.job(id, holdsInForce: false), job.attempts == 0 else { return }
        enqueued(job)
    }

    private func enqueued(_ job: Job) {
        // A job already uploaded or failed for good by the time its event is read needs no entry in the set.
        if job.state == .pending || job.state == .uploading || (job.state == .failed && !job.permanent) {
            announced.insert(job.id)
        }
        feed.publish(FeedEvent(.enqueued, job: job.id, time: job.createdAt, fields: [
            "name": .string(job.originalName), "destination": .string(job.destination), "size": .integer(job.size),
        ]))
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
