import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// What runs while this process runs the queue, assembled in one place: the transfer engine, the link monitor and
/// the scheduler, and beside them the owed work (`OwedWork`: patch and hook deliveries, releases and prunes, in one
/// loop), the connectivity check, the metrics file and the control API, each a `Service` of the host's one
/// `ServiceGroup` (the daemon's, beside its spool watcher and watchdog; or the group `UploadQueue.run()` makes).
///
/// `UploadQueue.services()` builds it (taking the queue's lock and recovering what an earlier process left); the
/// facade is handed only the parts it steers (`RunnerParts`), while the services run, never this. The group stops
/// the services in the reverse of their order: the scheduler first (every transfer stopped at a safe point, its offset saved), then the control
/// API (no new requests while the rest winds down), the owed work (a batch run first delivers what is due, then
/// releases what may go), the loops that only tell or watch, the engine, and last the queue's lock. A cancelled
/// group stops them all at once, but the engine, the link monitor and the lock still wait for every other part
/// (`UsersStopped`).
final class QueueRuntime: Sendable {
    /// The services, in the order they start (and the reverse of the order they stop).
    let services: [ServiceGroupConfiguration.ServiceConfiguration]

    /// Whether a stop was asked for (rather than a batch run finding nothing left to do): set by the scheduler's
    /// service when a shutdown, not the end of the work, stopped it, or by a cancel.
    final class StopAsked: Sendable {
        private let flag = Atomic(false)
        var isSet: Bool { flag.load(ordering: .acquiring) }
        func set() { flag.store(true, ordering: .releasing) }
    }

    /// Opens once every service that uses the engine, the link monitor or the lock has ended. A graceful shutdown
    /// stops the services in order anyway; a cancelled group stops them all at once, and then the engine, the
    /// monitor and the lock still go only after the scheduler has stopped its transfers and recorded their ends.
    final class UsersStopped: Sendable {
        private struct State {
            var users = 0
            var ended = 0
            var waiters: [CheckedContinuation<Void, Never>] = []
        }

        private let state = Mutex(State())

        /// One more service to wait for (before the group runs).
        func add() { state.withLock { $0.users += 1 } }

        /// One of them has ended.
        func ended() {
            let woken = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.ended += 1
                guard state.ended >= state.users else { return [] }
                defer { state.waiters.removeAll() }
                return state.waiters
            }
            for waiter in woken { waiter.resume() }
        }

