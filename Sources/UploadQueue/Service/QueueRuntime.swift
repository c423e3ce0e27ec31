import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// What runs while this process runs the queue: the transfer engine, the link monitor and the scheduler, and beside
/// them the owed work (`OwedWork`: patch and hook deliveries, releases and prunes, in one loop), the live event
/// feed, the connectivity check, the metrics file and the control API, each a `Service` of one `ServiceGroup`.
///
/// `UploadQueue.run()` builds it (taking the queue's lock and recovering what an earlier process left) and runs it;
/// the facade keeps only this one reference while it runs. The group stops its services in the reverse of their
/// order: the scheduler first (every transfer stopped at a safe point, its offset saved), then the control API (no
/// new requests while the rest winds down), the owed work (a batch run first delivers what is due, then releases
/// what may go), and the loops that only tell or watch.
final class QueueRuntime: Sendable {
    let scheduler: Scheduler
    let monitor: LinkMonitor
    let engine: TransferEngine
    private let group: ServiceGroup
    private let hub: EventHub
    /// Held while the runtime exists: the daemon lock (one runner per state directory) and the wake-up socket.
    private let lock: DaemonLock
    private let wakeSocket: WakeSocket?
    private let control: ControlServer?
    /// Set when the task running the runtime is cancelled (a stop asked for): a batch run then skips its last
    /// deliveries, which would otherwise run to their end past the stop.
    private let stopAsked: StopAsked
    /// Where what the servers taught with 413s is written, in order, off the pool; drained before `run()` returns.
    private let requestLimitWrites: DispatchQueue

    /// Whether a stop was asked for; shared with the parts.
    final class StopAsked: Sendable {
        private let flag = Atomic(false)
        var isSet: Bool { flag.load(ordering: .acquiring) }
        func set() { flag.store(true, ordering: .releasing) }
    }

    /// One part of the runtime as a `Service`: its loop runs until the group's graceful shutdown cancels it, then
    /// `finally` (a batch run's last deliveries, the control API's stop) runs to its end.
    struct Part: Service {
        let name: String
        let loop: @Sendable () async -> Void
        var finally: @Sendable () async -> Void = {}

        func run() async {
            await cancelWhenGracefulShutdown(loop)
            await finally()
        }
    }

    /// Takes the queue's lock, recovers, and builds every part; nothing runs until `run()`.
    init(queue: UploadQueue, hub: EventHub, exitWhenIdle: Bool) async throws {
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
        // Rung at every change: the long polls and the followers of the event stream look again.
        let bell = ChangeBell(alsoRinging: live.ringSubscribers)
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
            bell.ring()
        }
        do {
            wakeSocket = try WakeSocket(path: configuration.wakeSocketPath) { [wake = scheduler.wake, owed, bell] in
                wake.signal()
                owed.wake.signal()
                // What another process changed: the control API's long polls look again.
                bell.ring()
            }
        } catch {
            logger.warning("no wake-up socket, falling back to polling: \(error)")
            wakeSocket = nil
        }
        // The control API for other processes (the CLI, a sync engine, any language); without it (a path too
        // long, a group that does not exist) the queue runs on, and says why.
        let control: ControlServer?
        let stopAsked = StopAsked()
        do {
            control = try await ControlServer(path: configuration.apiSocketPath, settings: configuration.api,
                                              api: ControlAPI(queue: queue, bell: bell, live: live), logger: logger)
        } catch {
            logger.warning("no control API: \(error)")
            control = nil
        }
        var parts: [Part] = []
        if let path = configuration.metrics.textfile {
            parts.append(Part(name: "metrics") {
                while !Task.isCancelled {
                    await queue.writeMetrics(to: path)
                    try? await Task.sleep(for: configuration.metrics.interval)
                }
            })
        }
        if let connectivityCheck {
            parts.append(Part(name: "connectivity check") {
                await connectivityCheck.run(monitor: monitor, store: store, wake: scheduler.wake, logger: logger,
                                            first: firstCheck)
            })
        }
        // A batch run that ran out of work leaves no patch behind that could be sent now, and then no copy that could
        // be released (a stop asked for does not wait for them).
        parts.append(Part(name: "owed work", loop: { await owed.run() }, finally: {
            if exitWhenIdle && !stopAsked.isSet { await owed.finishDue() } else { await owed.stop() }
        }))
        if let control {
            // Stopping: no new requests from other processes while the rest winds down.
            parts.append(Part(name: "control API", loop: {
                while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
            }, finally: { await control.stop() }))
        }
        // A part whose loop ended on its own (none should) leaves the rest running: only the scheduler ends a run.
        var services = parts.map { ServiceGroupConfiguration.ServiceConfiguration(service: $0, successTerminationBehavior: .ignore) }
        // The scheduler ends by itself only in a batch run (nothing left to do): the group then stops the rest.
        services.append(.init(service: Part(name: "scheduler") { await scheduler.run() },
                              successTerminationBehavior: .gracefullyShutdownGroup))
        group = ServiceGroup(configuration: .init(services: services, logger: logger))
        self.scheduler = scheduler
        self.monitor = monitor
        self.engine = engine
        self.hub = hub
        self.lock = lock
        self.control = control
        self.stopAsked = stopAsked
        requestLimitWrites = persisting
        built = true
    }

    /// Runs every part until the task is cancelled (or, in a batch run, the scheduler finds nothing left to do),
    /// then stops them in order. The cancellation does not reach the parts at once: it starts the group's graceful
    /// shutdown, which stops them one after another.
    func run() async throws {
        defer {
            hub.attachFeed(nil)
            hub.attachTap(nil)
            engine.shutdown()
        }
        guard !Task.isCancelled else {
            // Stopped before it ran: the control API, serving since the start, goes too.
            await control?.stop()
            return
        }
        let (group, stopAsked) = (self.group, self.stopAsked)
        let running = Task { try await group.run() }
        var failure: (any Error)?
        do {
            try await withTaskCancellationHandler {
                try await running.value
            } onCancel: {
                stopAsked.set()
                Task { await group.triggerGracefulShutdown() }
            }
        } catch {
            failure = error
        }
        // What a 413 taught in the last moments is written before the queue's lock goes.
        await withCheckedContinuation { continuation in requestLimitWrites.async { continuation.resume() } }
        if let failure { throw failure }
        withExtendedLifetime((lock, wakeSocket)) {}
        if let failure = await scheduler.failure { throw failure }
    }
}
