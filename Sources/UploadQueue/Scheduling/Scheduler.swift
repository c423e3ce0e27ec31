import Foundation
import Logging

/// Claims runnable jobs up to the concurrency limit and runs each through its destination's uploader.
///
/// Picks by priority, then age; applies the retry policy to transient failures; turns a graceful stop into
/// `interrupted` attempts (jobs back to `pending` with their offsets) and cancel requests into removed jobs.
actor Scheduler {
    private enum StopReason { case shutdown, cancel }

    private let configuration: Configuration
    private let store: QueueStore
    private let events: EventHub
    private let uploaders: [String: any Uploader]
    private let limiter: BandwidthLimiter
    private let release: @Sendable (Job) -> Void
    private let logger: Logger
    nonisolated let wake = WakeSignal()
    private var workers: [JobID: Task<Void, Never>] = [:]
    private var stopReasons: [JobID: StopReason] = [:]
    /// Longest sleep between two looks at the database, in case a wake-up was missed.
    private let pollInterval: Duration

    init(configuration: Configuration, store: QueueStore, events: EventHub, uploaders: [String: any Uploader],
         release: @escaping @Sendable (Job) -> Void, logger: Logger, pollInterval: Duration = .seconds(5)) {
        self.configuration = configuration
        self.store = store
        self.events = events
        self.uploaders = uploaders
        self.limiter = BandwidthLimiter(bytesPerSecond: configuration.bandwidth.unmetered)
        self.release = release
        self.logger = logger
        self.pollInterval = pollInterval
    }

    /// Jobs whose transfer runs in this process now.
    var runningJobs: Set<JobID> { Set(workers.keys) }

    /// Runs until the task is cancelled, then stops every transfer at a safe point and waits for them.
    func run() async {
        while !Task.isCancelled {
            do {
                try handleCancelRequests()
                try fillSlots()
                let due = try store.nextDueDate().map { $0.timeIntervalSinceNow } ?? pollInterval.seconds
                let wait = min(max(due, 0.01), pollInterval.seconds)
                await wake.wait(timeout: .milliseconds(Int64(wait * 1000)))
            } catch {
                logger.error("scheduler: cannot read or write the queue: \(error)")
                await wake.wait(timeout: .seconds(1))
            }
        }
        await stopAll()
    }

    /// Stops a transfer running here because its job was cancelled.
    func cancelRunning(_ id: JobID) -> Bool {
        guard let task = workers[id] else { return false }
        stopReasons[id] = .cancel
        task.cancel()
        return true
    }

    private func stopAll() async {
        let running = workers
        for (id, task) in running {
            if stopReasons[id] == nil { stopReasons[id] = .shutdown }
            task.cancel()
        }
        for task in running.values { await task.value }
    }

    private func handleCancelRequests() throws {
        for id in try store.cancelRequests() where workers[id] != nil {
            _ = cancelRunning(id)
        }
    }

    private func fillSlots() throws {
        let limit = configuration.limits.concurrency
        while workers.count < limit {
            guard let (job, attempt) = try store.claimNext() else {
                try store.markWaitingForSlots(false)
                return
            }
            events.emit(.stateChanged(job.id, .uploading))
            logger.info("upload started", metadata: [
                "uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)",
                "attempt": "\(attempt.number)", "offset": "\(job.bytesConfirmed)",
            ])
            workers[job.id] = Task { await self.transfer(job, attempt: attempt.number) }
        }
        try store.markWaitingForSlots(true)
    }

    private func transfer(_ job: Job, attempt: Int) async {
        let result: Result<UploadOutcome, TransferFailure>
        if let uploader = uploaders[job.destination] {
            let context = makeContext(for: job, attempt: attempt)
            do {
                result = .success(try await uploader.upload(context))
            } catch {
                result = .failure(error)
            }
        } else {
            result = .failure(.permanent("unknown-destination", "destination \"\(job.destination)\" is no longer "
                + "configured; add it back to the config, then `uploadq retry \(job.id)`"))
        }
        await settle(job, attempt: attempt, result: result)
        workers[job.id] = nil
        stopReasons[job.id] = nil
        wake.signal()
    }

    private func settle(_ job: Job, attempt: Int, result: Result<UploadOutcome, TransferFailure>) async {
        let metadata: Logger.Metadata = ["uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)"]
        do {
            switch result {
            case .success(let outcome):
                try store.finish(job.id, attempt: attempt, event: .succeed, outcome: "uploaded", error: nil) {
                    $0.remoteURL = outcome.remoteURL
                    $0.bytesConfirmed = $0.size
                }
                events.emit(.stateChanged(job.id, .uploaded))
                logger.info("upload finished", metadata: metadata.merging(["remote_url": "\(outcome.remoteURL)"]) { $1 })
            case .failure(let failure) where stopReasons[job.id] != nil && failure.kind != .permanent:
                if stopReasons[job.id] == .cancel {
                    await uploaders[job.destination]?.discard(job)
                    if let removed = try store.removeCancelled(job.id) { release(removed) }
                    events.emit(.cancelled(job.id))
                    logger.info("upload cancelled", metadata: metadata)
                } else {
                    try store.finish(job.id, attempt: attempt, event: .interrupt, outcome: "interrupted",
                                     error: "stopped by a graceful shutdown")
                    events.emit(.stateChanged(job.id, .pending))
                    logger.info("upload interrupted; it resumes from its confirmed offset", metadata: metadata)
                }
            case .failure(let failure):
                switch failure.kind {
                case .transient(let retryAfter):
                    let delay = configuration.retry.delay(afterFailure: job.failures + 1, random: Double.random(in: 0...1),
                                                          retryAfter: retryAfter)
                    let retryAt = Date().addingTimeInterval(delay.seconds)
                    try store.finish(job.id, attempt: attempt, event: .failTransient(error: failure.message, retryAt: retryAt),
                                     outcome: "failed", error: failure.message)
                    logger.warning("upload failed, will retry in \(delay)", metadata: metadata.merging(["error": "\(failure.message)"]) { $1 })
                case .permanent:
                    try store.finish(job.id, attempt: attempt, event: .failPermanent(error: failure.message),
                                     outcome: "failed", error: failure.message)
                    logger.error("upload failed permanently", metadata: metadata.merging(["error": "\(failure.message)"]) { $1 })
                case .interrupted:
                    try store.finish(job.id, attempt: attempt, event: .interrupt, outcome: "interrupted", error: failure.message)
                    events.emit(.stateChanged(job.id, .pending))
                    return
                }
                events.emit(.stateChanged(job.id, .failed))
            }
        } catch {
            logger.critical("cannot record the end of a transfer; it is redone at next start: \(error)", metadata: metadata)
        }
    }

    private func makeContext(for job: Job, attempt: Int) -> TransferContext {
        let store = self.store
        let events = self.events
        let meter = TransferMeter(start: job.bytesConfirmed)
        return TransferContext(
            job: job,
            limiter: limiter,
            resumed: { offset throws(TransferFailure) in
                meter.restart(at: offset)
                do { try store.recordResumeOffset(job.id, attempt: attempt, offset: offset) } catch {
                    throw .transient("database", "cannot record the resume offset: \(error)")
                }
            },
            confirmed: { bytes, resumeState throws(TransferFailure) in
                do {
                    try store.recordProgress(job.id, bytesConfirmed: bytes, resumeState: resumeState,
                                             rate: meter.rate(at: bytes))
                } catch {
                    throw .transient("database", "cannot record progress: \(error)")
                }
                events.emit(.progress(job.id, confirmed: bytes, sent: max(bytes, meter.sent), size: job.size))
            },
            sent: { bytes in
                meter.recordSent(bytes)
            })
    }
}
