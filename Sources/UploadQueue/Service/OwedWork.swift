import Foundation
import Logging

/// Carries out what jobs owe once they end, in one loop: the outbox's deliveries (metadata patches, hooks), the
/// releases of files after upload, and the hourly prune of history.
///
/// One wake-up (a job's end, a delivery's or a sweep's end, another process's wake-up), one read of when the next
/// piece is due (`QueueStore.nextOwedDue`), one place a batch run finishes what is due. The work itself runs in the
/// background: deliveries at most four at once (`OutboxDispatcher`), releases and prunes one sweep at a time
/// (`RetentionSweeper`; a release across file systems copies a whole file). A slow hook, patch server or archive
/// disk holds up none of the others. A queue that cannot be written is tried again after a second, not at once.
actor OwedWork {
    /// Runs on a thread of its own (`ActorThread`): the SQLite it calls blocks that thread, never the shared pool.
    private let thread = ActorThread(name: "uploadq-owed")
    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    private let store: QueueStore
    private let outbox: OutboxDispatcher
    private let retention: RetentionSweeper
    /// Signalled when something may be owed now: a job that ended, a delivery or sweep that ended, another process.
    nonisolated let wake: WakeSignal
    /// The sweep of releases (and the prune, when due) under way.
    private var sweeping: Task<Void, Never>?
    /// No sweep before this: the last one could not read or write the queue.
    private var sweepsResumeAt: ContinuousClock.Instant?
    /// When history is pruned next.
    private var pruneAt = ContinuousClock.now
    /// The longest sleep between two passes, in case a wake-up was missed (another process's write).
    static let poll = Duration.seconds(5)
    /// The shortest time between two passes: a burst of uploads that each wake the loop costs one pass per spacing.
    static let spacing = Duration.milliseconds(20)
    /// How long work waits after the queue could not be read or written.
    static let troubleWait = Duration.seconds(1)

    /// The owed work of `store`: deliveries by `deliveries` (each outcome told to `recorded` once it is), releases
    /// and prunes as `configuration` says.
    init(configuration: Configuration, store: QueueStore, deliveries: [OutboxConsumer: any OutboxDelivery],
         logger: Logger, recorded: @escaping @Sendable (OutboxEntry, OutboxOutcome) -> Void) {
        let wake = WakeSignal()
        self.wake = wake
        self.store = store
        outbox = OutboxDispatcher(store: store, deliveries: deliveries, logger: logger, recorded: recorded,
                                  ended: { wake.signal() })
        retention = RetentionSweeper(configuration: configuration, store: store, logger: logger)
    }

    /// Carries out owed work as it comes due until the task is cancelled. Deliveries still under way are left to
    /// `finishDue()` (a batch run) or `stop()`.
    func run() async {
        let consumers = outbox.consumerSet
        while !Task.isCancelled {
            let pass = ContinuousClock.now
            var deliveries: OutboxDispatcher.Pass
            do {
                deliveries = try await outbox.startDue()
            } catch {
                // Said by the dispatcher; the releases go on (they may free the room the queue needs).
                deliveries = OutboxDispatcher.Pass(busy: [], full: true, unrecorded: true)
            }
            // With every delivery slot taken, the next entry's time does not matter: a delivery's end wakes the loop.
            let due = try? store.nextOwedDue(of: deliveries.full ? [] : consumers, excluding: deliveries.busy)
            let (now, clock) = (Date(), ContinuousClock.now)
            // A read that failed: no sweep for a second either (it would read the same queue).
            if due == nil { sweepsResumeAt = max(sweepsResumeAt ?? clock, clock + Self.troubleWait) }
            if let resume = sweepsResumeAt, clock >= resume { sweepsResumeAt = nil }
            if sweeping == nil, sweepsResumeAt == nil {
                let releases = due?.release.map { $0 <= now } ?? false
                let prune = retention.prunes && clock >= pruneAt
                if releases || prune { sweep(prune: prune) }
            }
            var wakes: [Duration] = [Self.poll]
            if let outbox = due?.outbox, !deliveries.full {
                wakes.append(.seconds(outbox.timeIntervalSince(now)))
            }
            if deliveries.unrecorded || due == nil { wakes.append(Self.troubleWait) }
            if sweeping == nil {
                // Not before the sweeps may resume: each of these is then a time the next sweep is due.
                let resume = sweepsResumeAt ?? clock
                if let release = due?.release {
                    wakes.append(max(.seconds(release.timeIntervalSince(now)), resume - clock))
                }
                if retention.prunes { wakes.append(max(pruneAt, resume) - clock) }
                if due == nil { wakes.append(resume - clock) }
            }
            let wait = max(wakes.min() ?? Self.poll, .milliseconds(10))
            await wake.wait(timeout: wait, spacedFrom: pass, by: Self.spacing)
        }
    }

    /// Starts a sweep: one batch of the due releases, then the prune when it is due. Its end wakes the loop.
    private func sweep(prune: Bool) {
        if prune { pruneAt = .now + RetentionSweeper.pruneInterval }
        let (retention, wake) = (self.retention, self.wake)
        sweeping = Task {
            let batch = await retention.releaseDue()
            if prune { await retention.prune() }
            self.swept(batch)
            wake.signal()
        }
    }

    private func swept(_ batch: RetentionSweeper.Batch) {
        sweeping = nil
        sweepsResumeAt = batch.storeFailed ? .now + Self.troubleWait : nil
    }

    /// Waits for the deliveries and the sweep under way, then delivers every entry due now and carries out every
    /// release due now (what a batch run does before it exits: no patch is left behind that could be sent, then no
    /// copy that could be released).
    func finishDue() async {
        await sweeping?.value
        await outbox.deliverDue()
        await retention.releaseAllDue()
    }

    /// Stops the deliveries under way (each is delivered again later, as after a crash) and waits for the sweep.
    func stop() async {
        await outbox.stop()
        await sweeping?.value
    }
}
