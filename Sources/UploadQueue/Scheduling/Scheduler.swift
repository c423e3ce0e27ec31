import Foundation
import GRDB
import Logging
import Synchronization

/// Claims runnable jobs up to the concurrency limit and runs each through its destination's uploader.
///
/// Picks by priority, then age; applies the retry policy to transient failures; turns a graceful stop into
/// `interrupted` attempts (jobs back to `pending` with their offsets) and cancel requests into removed jobs.
actor Scheduler {

    private let configuration: Configuration
    private let store: QueueStore
    private let events: EventHub
    private let uploaders: [String: any Uploader]
    private let limiter: BandwidthLimiter
    private let engine: TransferEngine?
    private let monitor: LinkMonitor
    /// The link to each destination as last seen; a destination missing here has not been looked at yet.
    private var links: [String: LinkStatus] = [:]
    /// The jobs being transferred, to re-check against the link when it changes.
    private var transfers: [JobID: Job] = [:]
    /// The send cap in force (that of the link class the running transfers use).
    private var appliedCap: Int64?
    /// The holds last recorded (why whole destinations wait); written again only when they change.
    private var recordedHolds: QueueHolds?
    /// Destinations of runnable jobs that are not configured (looked for at start and once a minute: a retry that
    /// comes due, `uploadq retry`, or a CLI with another config can make more): their jobs are claimed and fail
    /// with a clear reason instead of waiting for ever.
    private var strays: Set<String>?
    private var straysFoundAt = ContinuousClock.now
    /// Where the files of cancelled jobs are kept.
    private let cancelled: CancelledFiles
    /// Writes how transfers ended.
    private let recorder: SettlementRecorder
    private let logger: Logger
    nonisolated let wake = WakeSignal()
    /// When the loop last went round (milliseconds of the monotonic clock); at least every `pollInterval`.
    nonisolated let heartbeat = Atomic<Int64>(monotonicMilliseconds())
    private var workers: [JobID: Task<Void, Never>] = [:]
    private var stopReasons: [JobID: TransferStop] = [:]
    /// Ends of transfers not recorded yet: those of the last moments, written together by the next round (group
    /// commit), and those the database could not take (a full disk), tried again every round until they are
    /// recorded, so an upload the server confirmed is never sent again. Their rows stay `uploading` meanwhile,
    /// which no claim takes.
    private var unsettled: [JobID: Settlement] = [:]
    /// When the first retryable failure is due, as the last round read it.
    private var nextDue: Date?
    /// When the bytes sent were last booked into the database.
    private var trafficBookedAt = ContinuousClock.now
    /// Cancelled transfers whose end is being recorded in the background (in `cleanups`).
    private var recordingCancels: Set<JobID> = []
    /// Unrecorded transfer ends already told of in the log (once each).
    private var toldUnrecorded: Set<JobID> = []
    /// Whether the queue takes writes: a spell of failures is said once, and once more when it is over.
    private var health = StoreHealth()
    /// How long `--exit-when-idle` waits for a queue that cannot be written before it gives up.
    private let storeGiveUp: Duration
    /// The room kept in reserve for recording what finishes when the disk fills up.
    private let reserve: SpaceReserve?
    /// Notices steps of the wall clock, so due times move with them.
    private var clockWatch = WallClockWatch.now()
    /// Since when (on the wall clock in force) this process has written due times: only those were written under
    /// the clock that stepped. Rows from before it were written under the clock of their own time, which may be
    /// the right one (a device without a real-time clock starts in 1970 and is then set right).
    private var clockEraStart = Date().addingTimeInterval(-1)
    /// One breaker per destination; an open one keeps that destination's jobs pending (`circuit-open`).
    private var breakers: [String: CircuitBreaker]
    private var probes: [String: Task<Void, Never>] = [:]
    /// Destinations whose storage is full: their jobs wait (`quota-full`), one tries again now and then.
    private var quotas = QuotaWatch()
    /// Remote clean-ups of cancelled jobs (tus DELETE) still running; a stop waits for them.
    private var cleanups: [JobID: Task<Void, Never>] = [:]
    /// Longest sleep between two looks at the database, in case a wake-up was missed.
    private let pollInterval: Duration
    /// Return from `run()` once nothing is pending or uploading.
    private let exitWhenIdle: Bool

    init(configuration: Configuration, store: QueueStore, events: EventHub, uploaders: [String: any Uploader],
         logger: Logger, pollInterval: Duration = .seconds(5),
         exitWhenIdle: Bool = false, engine: TransferEngine? = nil, monitor: LinkMonitor? = nil,
         reserve: SpaceReserve? = nil, storeGiveUp: Duration = .seconds(60)) {
        self.exitWhenIdle = exitWhenIdle
        self.reserve = reserve
        self.storeGiveUp = storeGiveUp
        self.engine = engine
        self.monitor = monitor ?? LinkMonitor(configuration: configuration)
        self.configuration = configuration
        self.store = store
        self.events = events
        self.uploaders = uploaders
        self.limiter = BandwidthLimiter(bytesPerSecond: configuration.bandwidth.unmetered)
        cancelled = CancelledFiles(directory: configuration.cancelledDirectory)
        recorder = SettlementRecorder(configuration: configuration, store: store, events: events, uploaders: uploaders,
                                      cancelled: cancelled, logger: logger)
        self.logger = logger
        self.pollInterval = pollInterval
        breakers = configuration.destinations.mapValues { CircuitBreaker(policy: $0.circuitBreaker) }
    }

    /// Whether the loop went round recently enough (three poll intervals), for the systemd watchdog.
    nonisolated var isAlive: Bool {
        monotonicMilliseconds() - heartbeat.load(ordering: .relaxed) < 3 * Int64(pollInterval.seconds * 1000) + 1000
    }

    /// Runs until the task is cancelled, then stops every transfer at a safe point and waits for them.
    func run() async {
        monitor.watch { [wake] in wake.signal() }
        defer { monitor.stop() }
        while !Task.isCancelled {
            heartbeat.store(monotonicMilliseconds(), ordering: .relaxed)
            do {
                try await round()
                if exitWhenIdle, workers.isEmpty, !unsettled.isEmpty, health.hasLasted(storeGiveUp, at: .now) {
                    // Only ends that cannot be recorded are left, and the disk stays full: a batch run stops.
                    failure = giveUp(health.trouble ?? "the queue cannot be written")
                    break
                }
                if exitWhenIdle, workers.isEmpty, unsettled.isEmpty, try store.isIdle() {
                    logger.info("the queue is idle: nothing pending or uploading")
                    break
                }
                // With every slot busy a due retry cannot start anyway: a finishing transfer wakes the loop.
                let slotsFull = workers.count >= configuration.limits.concurrency
                var due = slotsFull ? pollInterval.seconds : nextDue.map { $0.timeIntervalSinceNow } ?? pollInterval.seconds
                if let probe = breakers.values.compactMap(\.nextProbeAt).min() {
                    due = min(due, probe.timeIntervalSinceNow)
                }
                // A full destination's trial is due then (it needs a free slot, which a finishing transfer wakes).
                if !slotsFull, let trial = quotas.nextTrialAt(among: trialEligible(
                    openCircuits: Set(breakers.filter { $0.value.isOpen }.keys))) {
                    due = min(due, trial.timeIntervalSinceNow)
                }
                let wait = min(max(due, 0.01), pollInterval.seconds)
                await wake.wait(timeout: .milliseconds(Int64(wait * 1000)))
            } catch {
                storeFailed(error)
                if exitWhenIdle, workers.isEmpty, health.hasLasted(storeGiveUp, at: .now) {
                    failure = giveUp(health.trouble ?? "\(error)")
                    break
                }
                await wake.wait(timeout: .seconds(1))
            }
        }
        await stopAll()
        if !unsettled.isEmpty {
            do { try recordUnsettled(then: { _ in }) } catch { storeFailed(error) }
        }
        for cleanup in cleanups.values { await cleanup.value }
        try? bookTraffic()
        // No runner, no holds: what a stopped queue shows is that nothing moves it.
        try? store.recordHolds(QueueHolds())
    }

    /// One round of the loop: follow the clock and the link, handle cancels and probes, then record what
    /// finished and fill the free slots, in one transaction (and book the traffic once a second). Its cost does
    /// not grow with the number of jobs that wait (a test counts the rows it reads).
    func round() async throws {
        let view: QueueStore.RoundView
        do {
            try followClockStep()
            view = try store.roundView()
            try followLink(override: view.linkOverride)
        } catch {
            // What ended is recorded all the same (what cannot be is said, and kept, by `recordUnsettled`), unless
            // the database refuses writes as a whole: then a second try would only wait out its timeout again.
            if !unsettled.isEmpty, !SettlementRecorder.refusesAnyWrite(error) {
                _ = try? recordUnsettled(then: { _ in })
            }
            throw error
        }
        nextDue = view.nextDue
        let cancelsWaiting = handleCancelRequests(view.cancelRequests)
        startDueProbes()
        try fillSlots()
        // A cancel request whose transfer's end this round recorded is handled by the next round, at once (one
        // handed to a clean-up, or kept for later, needs no round now).
        if cancelsWaiting.contains(where: { unsettled[$0] == nil && cleanups[$0] == nil }) { wake.signal() }
        if ContinuousClock.now - trafficBookedAt >= .seconds(1) {
            try bookTraffic()
            trafficBookedAt = .now
        }
        // A cancel being recorded in the background is unsettled too until it is written.
        for action in health.succeeded(unsettled: unsettled.count + recordingCancels.count, at: .now) { perform(action) }
    }

    /// The error a batch run stops with when the queue stayed unwritable for `storeGiveUp`.
    private func giveUp(_ reason: String) -> UploadQueueError {
        UploadQueueError(.diskLow, """
            the queue could not be written for \(storeGiveUp) (\(reason)); \(unsettled.count) finished upload(s) \
            are not recorded and are sent again at the next start (tus and S3 ask the server what it has first)
            """)
    }

    /// Why `run()` gave up (`--exit-when-idle` only: a queue that could not be written for `storeGiveUp`).
    private(set) var failure: UploadQueueError?

    /// Notes that the queue cannot be written (see `StoreHealth`).
    private func storeFailed(_ error: any Error) {
        let diskFull = QueueDatabase.isDiskFull(error, at: configuration.databasePath)
        for action in health.failed("\(error)", diskFull: diskFull, at: .now) { perform(action) }
    }

    private func perform(_ action: StoreHealth.Action) {
        switch action {
        case .report(let reason, let diskFull):
            let advice = diskFull
                ? "the disk is full: transfers that finish are recorded once there is room; free space on it"
                : "retrying every second"
            logger.error("scheduler: cannot write the queue (\(advice)): \(reason)")
        case .releaseReserve:
            if let reserve, reserve.release() {
                logger.warning("""
                    the queue's disk is full: released the space reserve (\(ByteCountText.text(reserve.size))) to \
                    record what finishes
                    """)
            }
        case .recovered:
            logger.notice("scheduler: the queue can be written again")
        case .checkReserve:
            guard let reserve, !reserve.isInPlace else { return }
            if reserve.ensure(freeSpace: configuration.freeSpaceGuard) {
                logger.info("there is room again: the space reserve (\(ByteCountText.text(reserve.size))) is back in place")
            }
        }
    }

    /// When the wall clock stepped since the last round, moves the due times this process wrote under the old
    /// clock (retries, patch deliveries, owed releases; probe times and unrecorded transfer ends in memory) by the
    /// step: a retry due in 30 s stays due in 30 s, whichever way the clock jumped. A step the database could not
    /// take yet is tried again next round (the watch keeps it).
    private func followClockStep() throws {
        var watch = clockWatch
        guard let step = watch.observe() else {
            clockWatch = watch
            return
        }
        try store.rebaseDueTimes(by: step.seconds, writtenFrom: clockEraStart, through: step.oldClockUntil)
        clockWatch = watch
        clockEraStart = clockEraStart.addingTimeInterval(step.seconds)
        for name in breakers.keys { breakers[name]?.shift(by: step.seconds) }
        quotas.shift(by: step.seconds)
        for id in unsettled.keys { unsettled[id]?.at.addTimeInterval(step.seconds) }
        logger.warning("""
            the wall clock stepped \(step.seconds > 0 ? "forwards" : "back") by \
            \(Duration.seconds(abs(step.seconds).rounded())); the retry, patch and release times written since this \
            process started moved with it
            """)
    }

    /// Records the transfer ends that wait: those that came in since the last round, and those the database
    /// could not take before; then runs `next` (the round's claims). All but cancels go in one transaction with
    /// it (the group commit of concurrent transfers: one flush to disk for all of them, and for the claims that
    /// replace them; see `SettlementRecorder.record`); one whose job changed meanwhile (gone, no longer
    /// `uploading`) is dropped with a word. What `next` throws on its own account costs the ends nothing: they are
    /// committed, then the error is thrown (after the cancels are handed over). When the database refuses writes
    /// as a whole, each end is kept for a later round and said once, and the error thrown.
    private func recordUnsettled<Next>(then next: (Database) throws -> Next) throws -> Next {
        let links = links.compactMapValues { $0.linkClass }
        let (together, alone) = unsettled.values.sorted { $0.job.id.rawValue < $1.job.id.rawValue }
            .reduce(into: ([Settlement](), [Settlement]())) { parts, settlement in
                if SettlementRecorder.isGroupable(settlement) { parts.0.append(settlement) } else { parts.1.append(settlement) }
            }
        let result: Result<Next, any Error>
        if together.isEmpty {
            result = Result { try store.writer.write { db in try next(db) } }
        } else {
            do {
                let leftovers: SettlementRecorder.Leftovers
                (leftovers, result) = try recorder.record(together: together, links: links, then: next)
                for settlement in together {
                    let id = settlement.job.id
                    if let error = leftovers.kept[id] {
                        // Its own trouble, not the others': kept for the next round, said once.
                        storeFailed(error)
                        if toldUnrecorded.insert(id).inserted {
                            logger.error("cannot record the end of a transfer yet; it is tried again: \(error)",
                                         metadata: ["uploadq.job": "\(id)"])
                        }
                        continue
                    }
                    unsettled[id] = nil
                    toldUnrecorded.remove(id)
                    if let error = leftovers.dropped[id] { dropUnrecordable(id, error) }
                }
            } catch {
                // The database cannot take writes: they wait, and so do the others. Each is told of once.
                let new = together.map(\.job.id).filter { !toldUnrecorded.contains($0) }
                toldUnrecorded.formUnion(new)
                for id in new {
                    logger.error("""
                        cannot record the end of a transfer yet; it is recorded once the queue can be written, without \
                        sending the file again: \(error)
                        """, metadata: ["uploadq.job": "\(id)"])
                }
                throw error
            }
        }
        // A cancel drops what the transfer left at the destination (a request that may take its time) before it
        // keeps the file and removes the job: in the background, like the clean-ups of `handleCancelRequests`, so
        // the loop goes on meanwhile. One the database cannot take comes back here.
        for settlement in alone where cleanups[settlement.job.id] == nil {
            let id = settlement.job.id
            unsettled[id] = nil
            recordingCancels.insert(id)
            let recorder = self.recorder
            cleanups[id] = Task {
                do {
                    try await recorder.recordCancel(settlement)
                } catch let error as UploadQueueError where error.code == .jobNotFound || error.code == .invalidTransition {
                    self.dropUnrecordable(id, error)
                } catch {
                    self.cancelNotRecorded(settlement, error)
                }
                self.recordingCancels.remove(id)
                self.cleanupFinished(id)
            }
        }
        return try result.get()
    }

    /// A cancelled transfer's end the database could not take: kept, and tried again by a later round.
    private func cancelNotRecorded(_ settlement: Settlement, _ error: any Error) {
        unsettled[settlement.job.id] = settlement
        storeFailed(error)
    }

    private func dropUnrecordable(_ id: JobID, _ error: UploadQueueError) {
        logger.warning("the end of a transfer is not recorded: its job changed meanwhile (\(error))",
                       metadata: ["uploadq.job": "\(id)"])
    }

    /// Looks at the link to every destination: stops transfers the new link does not allow (they resume from
    /// their confirmed offset later), makes failures due again for destinations that came back online, sets the
    /// bandwidth cap of the link class in use, and, when a class changed, books the bytes sent so far under the
    /// class they went over (else `round()` books them once a second).
    private func followLink(override: String?) throws {
        monitor.setOverride(override)
        let changes = monitor.changes()
        // The monitor reports a change once: it is taken in before anything here can fail.
        let before = links
        var cameBack: Set<String> = []
        for (name, status) in changes {
            let before = links[name]
            links[name] = status
            if before?.linkClass == .offline, status.linkClass != .offline { cameBack.insert(name) }
            if before != nil || status.linkClass != .unmetered {
                logger.notice("""
                    link to destination "\(name)": \(status.linkClass.rawValue) (\(status.source.rawValue)\
                    \(status.interface.map { ", \($0)" } ?? "")\(status.reason.map { ": \($0)" } ?? ""))
                    """, metadata: ["uploadq.destination": "\(name)"])
            }
        }
        if !cameBack.isEmpty {
            try store.retryFailedNow(destinations: cameBack)
            for name in cameBack {
                breakers[name] = CircuitBreaker(policy: configuration.destinations[name]?.circuitBreaker ?? CircuitBreakerPolicy())
            }
        }
        for (id, job) in transfers where stopReasons[id] == nil {
            guard let destination = configuration.destinations[job.destination], let link = links[job.destination],
                  LinkPolicy.waitingReason(for: job, destination: destination, link: link) != nil else { continue }
            logger.notice("""
                link is \(link.linkClass.rawValue): stopping the upload of \(job.id); it resumes from its confirmed \
                offset when the link allows
                """, metadata: ["uploadq.job": "\(id)"])
            stopReasons[id] = .link
            workers[id]?.cancel()
        }
        let metered = transfers.values.contains { links[$0.destination]?.linkClass == .metered }
        let cap = metered ? configuration.bandwidth.metered : configuration.bandwidth.unmetered
        if cap != appliedCap {
            appliedCap = cap
            engine?.setSendCap(cap)
            Task { [limiter] in await limiter.setRate(cap) }
        }
        if !changes.isEmpty {
            try bookTraffic(under: before)
            trafficBookedAt = .now
        }
    }

    /// Moves the engine's byte counts into the database, under each destination's link class in `classes` (the
    /// current ones unless given). Counts the database cannot take go back to the engine for a later booking.
    private func bookTraffic(under classes: [String: LinkStatus]? = nil) throws {
        guard let engine else { return }
        let classes = classes ?? links
        let counts = engine.traffic.drain()
        guard !counts.isEmpty else { return }
        // Patches are not a destination: their bytes go under the class of the link as a whole.
        let overall = counts.keys.contains { classes[$0] == nil } ? monitor.overall().linkClass : .unmetered
        do {
            try store.addTraffic(counts.map { name, bytes in
                (name, (classes[name]?.linkClass ?? overall).rawValue, bytes)
            })
        } catch {
            for (name, bytes) in counts { engine.traffic.add(name, Int(bytes)) }
            throw error
        }
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
        wake.signal()
    }

    private func stopAll() async {
        for probe in probes.values { probe.cancel() }
        let running = workers
        for (id, task) in running {
            if stopReasons[id] == nil { stopReasons[id] = .shutdown }
            task.cancel()
        }
        for cleanup in cleanups.values { await cleanup.value }
        for task in running.values { await task.value }
    }

    /// Stops flagged transfers running here; flagged jobs that are not running (they left a remote upload
    /// behind) leave the queue at once and their remote upload is dropped in the background. Returns the
    /// requests that wait for their transfer's end to be recorded first.
    private func handleCancelRequests(_ requests: [JobID]) -> [JobID] {
        var waiting: [JobID] = []
        for id in requests where cleanups[id] == nil {
            guard unsettled[id] == nil else {
                waiting.append(id)
                continue
            }
            if workers[id] != nil {
                if stopReasons[id] != .cancel { _ = cancelRunning(id) }
                continue
            }
            let removed: Job
            do {
                guard let job = try cancelled.remove(id, from: store) else { continue }
                removed = job
            } catch {
                logger.error("cannot cancel yet: \(error)", metadata: ["uploadq.job": "\(id)"])
                continue
            }
            events.emit(.cancelled(id))
            logger.info("upload cancelled", metadata: ["uploadq.job": "\(id)", "uploadq.destination": "\(removed.destination)"])
            if let uploader = uploaders[removed.destination] {
                cleanups[id] = Task {
                    await uploader.discard(removed)
                    self.cleanupFinished(id)
                }
            }
        }
        return waiting
    }

    /// Records the transfer ends that wait, claims jobs for the free slots (each by one indexed query through
    /// the gate of the current link and circuits) and records the holds that explain why the others wait (a
    /// handful of rows, written when they change): all in one transaction. Nothing here reads or writes the
    /// waiting jobs one by one.
    private func fillSlots() throws {
        let limit = configuration.limits.concurrency
        let openCircuits = Set(breakers.filter { $0.value.isOpen }.keys)
        let free = max(0, limit - workers.count)
        // A full destination's trial goes first, so it always has a slot when one is free.
        let trials = quotas.dueTrials(now: Date(), limit: free, among: trialEligible(openCircuits: openCircuits))
        let quotaFull = quotas.fullDestinations
        // A read that fails is tried again next round: it must not keep the transfer ends from being recorded.
        if strays == nil || ContinuousClock.now - straysFoundAt >= .seconds(60),
           let found = try? store.runnableDestinations() {
            strays = found.subtracting(configuration.destinations.keys)
            straysFoundAt = .now
        }
        let gate = ClaimGate.make(destinations: configuration.destinations, links: links,
                                  openCircuits: openCircuits.union(quotaFull), strays: strays ?? [])
        let (destinations, links, recorded) = (configuration.destinations, links, recordedHolds)
        // A trial goes through its destination's own door (its link still counts).
        let everyDoor = ClaimGate.make(destinations: destinations, links: links, openCircuits: openCircuits).doors
        let trialGates = trials.map { name in ClaimGate(doors: everyDoor.filter { $0.key == name }) }
        if free == 0 && unsettled.isEmpty {
            // Every slot busy and nothing to record: no transaction, unless the holds changed.
            let holds = QueueHolds.make(destinations: destinations, links: links, openCircuits: openCircuits,
                                        quotaFull: quotaFull, slotsFull: true)
            if holds != recorded {
                try store.recordHolds(holds)
                recordedHolds = holds
            }
            return
        }
        let result: (claimed: [(Job, JobAttempt)], trials: [String: (Job, JobAttempt)], holds: QueueHolds, due: Date?)
        do {
            result = try recordUnsettled { db in
                var trialJobs: [String: (Job, JobAttempt)] = [:]
                for (name, trialGate) in zip(trials, trialGates) {
                    trialJobs[name] = try QueueStore.claim(limit: 1, gate: trialGate, now: Date(), in: db).first
                }
                let claimed = try QueueStore.claim(limit: free - trialJobs.count, gate: gate, now: Date(), in: db)
                let holds = QueueHolds.make(destinations: destinations, links: links, openCircuits: openCircuits,
                                            quotaFull: quotaFull, slotsFull: claimed.count + trialJobs.count >= free)
                if holds != recorded { try QueueStore.recordHolds(holds, now: Date(), in: db) }
                // Read after the ends just recorded: a failure among them may be due before the next poll.
                return (claimed, trialJobs, holds, try QueueStore.nextDueDate(db))
            }
        } catch {
            // The trials did not start: they are due again next round.
            for name in trials { quotas.trialNotStarted(name, retryAt: Date().addingTimeInterval(1)) }
            throw error
        }
        let (claimed, holds, due) = (result.trials.values + result.claimed, result.holds, result.due)
        for name in trials {
            if let (job, _) = result.trials[name] {
                quotas.started(name, job: job.id)
                logger.info("destination \"\(name)\" was full: trying one upload to see whether it takes files again",
                            metadata: ["uploadq.destination": "\(name)", "uploadq.job": "\(job.id)"])
            } else if quotas.nothingToTry(name) != nil {
                logger.notice("destination \"\(name)\" was full and has nothing left to try; its hold is lifted",
                              metadata: ["uploadq.destination": "\(name)"])
            }
        }
        recordedHolds = holds
        nextDue = due
        for (job, attempt) in claimed {
            events.emit(.stateChanged(job.id, .uploading))
            logger.info("upload started", metadata: [
                "uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)",
                "attempt": "\(attempt.number)", "offset": "\(job.bytesConfirmed)",
            ])
            transfers[job.id] = job
            workers[job.id] = Task { await self.transfer(job, attempt: attempt.number) }
        }
    }

    /// Full destinations a trial could go to now: neither offline nor behind an open circuit (a change of either
    /// wakes the loop, so they are not polled meanwhile).
    private func trialEligible(openCircuits: Set<String>) -> Set<String> {
        Set(quotas.fullDestinations.filter { links[$0]?.linkClass != .offline && !openCircuits.contains($0) })
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
        } else if let next = breakers[name]?.nextProbeAt {
            logger.warning("destination \"\(name)\" still does not answer; next probe at \(next)", metadata: metadata)
        }
        wake.signal()
    }

    /// Feeds a transfer's verdict to its destination's breaker; a breaker that closes wakes the loop (its jobs may
    /// go again, and the hold is lifted).
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
            // The next pass of the loop (woken when the transfer ends) records the destination's hold.
            logger.warning("""
                destination "\(destination)" failed \(breaker.policy.threshold) times in a row; its jobs wait \
                (circuit-open) and it is probed in \(delay)
                """, metadata: metadata)
        } else if wasOpen && !breaker.isOpen {
            wake.signal()
        }
    }

    /// Feeds a transfer's end to the quota watch: a 507 holds the destination's jobs (`quota-full`), an upload
    /// that goes through lifts the hold; one log line per change.
    private func updateQuota(_ job: Job, result: Result<UploadOutcome, TransferFailure>) {
        let now = Date()
        let name = job.destination
        let change: QuotaWatch.Change?
        switch result {
        case .failure(let failure) where failure.code == TransferFailure.quotaFullCode:
            let policy = configuration.destinations[name]?.circuitBreaker ?? CircuitBreakerPolicy()
            change = quotas.refused(name, job: job.id, policy: policy, now: now)
        case .failure:
            change = quotas.finished(name, job: job.id, outcome: .other, now: now)
        case .success:
            change = quotas.finished(name, job: job.id, outcome: .uploaded, now: now)
        }
        let metadata: Logger.Metadata = ["uploadq.destination": "\(name)"]
        switch change {
        case .full(let until):
            logger.warning("""
                destination "\(name)" is full (HTTP 507); its jobs wait (quota-full), and one tries again at \(until)
                """, metadata: metadata)
        case .stillFull(let until):
            logger.warning("destination \"\(name)\" is still full; the next try is at \(until)", metadata: metadata)
        case .cleared:
            logger.notice("destination \"\(name)\" takes files again; its jobs go on", metadata: metadata)
        case nil:
            break
        }
        // The hold changes: the next round records it (a lifted one lets the jobs go).
        if change != nil { wake.signal() }
    }

    private func transfer(_ job: Job, attempt: Int) async {
        var job = job
        let result: Result<UploadOutcome, TransferFailure>
        if let uploader = uploaders[job.destination] {
            do throws(TransferFailure) {
                if job.sha256.isEmpty, configuration.destinations[job.destination]?.namesUseSHA256 == true {
                    // Enqueued while its destination hashed while sending, and the names it now makes need the
                    // digest (its config changed): hashed first, and recorded with the upload.
                    job.sha256 = try await Self.digestFirst(job)
                    // Kept at once: an attempt that fails does not cost the next one the read. (One the database
                    // cannot take now is taken again then.)
                    try? store.recordDigest(job.id, sha256: job.sha256)
                }
                let context = TransferContext.recording(job: job, attempt: attempt, store: store, events: events,
                                                        monitor: monitor, limiter: limiter,
                                                        destination: configuration.destinations[job.destination],
                                                        logger: logger)
                result = .success(try await uploader.upload(context))
            } catch {
                result = .failure(error)
            }
        } else {
            result = .failure(.permanent("unknown-destination", "destination \"\(job.destination)\" is no longer "
                + "configured; add it back to the config, then `uploadq retry \(job.id)`"))
        }
        settle(job, attempt: attempt, result: result)
        workers[job.id] = nil
        transfers[job.id] = nil
        stopReasons[job.id] = nil
        wake.signal()
    }

    /// The SHA-256 of a job's file, read whole (on a thread of its own) and checked against the intake's
    /// fingerprint.
    private nonisolated static func digestFirst(_ job: Job) async throws(TransferFailure) -> String {
        guard let sha256 = try await SourceFile(job: job).sentDigest() else {
            throw .transient("io", "the SHA-256 of \(job.file) could not be taken")
        }
        return sha256
    }

    private func settle(_ job: Job, attempt: Int, result: Result<UploadOutcome, TransferFailure>) {
        let stop = stopReasons[job.id]
        switch result {
        case .success: updateBreaker(job.destination, failure: nil)
        case .failure(let failure) where stop == nil || failure.kind == .permanent:
            updateBreaker(job.destination, failure: failure)
        case .failure: break
        }
        updateQuota(job, result: result)
        // Recorded by the next round, together with the other transfers that ended meanwhile (it follows at once:
        // the worker's end wakes the loop). Until then its row stays `uploading`, which no claim takes.
        unsettled[job.id] = Settlement(job: job, attempt: attempt, result: result, stop: stop, at: Date())
    }

}
