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
    /// One breaker per destination; an open one keeps that destination's jobs pending (`circuit-open`).
    private var breakers: [String: CircuitBreaker]
    private var probes: [String: Task<Void, Never>] = [:]
    /// Remote clean-ups of cancelled jobs (tus DELETE) still running; a stop waits for them.
    private var cleanups: [JobID: Task<Void, Never>] = [:]
    /// Longest sleep between two looks at the database, in case a wake-up was missed.
    private let pollInterval: Duration
    /// Return from `run()` once nothing is pending or uploading.
    private let exitWhenIdle: Bool

    init(configuration: Configuration, store: QueueStore, events: EventHub, uploaders: [String: any Uploader],
         release: @escaping @Sendable (Job) -> Void, logger: Logger, pollInterval: Duration = .seconds(5),
         exitWhenIdle: Bool = false) {
        self.exitWhenIdle = exitWhenIdle
        self.configuration = configuration
        self.store = store
        self.events = events
        self.uploaders = uploaders
        self.limiter = BandwidthLimiter(bytesPerSecond: configuration.bandwidth.unmetered)
        self.release = release
        self.logger = logger
        self.pollInterval = pollInterval
        breakers = configuration.destinations.mapValues { CircuitBreaker(policy: $0.circuitBreaker) }
    }

    /// Jobs whose transfer runs in this process now.
    var runningJobs: Set<JobID> { Set(workers.keys) }

    /// Runs until the task is cancelled, then stops every transfer at a safe point and waits for them.
    func run() async {
        while !Task.isCancelled {
            do {
                try handleCancelRequests()
                startDueProbes()
                try fillSlots()
                if exitWhenIdle, workers.isEmpty, try store.isIdle() {
                    logger.info("the queue is idle: nothing pending or uploading")
                    break
                }
                var due = try store.nextDueDate().map { $0.timeIntervalSinceNow } ?? pollInterval.seconds
                if let probe = breakers.values.compactMap(\.nextProbeAt).min() {
                    due = min(due, probe.timeIntervalSinceNow)
                }
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

    private func cleanupFinished(_ id: JobID) {
        cleanups[id] = nil
    }

    private func stopAll() async {
        for probe in probes.values { probe.cancel() }
        for cleanup in cleanups.values { await cleanup.value }
        let running = workers
        for (id, task) in running {
            if stopReasons[id] == nil { stopReasons[id] = .shutdown }
            task.cancel()
        }
        for task in running.values { await task.value }
    }

    /// Stops flagged transfers running here; flagged jobs that are not running (they left a remote upload
    /// behind) leave the queue at once and their remote upload is dropped in the background.
    private func handleCancelRequests() throws {
        for id in try store.cancelRequests() {
            if workers[id] != nil {
                if stopReasons[id] != .cancel { _ = cancelRunning(id) }
                continue
            }
            guard let removed = try store.removeCancelled(id) else { continue }
            release(removed)
            events.emit(.cancelled(id))
            logger.info("upload cancelled", metadata: ["uploadq.job": "\(id)", "uploadq.destination": "\(removed.destination)"])
            if let uploader = uploaders[removed.destination] {
                cleanups[id] = Task {
                    await uploader.discard(removed)
                    self.cleanupFinished(id)
                }
            }
        }
    }

    private func fillSlots() throws {
        let limit = configuration.limits.concurrency
        let held = Set(breakers.filter { $0.value.isOpen }.keys)
        var slotsFull = true
        while workers.count < limit {
            guard let (job, attempt) = try store.claimNext(excluding: held) else {
                slotsFull = false
                break
            }
            events.emit(.stateChanged(job.id, .uploading))
            logger.info("upload started", metadata: [
                "uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)",
                "attempt": "\(attempt.number)", "offset": "\(job.bytesConfirmed)",
            ])
            workers[job.id] = Task { await self.transfer(job, attempt: attempt.number) }
        }
        try store.markWaitingForSlots(slotsFull)
        // Jobs of destinations whose circuit is open say so, also those that became pending since it opened.
        for name in held {
            try store.markWaiting(destination: name, reason: .circuitOpen, active: true)
        }
    }

    /// Sends the probe of every open circuit whose time has come; a probe that is answered closes the circuit.
    private func startDueProbes() {
        let now = Date()
        for name in breakers.keys where breakers[name]?.startProbeIfDue(now: now) == true {
            guard let uploader = uploaders[name] else { continue }
            logger.info("probing destination \"\(name)\"", metadata: ["uploadq.destination": "\(name)"])
            probes[name] = Task {
                let answered = await uploader.probe()
                self.finishProbe(name, answered: answered)
            }
        }
    }

    private func finishProbe(_ name: String, answered: Bool) {
        probes[name] = nil
        breakers[name]?.finishProbe(answered: answered, now: Date())
        let metadata: Logger.Metadata = ["uploadq.destination": "\(name)"]
        if answered {
            logger.notice("destination \"\(name)\" answers again; its uploads resume", metadata: metadata)
            closeCircuit(name)
        } else if let next = breakers[name]?.nextProbeAt {
            logger.warning("destination \"\(name)\" still does not answer; next probe at \(next)", metadata: metadata)
        }
        wake.signal()
    }

    private func closeCircuit(_ name: String) {
        do {
            try store.markWaiting(destination: name, reason: .circuitOpen, active: false)
        } catch {
            logger.error("cannot clear the circuit-open mark of \(name): \(error)")
        }
    }

    /// Feeds a transfer's verdict to its destination's breaker; clears the circuit-open marks when it closes.
    private func updateBreaker(_ destination: String, failure: TransferFailure?) {
        guard var breaker = breakers[destination] else { return }
        let wasOpen = breaker.isOpen
        var opened = false
        if let failure {
            guard case .transient = failure.kind, failure.destinationFault else { return }
            opened = breaker.recordFailure(now: Date())
        } else {
            breaker.recordSuccess()
        }
        breakers[destination] = breaker
        let metadata: Logger.Metadata = ["uploadq.destination": "\(destination)"]
        if opened {
            let delay = CircuitBreaker.probeDelay(policy: breaker.policy, openings: breaker.openings)
            // The next pass of the loop (woken when the transfer ends) marks its jobs circuit-open.
            logger.warning("""
                destination "\(destination)" failed \(breaker.policy.threshold) times in a row; its jobs wait \
                (circuit-open) and it is probed in \(delay)
                """, metadata: metadata)
        } else if wasOpen && !breaker.isOpen {
            closeCircuit(destination)
        }
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
                updateBreaker(job.destination, failure: nil)
                try store.finish(job.id, attempt: attempt, event: .succeed, outcome: "uploaded", error: nil) {
                    $0.remoteURL = outcome.remoteURL
                    $0.bytesConfirmed = $0.size
                }
                events.emit(.stateChanged(job.id, .uploaded))
                logger.info("upload finished", metadata: metadata.merging(["remote_url": "\(outcome.remoteURL)"]) { $1 })
            case .failure(let failure) where stopReasons[job.id] != nil && failure.kind != .permanent:
                if stopReasons[job.id] == .cancel {
                    // The resume state as the transfer left it (it may have created the remote upload).
                    await uploaders[job.destination]?.discard((try? store.job(job.id)) ?? job)
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
                updateBreaker(job.destination, failure: failure)
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
                meter.recordConfirmed(bytes)
                events.emit(.progress(job.id, confirmed: bytes, sent: meter.sent, size: job.size))
            },
            sent: { bytes in
                if meter.recordSent(bytes) {
                    events.emit(.progress(job.id, confirmed: meter.confirmed, sent: meter.sent, size: job.size))
                }
            },
            forgetResumeState: { () throws(TransferFailure) in
                meter.restart(at: 0)
                do { try store.clearResumeState(job.id) } catch {
                    throw .transient("database", "cannot clear the resume state: \(error)")
                }
            })
    }
}
