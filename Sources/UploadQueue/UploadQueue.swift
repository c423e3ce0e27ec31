import Foundation
import Logging
import ServiceLifecycle

/// The upload queue as a library: accept files, inspect and steer jobs, and run transfers in this process.
///
/// The daemon is this actor plus a spool watcher; a sync engine embeds the same actor. Every call is durable:
/// `enqueue` returns once the job is on disk, and `run()` resumes whatever an earlier process left.
public actor UploadQueue {
    /// Runs on a thread of its own (`ActorThread`): the SQLite it calls blocks that thread, never the shared pool.
    private let thread = ActorThread(name: "uploadq-queue")
    /// This actor's thread: its SQLite calls block it alone, never Swift's shared threads.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    /// The configuration the queue was opened with.
    public nonisolated let configuration: Configuration
    /// The queue's database access (also used by the CLI to read without a running daemon).
    package nonisolated let store: QueueStore
    nonisolated let intake: Intake
    private nonisolated let hub = EventHub()
    let logger: Logger
    /// The parts of this process's runner while its services run (`services()`, `run()`); nil otherwise.
    private var parts: RunnerParts?
    private var scheduler: Scheduler? { parts?.scheduler }
    /// The link monitor of the running scheduler.
    private var monitor: LinkMonitor? { parts?.monitor }
    /// The transfer engine of the running scheduler.
    private var engine: TransferEngine? { parts?.engine }
    /// The last failure to write the metrics file, while it lasts.
    private var metricsError: String?

    /// Opens (creating if needed) the queue's state directory and database.
    public init(configuration: Configuration, logger: Logger = Logger(label: "uploadq")) throws {
        self.configuration = configuration
        self.logger = logger
        try BlobStore.makeDirectory(configuration.stateDirectory)
        try Self.checkOwner(of: configuration.stateDirectory)
        let database: QueueDatabase
        let path = configuration.databasePath
        do {
            database = try QueueDatabase.open(path: path)
        } catch where QueueDatabase.isDiskFull(error, at: path) {
            // Opening writes (the WAL and its index, a migration): the reserve's room lets it, and the runner makes
            // the reserve again once there is room.
            do {
                guard SpaceReserve(stateDirectory: configuration.stateDirectory).release() else { throw error }
                database = try QueueDatabase.open(path: path)
            } catch where QueueDatabase.isDiskFull(error, at: path) {
                throw UploadQueueError(.diskLow, "the disk holding the queue is full: it cannot be opened until there "
                    + "is room (\(error))", path: configuration.stateDirectory)
            }
        }
        store = QueueStore(database: database)
        intake = Intake(configuration: configuration, store: store,
                        blobs: try BlobStore(directory: configuration.blobDirectory), contentTypes: ContentTypeDetector())
    }

    /// Refuses a queue that belongs to another user: what this process wrote there (a blob, the database's WAL)
    /// would be this user's, and the queue's own user (the daemon) could not read it. `sudo uploadq enqueue`
    /// into the daemon's queue stops here, saying how to run it instead.
    static func checkOwner(of stateDirectory: String, user: uid_t = geteuid()) throws(UploadQueueError) {
        var info = stat()
        guard stat(stateDirectory, &info) == 0 else { throw .system("stat", path: stateDirectory) }
        guard info.st_uid != user else { return }
        func name(_ uid: uid_t) -> String { getpwuid(uid).map { String(cString: $0.pointee.pw_name) } ?? "\(uid)" }
        let owner = name(info.st_uid)
        throw UploadQueueError(.configuration, """
            this queue belongs to user \(owner), and this is user \(name(user)): what this process wrote there the \
            daemon could not read. Run it as \(owner) (sudo -u \(owner) uploadq …), or drop the file into the \
            daemon's spool instead; the queue's directory
            """, path: stateDirectory)
    }

    /// True while this process runs the queue's services (`run()`, or `services()` in a host's group).
    public var isRunning: Bool { scheduler != nil }

    /// State changes and progress of all jobs, from now on.
    public nonisolated var events: UploadEvents { UploadEvents(hub: hub) }

    /// Accepts a file: copies it into the queue by default (`mode: .move` takes it over, `.reference` leaves it
    /// in place). Returns the new job's id, or the id of the job that already carries the same content.
    @discardableResult
    public func enqueue(_ file: String, destination: String? = nil, metadata: [String: String] = [:],
                        patch: PatchTarget? = nil, mode: Job.IntakeMode = .copy, priority: Int = 0,
                        onMetered: Destination.MeteredPolicy? = nil) async throws -> JobID {
        try await enqueue(EnqueueRequest(path: file, destination: destination, meta: metadata, patch: patch,
                                         priority: priority, mode: mode, onMetered: onMetered?.description)).id
    }

    /// Accepts a file described by `request`; says whether it was a duplicate.
    public func enqueue(_ request: EnqueueRequest) async throws -> EnqueueResult {
        try await accept(request, noFollow: false)
    }

    /// Accepts many files at once, each with its own result: the same checks as one by one, but made durable with
    /// one flush and one commit per 256 files (what the CLI does for `enqueue A B C…`).
    public func enqueue(batch requests: [EnqueueRequest]) async -> [Result<EnqueueResult, UploadQueueError>] {
        await enqueue(batch: requests, stop: nil)
    }

    /// A batch whose reading stops (the files from the one being read on fail as `interrupted`) once `stop` is.
    func enqueue(batch requests: [EnqueueRequest], stop: IntakeStop?) async -> [Result<EnqueueResult, UploadQueueError>] {
        let intake = self.intake
        let results = await BlockingWork.runResult { () throws(Never) in intake.enqueue(batch: requests, stop: stop) }.get()
        let accepted = results.compactMap { result -> JobID? in
            guard case .success(let taken) = result, !taken.deduplicated else { return nil }
            return taken.id
        }
        for id in accepted { hub.emit(.enqueued(id)) }
        wakeRunner()
        return results
    }

    func accept(_ request: EnqueueRequest, noFollow: Bool, stop: IntakeStop? = nil) async throws -> EnqueueResult {
        let intake = self.intake
        // On a thread of its own: the spool reads a few files at once, one of them possibly for minutes.
        let result = try await BlockingWork.runOnOwnThread { try intake.enqueue(request, noFollow: noFollow, stop: stop) }
        if !result.deduplicated {
            hub.emit(.enqueued(result.id))
        }
        wakeRunner()
        return result
    }

    /// One job, or nil when there is none with this id.
    public func job(_ id: JobID) throws -> Job? { try store.job(id, holdsInForce: runnerIsUp) }

    /// Jobs newest first, optionally only those in `state`.
    public func jobs(state: JobState? = nil, limit: Int? = nil) throws -> [Job] {
        try store.jobs(state: state, limit: limit, holdsInForce: runnerIsUp)
    }

    /// Jobs newest first as `jobs(state:limit:)`, with the rows this version cannot read left out and named apart.
    public func listing(state: JobState? = nil, limit: Int? = nil) throws -> JobListing {
        try store.listing(state: state, limit: limit, holdsInForce: runnerIsUp)
    }

    /// Whether a runner (this process, or a daemon holding the lock) is up: only then do the holds it records say
    /// why jobs wait. One killed with `kill -9` leaves its holds behind, and a queue nobody runs waits for a runner,
    /// not for a free slot or a link.
    public var runnerIsUp: Bool { scheduler != nil || DaemonLock.holder(path: configuration.lockPath) != nil }

    /// A job's attempts, oldest first.
    public func attempts(of id: JobID) throws -> [Job.Attempt] { try store.attempts(of: id) }

    /// The job's patch as it stands (its attempts, its last error, when it is tried again); nil when it owes none.
    public func patchRecord(_ id: JobID) throws -> PatchRecord? { try store.patchRecord(id) }

    /// Who runs the queue, the link, and counts, bytes and active transfers.
    public func status() throws -> QueueStatus {
        let pid: Int32? = scheduler != nil ? getpid() : DaemonLock.holder(path: configuration.lockPath)
        var status = QueueStatus(runnerPID: pid, link: try link(), summary: try store.summary(holdsInForce: pid != nil),
                                 traffic: try store.traffic(),
                                 disk: configuration.freeSpaceGuard.status())
        // What still holds: an expired limit is no longer applied, so it is not shown either.
        status.requestLimits = try store.requestLimits().mapValues { $0.current() }
            .filter { $0.value.chunkCap != nil || $0.value.refusedAt != nil }
        try addConstraints(to: &status)
        for (consumer, counts) in try store.outboxCounts() {
            if case .hook(let event) = consumer { status.hooks[event] = counts }
        }
        status.lanes = try store.laneGauges()
        if configuration.spool != nil {
            status.spoolHolds = try store.spoolHolds(owner: nil, limit: 20)
            status.spoolHeldFiles = try store.spoolHoldCount()
        }
        return status
    }

    /// The device constraints as they stand: the power (when a destination requires something of it), each
    /// destination's windows, the metered budget's use.
    private func addConstraints(to status: inout QueueStatus) throws {
        let settings = SchedulerState.Settings(configuration)
        let now = Date()
        if settings.needsPower {
            status.power = QueueStatus.PowerReport(
                // The running scheduler's reading when there is one; a one-off look otherwise.
                state: scheduler?.power?.current() ?? PowerMonitor(settings: configuration.power).snapshot(),
                requirements: Dictionary(uniqueKeysWithValues: configuration.destinations.keys.map {
                    ($0, settings.powerRequirement(for: $0).description)
                }))
        }
        for name in configuration.destinations.keys {
            let windows = settings.windows(for: name)
            guard !windows.isEmpty else { continue }
            status.windows[name] = QueueStatus.WindowReport(
                open: windows.isOpen(at: now, in: settings.week), until: windows.nextChange(after: now, in: settings.week),
                windows: windows.texts)
        }
        if let budget = configuration.link.meteredBudget {
            let stored = try store.storedBudgetUse()
            let period = budget.period(containing: now, timeZone: configuration.schedule.timeZone)
            // A period that ended counts nothing yet (the daemon opens the next one when it looks).
            let current = stored.flatMap { $0.resetsAt > now ? $0 : nil }
            status.meteredBudget = QueueStatus.BudgetReport(budget: budget.description, bytes: budget.bytes,
                                                            used: current?.used ?? 0, resetsAt: current?.resetsAt ?? period.end)
        }
    }

    /// The link as a whole (the interface of the default route), classified as the daemon does: the hand-set
    /// class when there is one, else NetworkManager and the interface rules.
    public func link() throws -> QueueStatus.LinkStatus {
        if let monitor {
            // The running monitor's answers are fresh (its thread keeps them so): no waiting here.
            monitor.setOverride(try store.setting(LinkMonitor.overrideSetting))
            return monitor.overall()
        }
        let monitor = LinkMonitor(configuration: configuration)
        monitor.setOverride(try store.setting(LinkMonitor.overrideSetting))
        // What the running daemon's connectivity check found (a stopped one's is stale, and not shown).
        if DaemonLock.holder(path: configuration.lockPath) != nil {
            monitor.setCheckedPortal(try store.setting(ConnectivityCheck.setting))
        }
        monitor.refresh()
        return monitor.overall()
    }

    /// Sets the link class by hand (`auto`: detect again); kept across restarts, and a running daemon follows it
    /// within moments.
    public func setLinkOverride(_ override: Configuration.LinkOverride) throws {
        try store.setSetting(LinkMonitor.overrideSetting, override.rawValue)
        wakeRunner()
    }

    /// Runs a job's failed patch and hooks again (due now), whatever the job's state; whether it had any.
    @discardableResult
    public func retryOutbox(_ id: JobID) throws -> Bool {
        let changed = try store.retryOutbox(id)
        if changed { wakeRunner() }
        return changed
    }

    /// Skips a job that failed for good in its lane: it stays failed and visible, and the lane goes on with its next
    /// job (what `[lanes] on_failure = "skip"` does by itself).
    public func skip(_ id: JobID) throws {
        _ = try store.skip(id)
        wakeRunner()
    }

    /// Closes one of this user's groups: no member joins it any more, and once every member is uploaded one
    /// completion carries them all (at once when they already are). `patch`: the patch the completion owes, whose
    /// body may use `{{group}}`, `{{urls}}` and `{{members}}` (by default the group's name and its members' URLs).
    @discardableResult
    public func closeGroup(_ name: String, patch: PatchTarget? = nil) throws -> JobGroup {
        try closeGroup(name, patch: patch, owner: nil)
    }

    /// Closes `owner`'s group (the control API closes a dropper's own).
    package func closeGroup(_ name: String, patch: PatchTarget?, owner: UInt32?) throws -> JobGroup {
        if let patch {
            try PatchAuthority.check(patch)
            if let body = patch.body {
                guard let template = try? PatchTarget.Body(body), template.isGroupTemplate else {
                    throw UploadQueueError(.invalidArgument, """
                        a group's patch body may use {{group}}, {{urls}} and {{members}} alone (no one job's \
                        placeholder): "\(SafeText.escaped(body))"
                        """)
                }
            }
        }
        let group = try store.closeGroup(name, owner: owner, patch: patch)
        if group.state == .uploaded { hub.emit(.groupUploaded(name)) }
        wakeRunner()
        return group
    }

    /// A group, with its members' remote URLs once it is uploaded; nil when there is none. `owner`: whose (nil:
    /// the queue's own user's; another user's is named by its uid).
    public func group(_ name: String, owner: UInt32? = nil) throws -> JobGroup? {
        try store.group(name, owner: owner)
    }

    /// Every user's groups, newest first (without their members: `group(_:)` has them).
    public func groups() throws -> [JobGroup] {
        try store.groups(owner: nil, everyone: true)
    }

    /// Every user's lanes that have work or are blocked, blocked ones first.
    public func lanes() throws -> [LaneStatus] {
        try store.lanes(owner: nil, everyone: true)
    }

    /// Every uploaded group whose completion was not acknowledged yet, then each group as it completes here;
    /// after a restart the unacknowledged ones come again. Call `acknowledgeGroup(_:owner:)` once handled.
    ///
    /// Calling it makes this queue one whose completions are consumed, as `completions()` does: from then on,
    /// pruning keeps every uploaded group until it is acknowledged.
    public nonisolated func groupCompletions() -> AsyncStream<JobGroup> {
        let events = hub.subscribe { event in
            if case .groupUploaded = event { return true }
            return false
        }
        let store = self.store
        try? store.noteCompletionConsumer()
        return AsyncStream { continuation in
            let task = Task {
                var delivered = Set<String>()
                func deliverNew() async {
                    for group in (try? await BlockingWork.run { try store.unacknowledgedGroups() }) ?? [] {
                        let key = "\(group.ownerUID.map(String.init) ?? "-") \(group.name) \(group.createdAt.timeIntervalSince1970)"
                        guard delivered.insert(key).inserted else { continue }
                        continuation.yield(group)
                    }
                }
                await deliverNew()
                for await event in events {
                    guard case .groupUploaded = event else { continue }
                    await deliverNew()
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Records that the host has handled a group's completion: it is not delivered again, also after a restart.
    public nonisolated func acknowledgeGroup(_ name: String, owner: UInt32? = nil) throws {
        try store.acknowledgeGroup(name, owner: owner)
    }

    /// Makes these failed jobs pending now; for an uploaded job whose patch failed, sends the patch again.
    @discardableResult
    public func retry(_ ids: [JobID]) throws -> [JobID] {
        var changed = try store.retry(ids)
        for id in ids where !changed.contains(id) {
            if try store.retryOutbox(id) { changed.append(id) }
        }
        wakeRunner()
        return changed
    }

    /// Every uploaded job whose completion was not acknowledged yet, then each job as it is uploaded here; after a
    /// restart the unacknowledged ones come again. Call `acknowledge(_:)` once the host has handled one.
    ///
    /// Calling it makes this queue one whose completions are consumed: from then on (also after a restart),
    /// pruning the history keeps every completion until it is acknowledged. Beside a daemon, in another process,
    /// use `UploadQueueClient.completions()`: this one sees uploads made in this process alone.
    public nonisolated func completions() -> AsyncStream<Completion> {
        let events = hub.subscribe { event in
            if case .stateChanged(_, .uploaded) = event { return true }
            return false
        }
        let store = self.store
        // From now on pruning keeps completions until they are acknowledged.
        try? store.noteCompletionConsumer()
        return AsyncStream { continuation in
            let task = Task {
                var delivered = Set<JobID>()
                for job in (try? await BlockingWork.run { try store.unacknowledgedCompletions() }) ?? [] {
                    delivered.insert(job.id)
                    continuation.yield(Completion(job))
                }
                for await event in events {
                    guard case .stateChanged(let id, .uploaded) = event, !delivered.contains(id) else { continue }
                    let unacknowledged = try? await BlockingWork.run { () -> Job? in
                        try store.isAcknowledged(id) ? nil : store.job(id)
                    }
                    guard let job = unacknowledged ?? nil else { continue }
                    delivered.insert(id)
                    continuation.yield(Completion(job))
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Records that the host has handled a completion: it is not delivered again, also after a restart.
    public nonisolated func acknowledge(_ id: JobID) throws {
        try store.acknowledge(id)
    }

    /// Makes every failed job pending now.
    @discardableResult
    public func retryFailed() throws -> [JobID] {
        let changed = try store.retryAllFailed()
        wakeRunner()
        return changed
    }

    /// Cancels a job: it leaves the queue, its partial upload is dropped, and a file the queue owned is moved to
    /// `state_dir/cancelled/` (never deleted). A job transferring in another process is stopped by that process.
    @discardableResult
    public func cancel(_ id: JobID) async throws -> CancelOutcome {
        if let scheduler, await scheduler.cancelRunning(id) {
            return .requested
        }
        let runnerElsewhere = scheduler == nil && DaemonLock.holder(path: configuration.lockPath) != nil
        // With a runner in this process an `uploading` row is its own (claimed a moment ago, or its end waiting for
        // the scheduler's next round, or for room on a full disk): the cancel is a flag the runner meets.
        let (outcome, job) = try store.requestCancel(id, workerRunning: runnerElsewhere || scheduler != nil)
        if outcome == .removed {
            // The file is kept first; only then does the job leave (a failure leaves both as they were).
            _ = try CancelledFiles(directory: configuration.cancelledDirectory).remove(id, from: store)
            hub.emit(.cancelled(id))
            // The last member a closed group waited for left: the group completed with the others.
            if let group = store.uploadedGroup(of: job) { hub.emit(.groupUploaded(group)) }
            if job.resumeState != nil, let destination = configuration.destinations[job.destination] {
                // No runner is up to drop the partial remote upload: do it here.
                let engine = TransferEngine()
                await Self.uploader(for: destination, engine: engine, mint: configuration.mint).discard(job)
                engine.shutdown()
            }
        }
        wakeRunner()
        return outcome
    }

    /// The services that run transfers in this process, for the host's one `ServiceGroup`: the scheduler, the
    /// transfer engine, the link monitor, the owed work, the control API and the rest, in the order they start (the
    /// group stops them in reverse: the scheduler first, every transfer stopped at a safe point with its offset
    /// saved). Takes the queue's exclusive lock and recovers what an earlier process left before it returns: one
    /// runner per state directory. Run all of them, once, in one group: the engine and the lock go only once every
    /// other one has stopped (never run, they are held until the services are let go).
    ///
    /// - Parameters:
    ///   - exitWhenIdle: the scheduler ends once no job is pending or uploading (batch use: drain the queue, then
    ///     exit), and the group with it; failed jobs stay for a later run.
    ///   - onReady: called once the services run and the control API listens (the daemon tells systemd).
    public func services(exitWhenIdle: Bool = false, onReady: @escaping @Sendable () -> Void = {}) async throws
        -> [ServiceGroupConfiguration.ServiceConfiguration] {
        try await QueueRuntime(queue: self, hub: hub, exitWhenIdle: exitWhenIdle, onReady: onReady).services
    }

    /// Runs transfers in this process until the task is cancelled; then stops them at a safe point, with their
    /// offsets saved: `services()` in a `ServiceGroup` of their own, the task's cancel taken as a graceful shutdown.
    /// A host with a group of its own puts `services()` in it instead.
    ///
    /// - Parameters:
    ///   - exitWhenIdle: return once no job is pending or uploading (batch use: drain the queue, then exit);
    ///     failed jobs stay for a later run.
    ///   - onReady: called once the lock is held, the queue recovered and the control API listens.
    public func run(exitWhenIdle: Bool = false, onReady: @escaping @Sendable () -> Void = {}) async throws {
        let group = ServiceGroup(configuration: .init(
            services: try await services(exitWhenIdle: exitWhenIdle, onReady: onReady), logger: logger))
        // A cancelled group would stop every part at once: the cancel starts the graceful shutdown instead, which
        // stops them one after another, as SIGTERM does in the daemon.
        let running = Task { try await group.run() }
        try await withTaskCancellationHandler {
            try await running.value
        } onCancel: {
            Task { await group.triggerGracefulShutdown() }
        }
    }

    /// Called by the runtime's lock service when the services start: from now on this process is the runner.
    func attach(_ running: RunnerParts) {
        parts = running
    }

    /// Called by the runtime's lock service once every other part has stopped: the metrics file's last write, with
    /// the running monitor still there (no DNS or D-Bus while stopping), then the parts go.
    func detach(_ stopped: RunnerParts) {
        guard parts?.scheduler === stopped.scheduler else { return }
        if let path = configuration.metrics.textfile { writeMetrics(to: path, stopped: true) }
        parts = nil
    }

    /// Whether this process's transfers are healthy: the scheduler's loop and the engine thread go round, and the
    /// database answers. The systemd watchdog is fed only while this holds.
    public func isHealthy() -> Bool {
        guard let scheduler, let engine, scheduler.isAlive, engine.isAlive else { return false }
        return (try? store.isIdle()) != nil
    }

    /// Rewrites the metrics text file (`stopped`: the last write, when this process no longer runs the queue); a
    /// failure is logged, never fatal.
    func writeMetrics(to path: String, stopped: Bool = false) {
        do {
            var status = try status()
            if stopped { status.runnerPID = nil }
            try PrometheusText.write(PrometheusText.render(status), to: path)
            if metricsError != nil { logger.info("the metrics file \(path) is written again") }
            metricsError = nil
        } catch {
            // Once per cause: a disk that stays full for hours does not fill the journal with the same line.
            let text = "\(error)"
            if metricsError != text { logger.warning("cannot write the metrics file \(path): \(error)") }
            metricsError = text
        }
    }

    /// The uploader that speaks a destination's protocol.
    /// `bodyLimit` is what the destination's server taught with 413s, shared by its transfers.
    static func uploader(for destination: Destination, engine: TransferEngine, mint: MintSettings = MintSettings(),
                         bodyLimit: RequestBodyLimit? = nil) -> any Uploader {
        let limit = bodyLimit ?? RequestBodyLimit(destination: destination.name)
        return switch destination.settings {
        case .localDirectory(let settings): LocalDirectoryUploader(destination: destination, settings: settings)
        case .tus(let settings): TusUploader(destination: destination, settings: settings, engine: engine,
                                             bodyLimit: limit)
        case .rufh(let settings): RUFHUploader(destination: destination, settings: settings, engine: engine,
                                               bodyLimit: limit)
        case .s3(let settings): S3MultipartUploader(destination: destination, settings: settings, engine: engine,
                                                    bodyLimit: limit)
        case .mintedS3(let settings): CompanionUploader(destination: destination, settings: settings, engine: engine,
                                                        mint: mint, bodyLimit: limit)
        case .httpPut(let settings): HTTPPutUploader(destination: destination, settings: settings, engine: engine,
                                                     bodyLimit: limit, mint: mint)
        case .httpPost(let settings): HTTPPostUploader(destination: destination, settings: settings, engine: engine,
                                                       bodyLimit: limit, mint: mint)
        }
    }

    /// Wakes whoever runs the queue: this process's scheduler, or a daemon's through its socket.
    private func wakeRunner() {
        if let scheduler {
            scheduler.wake.signal()
        } else {
            WakeSocket.poke(path: configuration.wakeSocketPath)
        }
    }

    /// Prunes uploaded jobs (with their attempts, delivered patches and acknowledged completions) and kept files of
    /// cancelled jobs finished more than `age` ago, then gives the database's free space back (`uploadq prune`).
    /// Failed and live jobs are never pruned; nor are patches still owed or completions not yet acknowledged.
    public func prune(olderThan age: Duration, dryRun: Bool = false) async throws -> PruneReport {
        let pruner = HistoryPruner(store: store, cancelled: CancelledFiles(directory: configuration.cancelledDirectory),
                                   databasePath: configuration.databasePath)
        // Copies owed from before retention existed are judged by the policy while their jobs still exist.
        try store.resolvePolicyReleases(configuration.retention)
        var report = try await pruner.prune(before: Date().addingTimeInterval(-age.seconds), dryRun: dryRun,
                                            truncateLog: true)
        if !dryRun, report.jobs > 0 {
            // A database no runner has switched to incremental vacuum yet gets it now: the one VACUUM that takes
            // gives the space back at once.
            try store.database.enableIncrementalVacuum()
            report.databaseBytesAfter = pruner.databaseBytes()
        }
        return report
    }
}
