import Foundation
import GRDB
import Logging
import Synchronization

/// Claims runnable jobs up to the concurrency limit and runs each through its destination's uploader.
///
/// Picks by priority, then age; applies the retry policy to transient failures; turns a graceful stop into
/// `interrupted` attempts (jobs back to `pending` with their offsets) and cancel requests into removed jobs.
actor Scheduler {
    /// Runs on a thread of its own (`ActorThread`): the SQLite it calls blocks that thread, never the shared pool.
    private let thread = ActorThread(name: "uploadq-scheduler")
    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }


    private let configuration: Configuration
    private let store: QueueStore
    private let events: EventHub
    private let uploaders: [String: any Uploader]
    private let limiter: BandwidthLimiter
    private let engine: TransferEngine?
    private let monitor: LinkMonitor
    /// What the scheduler decides with (links, running transfers, circuits, quotas, constraints, the ends waiting
    /// to be recorded, the queue's health): its decisions are made there, without I/O; this actor gathers the
    /// inputs, performs the actions and holds the tasks it started (transfers, probes, clean-ups).
    private var state: SchedulerState
    /// The device's power, read when a destination requires something of it (`status` reads it here too, so a
    /// running daemon never waits for the bus to say).
    nonisolated let power: PowerMonitor?
    /// What running transfers look at before each chunk: stops asked for, and the metered budget.
    private let gauge: ConstraintGauge
    /// Where the files of cancelled jobs are kept.
    private let cancelled: CancelledFiles
    /// Writes how transfers ended.
    private let recorder: SettlementRecorder
    private let logger: Logger
    nonisolated let wake = WakeSignal()
    /// When the loop last went round (milliseconds of the monotonic clock); at least every `pollInterval`.
    nonisolated let heartbeat = Atomic<Int64>(monotonicMilliseconds())
    /// The transfers running here.
    private var workers: [JobID: Task<Void, Never>] = [:]
    /// Jobs claimed ahead for the next free slots (`uploading`, waiting for `concurrency`), first claimed first,
    /// with the attempt each opens when it starts; and the gate they went through. A transfer that ends hands its
    /// slot to the first of them at once (`handOn`), without waiting for the round that records its end.
    private var ahead: [(Job, JobAttempt)] = []
    private var aheadGate: ClaimGate?
    /// Whether a transfer that succeeds may hand its slot on: false from the end of one that failed (which can
    /// open a circuit or hold its destination) until the next round decided again.
    private var handsOn = false
    /// Jobs claimed ahead that went into a slot since the last transaction, with when: the next one writes their
    /// starts, in time order with the ends (`SettlementRecorder.record`), so a job's start comes before its end.
    private var startsToRecord: [HandedOnStart] = []
    /// Set when the link monitor reports a change: no slot is handed on until a round has decided with it.
    nonisolated let linkMoved = Atomic<Bool>(false)
    /// Set when the runner stops: no transfer starts from then on.
    private var stopping = false
    /// The longest a transfer's end waits to be recorded after its slot was handed on (the rounds wait for more
    /// ends to record at once, and are woken sooner when half the jobs claimed ahead went).
    static let handedOnWait = Duration.milliseconds(20)
    /// How long `--exit-when-idle` waits for a queue that cannot be written before it gives up.
    private let storeGiveUp: Duration
    /// The room kept in reserve for recording what finishes when the disk fills up.
    private let reserve: SpaceReserve?
    /// Notices steps of the wall clock, so due times move with them (it reads the clocks: an input).
    private var clockWatch = WallClockWatch.now()
    /// Probes of open circuits under way.
    private var probes: [String: Task<Void, Never>] = [:]
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
        let settings = SchedulerState.Settings(configuration)
        state = SchedulerState(settings: settings)
        let power = settings.needsPower ? PowerMonitor(settings: configuration.power) : nil
        self.power = power
        gauge = ConstraintGauge(traffic: engine?.traffic, power: power)
    }

    /// Whether the loop went round recently enough (three poll intervals), for the systemd watchdog.
    nonisolated var isAlive: Bool {
        monotonicMilliseconds() - heartbeat.load(ordering: .relaxed) < 3 * Int64(pollInterval.seconds * 1000) + 1000
    }

    /// Told by the link monitor's watch that a link came, went or changed class: the next round looks again.
    nonisolated func linkChanged() {
        linkMoved.store(true, ordering: .relaxed)
        wake.signal()
    }

    /// Runs until the task is cancelled, then stops every transfer at a safe point and waits for them.
    func run() async {
        while !Task.isCancelled {
            heartbeat.store(monotonicMilliseconds(), ordering: .relaxed)
            do {
                try await round()
                if exitWhenIdle, workers.isEmpty, !state.unsettled.isEmpty, state.health.hasLasted(storeGiveUp, at: .now) {
                    // Only ends that cannot be recorded are left, and the disk stays full: a batch run stops.
                    failure = giveUp(state.health.trouble ?? "the queue cannot be written")
                    break
                }
                if exitWhenIdle, workers.isEmpty, state.unsettled.isEmpty, try store.isIdle() {
                    logger.info("the queue is idle: nothing pending or uploading")
                    break
                }
                // A retry, a probe, a trial, a window or the timetable, a budget reset, the power to read again, the
                // bytes to book. (With every slot busy a due retry cannot start anyway: a finishing transfer wakes
                // the loop.)
                let unbooked = engine.map { $0.traffic.peek({ _ in true }) > 0 } ?? false
                var sleep = state.sleep(now: Date(), clock: .now, poll: pollInterval, unbooked: unbooked)
                // Slots handed on without a round: their ends and starts are recorded soon, whatever else runs.
                if !startsToRecord.isEmpty { sleep = min(sleep, Self.handedOnWait) }
                await wake.wait(timeout: sleep)
            } catch {
                storeFailed(error)
                if exitWhenIdle, workers.isEmpty, state.health.hasLasted(storeGiveUp, at: .now) {
                    failure = giveUp(state.health.trouble ?? "\(error)")
                    break
                }
                await wake.wait(timeout: .seconds(1))
            }
        }
        await stopAll()
        if !state.unsettled.isEmpty || !ahead.isEmpty || !startsToRecord.isEmpty {
            // The jobs claimed ahead go back to the queue as they were (a runner killed first leaves them to the
            // next start's recovery, which does the same).
            let unstarted = ahead.map(\.0.id)
            do {
                try recordUnsettled { db in try QueueStore.returnClaimedAhead(unstarted, in: db, now: Date()) }
                ahead = []
            } catch { storeFailed(error) }
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
        let actions: [SchedulerState.Action]
        // No slot is handed on until this round has decided, and kept ahead its jobs (`fillSlots`): a link, a power
        // or a window that changed, or a round that fails, never lets a job claimed ahead start through a door that
        // narrowed meanwhile.
        handsOn = false
        linkMoved.store(false, ordering: .relaxed)
        do {
            try followClockStep()
            view = try store.roundView()
            try loadLedger()
            actions = decide(view)
        } catch {
            // What ended is recorded all the same (what cannot be is said, and kept, by `recordUnsettled`), unless
            // the database refuses writes as a whole: then a second try would only wait out its timeout again.
            if !state.unsettled.isEmpty, !SettlementRecorder.refusesAnyWrite(error) {
                _ = try? recordUnsettled(then: { _ in })
            }
            throw error
        }
        // The state already counts on every action it returned (a probe or trial under way, a cap applied, a stop
        // asked): each is performed, whatever else fails; what the database could not take then fails the round.
        var plan: SchedulerState.ClaimPlan?
        for action in actions {
            switch action {
            case .probe(let name): startProbe(name)
            case .claim(let claims): plan = claims
            default: break
            }
        }
        if let failure = performLinkActions(actions) {
            if let plan { state.trialsNotStarted(plan.trials.map(\.name), retryAt: Date().addingTimeInterval(1)) }
            if !state.unsettled.isEmpty, !SettlementRecorder.refusesAnyWrite(failure) {
                _ = try? recordUnsettled(then: { _ in })
            }
            throw failure
        }
        state.nextDueRead(view.nextDue)
        let cancelsWaiting = handleCancelRequests(view.cancelRequests)
        if let plan { try fillSlots(plan) }
        // A cancel request whose transfer's end this round recorded is handled by the next round, at once (one
        // handed to a clean-up, or kept for later, needs no round now).
        if cancelsWaiting.contains(where: { state.unsettled[$0] == nil && cleanups[$0] == nil }) { wake.signal() }
        if state.bookingDue(at: .now) {
            try bookTraffic()
            state.trafficBooked(at: .now)
        }
        for action in state.roundSucceeded(at: .now) { perform(action) }
    }

    /// The error a batch run stops with when the queue stayed unwritable for `storeGiveUp`.
    private func giveUp(_ reason: String) -> UploadQueueError {
        UploadQueueError(.diskLow, """
            the queue could not be written for \(storeGiveUp) (\(reason)); \(state.unsettled.count) finished upload(s) \
            are not recorded and are sent again at the next start (tus and S3 ask the server what it has first)
            """)
    }

    /// Why `run()` gave up (`--exit-when-idle` only: a queue that could not be written for `storeGiveUp`).
    private(set) var failure: UploadQueueError?

    /// Notes that the queue cannot be written (see `StoreHealth`).
    private func storeFailed(_ error: any Error) {
        let diskFull = QueueDatabase.isDiskFull(error, at: configuration.databasePath)
        for action in state.storeFailed("\(error)", diskFull: diskFull, at: .now) { perform(action) }
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
        try store.rebaseDueTimes(by: step.seconds, writtenFrom: state.clockEraStart, through: step.oldClockUntil)
        clockWatch = watch
        state.shift(by: step.seconds)
        // The budget period moved with the step: stored at once, so a restart after the step keeps it (a write
        // that fails now is made by the next booking).
        if configuration.link.meteredBudget != nil, let ledger = state.ledger { try? saveLedger(ledger) }
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
        let links = state.links.compactMapValues { $0.linkClass }
        let (together, alone) = state.unsettledEnds
        let result: Result<Next, any Error>
        // The starts of jobs claimed ahead that went into a slot since the last transaction, with the ends.
        let starts = startsToRecord
        if together.isEmpty {
            result = Result {
                try store.writer.write { db in
                    for start in starts {
                        try QueueStore.recordStart(start.id, at: start.at, offset: start.offset, evenIfCancelled: true,
                                                   in: db)
                    }
                    return try next(db)
                }
            }
            if !starts.isEmpty, case .success = result { startsToRecord.removeFirst(starts.count) }
        } else {
            do {
                let leftovers: SettlementRecorder.Leftovers
                (leftovers, result) = try recorder.record(together: together, links: links, starts: starts, then: next)
                startsToRecord.removeFirst(starts.count)
                for settlement in together {
                    let id = settlement.job.id
                    if let error = leftovers.kept[id] {
                        // Its own trouble, not the others': kept for the next round, said once.
                        storeFailed(error)
                        if state.endNotRecorded(id) {
                            logger.error("cannot record the end of a transfer yet; it is tried again: \(error)",
                                         metadata: ["uploadq.job": "\(id)"])
                        }
                        continue
                    }
                    state.endRecorded(id)
                    if let error = leftovers.dropped[id] { dropUnrecordable(id, error) }
                }
            } catch {
                // The database cannot take writes: they wait, and so do the others. Each is told of once.
                for id in together.map(\.job.id) where state.endNotRecorded(id) {
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
            state.cancelRecording(id)
            let recorder = self.recorder
            cleanups[id] = Task {
                var kept: Settlement?
                do {
                    try await recorder.recordCancel(settlement)
                } catch let error as UploadQueueError where error.code == .jobNotFound || error.code == .invalidTransition {
                    self.dropUnrecordable(id, error)
                } catch {
                    // Kept, and tried again by a later round.
                    kept = settlement
                    self.storeFailed(error)
                }
                self.cancelRecordingEnded(id, kept: kept)
            }
        }
        return try result.get()
    }

    private func cancelRecordingEnded(_ id: JobID, kept: Settlement?) {
        state.cancelRecordingEnded(id, kept: kept)
        cleanupFinished(id)
    }

    private func dropUnrecordable(_ id: JobID, _ error: UploadQueueError) {
        logger.warning("the end of a transfer is not recorded: its job changed meanwhile (\(error))",
                       metadata: ["uploadq.job": "\(id)"])
    }

    /// Reads what the world says (the link, the power, the bytes not booked yet, stray destinations) and lets the
    /// state decide this round's actions.
    private func decide(_ view: QueueStore.RoundView) -> [SchedulerState.Action] {
        monitor.setOverride(view.linkOverride)
        var inputs = SchedulerState.Inputs()
        // The monitor reports a change once: it is taken in before anything here can fail.
        inputs.linkChanges = monitor.changes()
        inputs.power = power?.current()
        inputs.unbookedMetered = unbookedMeteredBytes()
        // A read that fails is tried again next round: it must not keep the transfer ends from being recorded.
        if state.straysDue(at: inputs.clock), let found = try? store.runnableDestinations() {
            inputs.strays = found.subtracting(configuration.destinations.keys)
        }
        let actions = state.decide(now: Date(), inputs: inputs)
        publishBudget()
        return actions
    }

    /// Performs what the round decided about links, power, the budget and running transfers: stops transfers the
    /// link does not allow at once (they resume from their confirmed offset later), asks those a constraint holds to
    /// stop after their chunk, makes failures due again for destinations that came back online, sets the send cap,
    /// and, when a class changed, books the bytes sent so far under the class they went over. Every action is
    /// performed; the first the database could not take is returned.
    private func performLinkActions(_ actions: [SchedulerState.Action]) -> (any Error)? {
        var failure: (any Error)?
        func attempt(_ write: () throws -> Void) {
            do { try write() } catch { failure = failure ?? error }
        }
        var linkChanged = false
        for action in actions {
            switch action {
            case .linkChanged(let name, let status, let first):
                linkChanged = true
                var fields: [String: FeedEvent.Value] = ["destination": .string(name), "class": .string(status.linkClass.rawValue),
                                                         "source": .string(status.source.rawValue)]
                if let interface = status.interface { fields["interface"] = .string(interface) }
                events.notice(FeedEvent(.link, fields: fields))
                if !first || status.linkClass != .unmetered {
                    logger.notice("""
                        link to destination "\(name)": \(status.linkClass.rawValue) (\(status.source.rawValue)\
                        \(status.interface.map { ", \($0)" } ?? "")\(status.reason.map { ": \($0)" } ?? ""))
                        """, metadata: ["uploadq.destination": "\(name)"])
                }
            case .retryFailedNow(let names):
                attempt { try store.retryFailedNow(destinations: names) }
            case .powerChanged(let reading):
                logger.notice("power: \(reading.summary)")
            case .budgetPeriodBegan(let ledger):
                logger.notice("a new metered budget period began; it resets at \(ledger.resetsAt)")
                // One the database cannot take now is stored with the next booking.
                attempt { try saveLedger(ledger) }
            case .stop(let id, _):
                logger.notice("""
                    link is \(state.links[state.running[id]?.job.destination ?? ""]?.linkClass.rawValue ?? "changed"): \
                    stopping the upload of \(id); it resumes from its confirmed offset when the link allows
                    """, metadata: ["uploadq.job": "\(id)"])
                workers[id]?.cancel()
            case .stopAtChunk(let id, let reason, let message):
                logger.notice("\(reason.rawValue): the upload of \(id) stops after its current chunk",
                              metadata: ["uploadq.job": "\(id)"])
                gauge.askToStop(id, TransferFailure(.interrupted, code: reason.rawValue, message))
            case .withdrawStop(let id):
                gauge.withdraw(id)
            case .setSendCap(let cap, let tell):
                if tell { logger.info("send cap: \(cap == 0 ? "none" : ByteCountText.text(cap) + "/s")") }
                engine?.setSendCap(cap)
                Task { [limiter] in await limiter.setRate(cap) }
            case .probe, .claim:
                break
            }
        }
        if linkChanged {
            attempt { try bookTraffic(under: state.linksBefore) }
            state.trafficBooked(at: .now)
        }
        return failure
    }

    /// Stores the budget ledger; one the database cannot take is left to the next booking.
    private func saveLedger(_ ledger: BudgetLedger) throws {
        do {
            try store.writer.write { db in try QueueStore.recordBudgetLedger(ledger, in: db) }
            state.ledgerStored(true)
        } catch {
            state.ledgerStored(false)
            throw error
        }
    }

    /// Reads the stored budget ledger once (a database that cannot be read now is tried again next round).
    private func loadLedger() throws {
        guard state.needsLedger, let budget = configuration.link.meteredBudget else { return }
        state.takeLedger(try store.budgetLedger(budget, now: Date(), timeZone: configuration.schedule.timeZone))
    }

    /// Bytes sent over metered links that the engine counted and the ledger does not hold yet.
    private func unbookedMeteredBytes() -> Int64 {
        guard configuration.link.meteredBudget != nil, let engine else { return 0 }
        let links = state.links
        let overall = monitor.overall().linkClass == .metered
        return engine.traffic.peek { label in
            configuration.destinations[label] != nil ? links[label]?.linkClass == .metered : overall
        }
    }

    /// Tells running transfers what the budget's ledger holds and which links are metered.
    private func publishBudget() {
        guard let budget = configuration.link.meteredBudget else { return }
        gauge.setBudget(budget, booked: state.ledger?.used ?? 0,
                        meteredDestinations: Set(state.links.filter { $0.value.linkClass == .metered }.keys),
                        linkMetered: monitor.overall().linkClass == .metered,
                        destinations: Set(configuration.destinations.keys))
    }

    /// Moves the engine's byte counts into the database, under each destination's link class in `classes` (the
    /// current ones unless given). Counts the database cannot take go back to the engine for a later booking.
    private func bookTraffic(under classes: [String: LinkStatus]? = nil) throws {
        guard let engine else { return }
        let classes = classes ?? state.links
        let counts = engine.traffic.drain()
        guard !counts.isEmpty else { return }
        // Patches are not a destination: their bytes go under the class of the link as a whole.
        let overall = counts.keys.contains { classes[$0] == nil } ? monitor.overall().linkClass : .unmetered
        let entries = counts.map { name, bytes in (name, (classes[name]?.linkClass ?? overall).rawValue, bytes) }
        let metered = entries.filter { $0.1 == LinkStatus.LinkClass.metered.rawValue }.reduce(0) { $0 + $1.2 }
        // The ledger with these bytes, stored with them; the state takes it once the write went through. Running
        // transfers see them counted from now on (they left the engine's counts, which the transfers also read).
        var ledger = state.ledger
        if configuration.link.meteredBudget != nil, metered > 0 { ledger?.add(metered) } else { ledger = nil }
        // A ledger a write could not take before (a new period, a clock step) goes with these bytes.
        if ledger == nil, state.ledgerUnsaved { ledger = state.ledger }
        if let ledger { gauge.setBooked(ledger.used) }
        do {
            try store.addTraffic(entries, budgetLedger: ledger)
        } catch {
            publishBudget()
            for (name, bytes) in counts { engine.traffic.add(name, Int(bytes)) }
            throw error
        }
        if ledger != nil {
            state.ledgerStored(true)
            _ = state.booked(metered: metered)
            publishBudget()
        }
    }

    /// Stops a transfer running here because its job was cancelled; false when none runs (a job claimed ahead is
    /// dropped from the line: it never starts, and the round removes it once the cancel's flag is written).
    func cancelRunning(_ id: JobID) -> Bool {
        ahead.removeAll { $0.0.id == id }
        guard let task = workers[id] else { return false }
        _ = state.stop(id, .cancel)
        task.cancel()
        return true
    }

    private func cleanupFinished(_ id: JobID) {
        cleanups[id] = nil
        wake.signal()
    }

    private func stopAll() async {
        stopping = true
        for probe in probes.values { probe.cancel() }
        let running = workers
        for (id, task) in running {
            if state.stopReason(id) == nil { _ = state.stop(id, .shutdown) }
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
            guard state.unsettled[id] == nil else {
                waiting.append(id)
                continue
            }
            if workers[id] != nil {
                if state.stopReason(id) != .cancel { _ = cancelRunning(id) }
                continue
            }
            // One claimed ahead never starts (should its removal fail now, the request stays for the next round).
            ahead.removeAll { $0.0.id == id }
            let removed: Job
            do {
                guard let job = try cancelled.remove(id, from: store) else { continue }
                removed = job
            } catch {
                logger.error("cannot cancel yet: \(error)", metadata: ["uploadq.job": "\(id)"])
                continue
            }
            events.emit(.cancelled(id))
            if let group = store.uploadedGroup(of: removed) { events.emit(.groupUploaded(group)) }
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

    /// Records the transfer ends that wait, claims jobs for the free slots as `plan` says (each by one indexed
    /// query through the gate of the current link, circuits and constraints) and records the holds that explain
    /// why the others wait (a handful of rows, written when they change): all in one transaction. Nothing here
    /// reads or writes the waiting jobs one by one.
    private func fillSlots(_ plan: SchedulerState.ClaimPlan) throws {
        let recorded = state.recordedHolds
        // The jobs claimed ahead stay while the round's gate is the one they went through and it still claims
        // ahead; otherwise they go back to the queue in this round's transaction. They fill the free slots first.
        let keepAhead = plan.ahead > 0 && aheadGate == plan.gate
        let returning = keepAhead ? [] : ahead.map(\.0.id)
        let fromAhead = keepAhead ? Array(ahead.prefix(plan.limit)) : []
        let aheadWanted = max(0, plan.ahead - (keepAhead ? ahead.count - fromAhead.count : 0))
        if plan.limit == 0 && state.unsettled.isEmpty && startsToRecord.isEmpty && returning.isEmpty {
            // What waits claimed ahead went through this very gate: slots may be handed on again.
            handsOn = keepAhead
            // Every slot busy and nothing to record: no transaction, unless the holds changed.
            if plan.holdsWhenFull != recorded {
                try store.recordHolds(plan.holdsWhenFull)
                state.holdsRecorded(plan.holdsWhenFull)
            }
            return
        }
        let result: (claimed: [(Job, JobAttempt)], trials: [String: (Job, JobAttempt)], ahead: [(Job, JobAttempt)],
                     started: [(Job, JobAttempt)], holds: QueueHolds, due: Date?)
        do {
            result = try recordUnsettled { db in
                let now = Date()
                try QueueStore.returnClaimedAhead(returning, in: db, now: now)
                // (One flagged for cancel meanwhile is not started: the next round removes it.)
                let started = try fromAhead.filter {
                    try QueueStore.recordStart($0.0.id, at: now, offset: $0.0.bytesConfirmed, in: db)
                }
                var trialJobs: [String: (Job, JobAttempt)] = [:]
                for trial in plan.trials {
                    trialJobs[trial.name] = try QueueStore.claim(limit: 1, gate: trial.gate, now: now, in: db).first
                }
                let claimed = try QueueStore.claim(limit: plan.limit - started.count - trialJobs.count,
                                                   gate: plan.gate, now: now, in: db)
                // Only once every slot is taken: a job claimed ahead never waits while a slot is free.
                let full = claimed.count + started.count + trialJobs.count >= plan.limit
                let aheadClaimed = full && aheadWanted > 0
                    ? try QueueStore.claim(limit: aheadWanted, gate: plan.gate, now: now,
                                           aheadUpTo: SchedulerState.claimAheadLargest, in: db)
                    : []
                let holds = full ? plan.holdsWhenFull : plan.holdsOtherwise
                if holds != recorded { try QueueStore.recordHolds(holds, now: now, in: db) }
                // Read after the ends just recorded: a failure among them may be due before the next poll.
                return (claimed, trialJobs, aheadClaimed, started, holds, try QueueStore.nextDueDate(db))
            }
        } catch {
            // The trials did not start: they are due again next round.
            state.trialsNotStarted(plan.trials.map(\.name), retryAt: Date().addingTimeInterval(1))
            throw error
        }
        ahead = (keepAhead ? Array(ahead.dropFirst(fromAhead.count)) : []) + result.ahead
        aheadGate = plan.ahead > 0 ? plan.gate : nil
        handsOn = plan.ahead > 0
        let claimed = result.trials.values + result.started + result.claimed
        var trials: [String: JobID?] = [:]
        for trial in plan.trials { trials[trial.name] = .some(result.trials[trial.name]?.0.id) }
        for notice in state.claimed(claimed.map(\.0), trials: trials) { tell(notice) }
        state.holdsRecorded(result.holds)
        state.nextDueRead(result.due)
        for (job, attempt) in claimed { start(job, attempt) }
    }

    /// Starts the transfer of a claimed job (its claim, or its start when claimed ahead, is written or owed).
    private func start(_ job: Job, _ attempt: JobAttempt) {
        events.emit(.stateChanged(job.id, .uploading))
        logger.info("upload started", metadata: [
            "uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)",
            "attempt": "\(attempt.number)", "offset": "\(job.bytesConfirmed)",
        ])
        workers[job.id] = Task { await self.transfer(job, attempt: attempt.number) }
    }

    /// A transfer succeeded: its slot goes at once to the first job claimed ahead, whose start the next
    /// transaction writes. A failure or a change the link monitor reported makes the next round decide first
    /// (`handsOn`, `linkMoved`); a power or window change is seen by the next round, which runs within
    /// `handedOnWait` (a small file started in between is stopped by it as any running transfer).
    private func handOn() -> Bool {
        guard handsOn, !stopping, !linkMoved.load(ordering: .relaxed), !ahead.isEmpty,
              state.running.count < state.settings.concurrency else { return false }
        let (job, attempt) = ahead.removeFirst()
        startsToRecord.append(HandedOnStart(id: job.id, at: Date(), offset: job.bytesConfirmed))
        if startsToRecord.count == 1 {
            // The first hand-off since the last transaction: its round comes within `handedOnWait`, whatever else
            // runs (the loop may be asleep until its next poll).
            Task { [wake] in
                try? await Task.sleep(for: Self.handedOnWait)
                wake.signal()
            }
        }
        _ = state.claimed([job], trials: [:])
        start(job, attempt)
        return true
    }

    /// Sends the probe of an open circuit whose time has come; a probe that is answered closes the circuit.
    private func startProbe(_ name: String) {
        guard let uploader = uploaders[name] else { return }
        logger.info("probing destination \"\(name)\"", metadata: ["uploadq.destination": "\(name)"])
        probes[name] = Task {
            let answered = await uploader.probe()
            self.finishProbe(name, answered: answered)
        }
    }

    private func finishProbe(_ name: String, answered: Bool) {
        probes[name] = nil
        tell(state.probeFinished(name, answered: answered, now: Date()))
        wake.signal()
    }

    /// Says what an event changed (one log line each) and wakes the loop where a hold changes.
    private func tell(_ notice: SchedulerState.Notice) {
        switch notice {
        case .circuitOpened(let name, let threshold, let delay):
            // The next pass of the loop (woken when the transfer ends) records the destination's hold.
            logger.warning("""
                destination "\(name)" failed \(threshold) times in a row; its jobs wait (circuit-open) and it is \
                probed in \(delay)
                """, metadata: ["uploadq.destination": "\(name)"])
        case .circuitClosed:
            wake.signal()
        case .probeAnswered(let name):
            logger.notice("destination \"\(name)\" answers again; its uploads resume",
                          metadata: ["uploadq.destination": "\(name)"])
        case .probeUnanswered(let name, let next):
            if let next {
                logger.warning("destination \"\(name)\" still does not answer; next probe at \(next)",
                               metadata: ["uploadq.destination": "\(name)"])
            }
        case .held(let name, let change):
            let metadata: Logger.Metadata = ["uploadq.destination": "\(name)"]
            switch change {
            case .held(let why, let until) where why.reason == .unverifiedAnswer:
                logger.warning("""
                    destination "\(name)": \(why.detail ?? "an answer that proves nothing"); its jobs wait \
                    (unverified-answer), nothing fails for good, and one tries again at \(until)
                    """, metadata: metadata)
            case .held(_, let until):
                logger.warning("""
                    destination "\(name)" is full (HTTP 507); its jobs wait (quota-full), and one tries again at \
                    \(until)
                    """, metadata: metadata)
            case .stillHeld(let why, let until) where why.reason == .unverifiedAnswer:
                logger.warning("destination \"\(name)\" still gives no proof of receipt; the next try is at \(until)",
                               metadata: metadata)
            case .stillHeld(_, let until):
                logger.warning("destination \"\(name)\" is still full; the next try is at \(until)", metadata: metadata)
            case .cleared(.unverifiedAnswer):
                logger.notice("destination \"\(name)\" proves receipt again; its jobs go on", metadata: metadata)
            case .cleared:
                logger.notice("destination \"\(name)\" takes files again; its jobs go on", metadata: metadata)
            }
            // The hold changes: the next round records it (a lifted one lets the jobs go).
            wake.signal()
        case .trialStarted(let name, let job):
            logger.info("destination \"\(name)\" was held: trying one upload to see whether it goes through again",
                        metadata: ["uploadq.destination": "\(name)", "uploadq.job": "\(job)"])
        case .trialNothingToTry(let name):
            logger.notice("destination \"\(name)\" was held and has nothing left to try; its hold is lifted",
                          metadata: ["uploadq.destination": "\(name)"])
        }
    }

    private func transfer(_ job: Job, attempt: Int) async {
        HopTrace.record(job.id, "transfer begins")
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
                                                        monitor: monitor, limiter: limiter, gauge: gauge,
                                                        power: state.settings.powerRequirement(for: job.destination),
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
        HopTrace.record(job.id, "transfer ended")
        for notice in state.ended(job, attempt: attempt, result: result, now: Date()) { tell(notice) }
        workers[job.id] = nil
        gauge.withdraw(job.id)
        var handedOn = false
        if case .success = result { handedOn = handOn() } else { handsOn = false }
        // A slot handed on needs no round yet: the ends wait to be recorded together (one commit, one flush for
        // all of them) until half of what was claimed ahead went, so the round's claims come before it runs dry.
        if !handedOn || ahead.count <= state.settings.concurrency { wake.signal() }
    }

    /// The SHA-256 of a job's file, read whole (on a thread of its own) and checked against the intake's
    /// fingerprint.
    private nonisolated static func digestFirst(_ job: Job) async throws(TransferFailure) -> String {
        try await SourceFile(job: job).sentDigest()
    }

}