        /// Returns once all have ended (a cancel does not cut it short: what it waits for ends in any case).
        func wait() async {
            await withCheckedContinuation { continuation in
                let open = state.withLock { state -> Bool in
                    if state.ended >= state.users { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if open { continuation.resume() }
            }
        }
    }

    /// Takes the queue's lock, recovers, and builds every part; nothing runs until the group runs the services.
    /// `onReady` is called once the control API listens (or could not: said in the log).
    init(queue: UploadQueue, hub: EventHub, exitWhenIdle: Bool, onReady: @escaping @Sendable () -> Void) async throws {
        let configuration = queue.configuration
        let (store, logger) = (queue.store, queue.logger)
        let lock = try DaemonLock(path: configuration.lockPath)
        do {
            try await BlockingWork.run { try store.database.enableIncrementalVacuum() }
        } catch {
            logger.warning("""
                the database keeps its free pages for now (incremental vacuum not enabled: \(error)); tried again \
                at the next start
                """)
        }
        if !configuration.events.retiredKeys.isEmpty {
            logger.notice("""
                retired, doing nothing: [events] \(configuration.events.retiredKeys.joined(separator: ", ")); the event \
                stream is the control API's GET /v1/events/stream, on [api] socket (who may follow: [api] group)
                """)
        }
        let reserve = SpaceReserve(stateDirectory: configuration.stateDirectory)
        let startUp = StartUpWrite(configuration: configuration, reserve: reserve, giveUp: exitWhenIdle, logger: logger)
        let recovered = try await startUp.run("return interrupted uploads to pending") { try store.recoverInterrupted() }
        _ = await BlockingWork.runResult { () throws(Never) in reserve.ensure(freeSpace: configuration.freeSpaceGuard) }
        if !recovered.isEmpty {
            logger.notice("\(recovered.count) upload(s) of a stopped process go back to pending; they resume from their saved state")
        }
        let intake = queue.intake
        for problem in await BlockingWork.runResult({ () throws(Never) in intake.finishIncompleteIntakes() }).get() {
            logger.error("start-up recovery of the intake: \(problem); tried again at the next start")
        }
        let engine = TransferEngine()
        engine.setSendCap(configuration.bandwidth.unmetered)
        var built = false
        defer {
            if !built {
                engine.shutdown()
                hub.attachFeed(nil)
                hub.attachTap(nil)
            }
        }
        // What the servers taught with 413s, kept across restarts (and forgotten for destinations no longer there).
        let (learnt, override) = await BlockingWork.runResult { () throws(Never) in
            try? store.forgetRequestLimits(except: configuration.destinations.keys)
            return ((try? store.requestLimits()) ?? [:], Result { try store.setting(LinkMonitor.overrideSetting) })
        }.get()
        // Kept in order, off the shared pool, without holding up the transfer that learnt it.
        let persisting = DispatchQueue(label: "uploadq.request-limits")
        let uploaders = configuration.destinations.mapValues { destination in
            UploadQueue.uploader(for: destination, engine: engine, mint: configuration.mint, bodyLimit: RequestBodyLimit(
                destination: destination.name, learnt: learnt[destination.name] ?? RequestLimit(),
                persist: { name, value in
                    persisting.async {
                        BlockingCheck.mayBlock {
                            do {
                                try store.recordRequestLimit(name, value)
                            } catch {
                                logger.warning("cannot keep what destination \"\(name)\" taught with a 413: \(error)")
                            }
                        }
                    }
                }))
        }
        let monitor = LinkMonitor(configuration: configuration)
        monitor.setOverride(try override.get())
        // DNS and NetworkManager answer before the first claim, so a metered link is known as such from the start.
        _ = await BlockingWork.runResult { () throws(Never) in monitor.refresh() }
        // And a captive portal: nothing is sent into one found at the start.
        let connectivityCheck = configuration.link.connectivityCheck.map { ConnectivityCheck(url: $0, engine: engine) }
        let firstCheck = await connectivityCheck?.check(timeout: .seconds(5)) ?? .unknown
        await ConnectivityCheck.tell(firstCheck, monitor: monitor, store: store, logger: logger, quiet: true)
        let scheduler = Scheduler(configuration: configuration, store: store, events: hub, uploaders: uploaders,
                                  logger: logger, exitWhenIdle: exitWhenIdle, engine: engine, monitor: monitor,
                                  reserve: reserve)
        // The hooks this config has are the ones owed from now on; entries owed before are delivered by whichever
        // of them this config still has.
        try await startUp.run("record the configured hooks") { try store.setHookConsumers(configuration.hooks) }
        var deliveries: [OutboxConsumer: any OutboxDelivery] = [
            .patch: PatchDelivery(configuration: configuration, engine: engine, monitor: monitor, logger: logger),
            .groupPatch: PatchDelivery(configuration: configuration, engine: engine, monitor: monitor, logger: logger,
                                       groups: store),
        ]
        for event in HookEvent.allCases {
            guard let command = configuration.hooks.command(for: event) else { continue }
            deliveries[.hook(event)] = HookDelivery(event: event, command: command, settings: configuration.hooks,
                                                    retry: configuration.retry, logger: logger,
                                                    groups: event == .groupUploaded ? store : nil)
        }
        // What the durable event log does not keep (progress, patch and hook outcomes, link changes), for the
        // control API's live followers.
        let live = LiveEvents(readerBuffer: Int(configuration.events.readerBuffer))
        let feeder = EventFeeder(live: live, store: store)
        let owed = OwedWork(configuration: configuration, store: store, deliveries: deliveries, logger: logger) { entry, outcome in
            live.publish(OutboxDispatcher.feedEvent(entry, outcome))
        }
        // Signalled at every change: the long polls and the followers of the event stream look again.
        let changes = WakeSignal(remembers: false, alsoSignalling: live.signalSubscribers)
        hub.attachFeed { event in live.publish(event) }
        // Attached now, before the scheduler runs: no event of this run is missed. Called where each event is
        // emitted (a task woken per event to do the same cost two thread hops per small file).
        hub.attachTap { event in
            feeder.take(event)
            switch event {
            case .progress: return
            // A job that becomes uploaded may owe a patch and hooks, and owes the release of its copy; one that
            // failed may owe a hook: the owed work looks at once.
            case .stateChanged(_, .uploaded), .stateChanged(_, .failed): owed.wake.signal()
            default: break
            }
            changes.signal()
        }
        let wakeSocket: WakeSocket?
        do {
            wakeSocket = try WakeSocket(path: configuration.wakeSocketPath) { [wake = scheduler.wake, owed, changes] in
                wake.signal()
                owed.wake.signal()
                // What another process changed: the control API's long polls look again.
                changes.signal()
            }
        } catch {
            logger.warning("no wake-up socket, falling back to polling: \(error)")
            wakeSocket = nil
        }
        let stopAsked = StopAsked()
        let users = UsersStopped()
        let parts = RunnerParts(scheduler: scheduler, monitor: monitor, engine: engine)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        // A part whose loop ends on its own (none should) leaves the rest running: only the scheduler ends a run.
        // A user of the engine, the monitor or the lock says when it has ended.
        func add(_ name: String, user: Bool = true, _ body: @escaping @Sendable () async throws -> Void) {
            if user { users.add() }
            let service = ClosureService {
                defer { if user { users.ended() } }
                try await body()
            }
            services.append(.init(service: service, successTerminationBehavior: .ignore,
                                  failureTerminationBehavior: .gracefullyShutdownGroup, serviceName: name))
        }
        // Stopped last, once nothing else runs: what a 413 taught in the last moments is written, the facade lets go
        // of the parts (writing the metrics file's last lines), and the queue's lock goes.
        add("queue lock", user: false) { [lock] in
            try? await gracefulShutdown()
            await users.wait()
            await withCheckedContinuation { continuation in persisting.async { continuation.resume() } }
            hub.attachFeed(nil)
            hub.attachTap(nil)
            await queue.detach(parts)
            wakeSocket?.stop()
            lock.release()
        }
        add("transfer engine", user: false) {
            try? await gracefulShutdown()
            await users.wait()
            engine.shutdown()
        }
        add("link monitor", user: false) {
            monitor.watch { scheduler.linkChanged() }
            try? await gracefulShutdown()
            await users.wait()
            monitor.stop()
        }
        if let path = configuration.metrics.textfile {
            add("metrics") {
                await cancelWhenGracefulShutdown {
                    while !Task.isCancelled {
                        await queue.writeMetrics(to: path)
                        try? await Task.sleep(for: configuration.metrics.interval)
                    }
                }
            }
        }
        if let connectivityCheck {
            add("connectivity check") {
                await cancelWhenGracefulShutdown {
                    await connectivityCheck.run(monitor: monitor, store: store, wake: scheduler.wake, logger: logger,
                                                first: firstCheck)
                }
            }
        }
        // A batch run that ran out of work leaves no patch behind that could be sent now, and then no copy that could
        // be released (a stop asked for does not wait for them).
        add("owed work") {
            await cancelWhenGracefulShutdown { await owed.run() }
            if Task.isCancelled { stopAsked.set() }
            if exitWhenIdle && !stopAsked.isSet { await owed.finishDue() } else { await owed.stop() }
        }
        // The control API for other processes (the CLI, a sync engine, any language), bound when it starts; without
        // it (a path too long, a group that does not exist) the queue runs on, and says why.
        // The facade steers the parts from the moment the API may be asked (before "ready"), and lets go of them in the
        // lock's service, once every part has stopped.
        add("control API") {
            await queue.attach(parts)
            await ControlService(path: configuration.apiSocketPath, settings: configuration.api,
                                 api: ControlAPI(queue: queue, changes: changes, live: live), logger: logger,
                                 onListening: onReady).run()
        }
        // The scheduler ends by itself only in a batch run (nothing left to do), or failing: the group then stops the
        // rest.
        users.add()
        services.append(.init(service: ClosureService {
            defer { users.ended() }
            await cancelWhenGracefulShutdown { await scheduler.run() }
            if Task.isShuttingDownGracefully || Task.isCancelled { stopAsked.set() }
            if let failure = await scheduler.failure { throw failure }
        }, successTerminationBehavior: .gracefullyShutdownGroup, failureTerminationBehavior: .gracefullyShutdownGroup,
           serviceName: "scheduler"))
        self.services = services
        built = true
    }
}
