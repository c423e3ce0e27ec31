import Foundation
import Logging

/// Carries out what jobs owe once they end, in one loop: the outbox's deliveries (metadata patches, hooks), the
/// releases of files after upload, and the hourly prune of history.
///
/// One wake-up (a job's end, a delivery's end, another process's wake-up), one read of when the next piece is due
/// (`QueueStore.nextOwedDue`), one place a batch run finishes what is due. Deliveries run in the background, at
/// most four at once (`OutboxDispatcher`): a slow hook or patch server holds up neither the releases nor the
/// other entries. Releases are quick file operations, done in the pass.
actor OwedWork {
    /// Runs on a thread of its own (`ActorThread`): the SQLite it calls blocks that thread, never the shared pool.
    private let thread = ActorThread(name: "uploadq-owed")
    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    private let store: QueueStore
    private let outbox: OutboxDispatcher
    private let retention: RetentionSweeper
    /// Rung when something may be owed now: a job that ended, a delivery that ended, another process.
    nonisolated let wake: WakeSignal
    /// The longest sleep between two passes, in case a wake-up was missed (another process's write).
    static let poll = Duration.seconds(5)
    /// The shortest time between two passes: a burst of uploads that each wake the loop costs one pass per spacing.
    static let spacing = Duration.milliseconds(20)

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

    /// Carries out owed work as it comes due until the task is cancelled; then stops the deliveries under way
    /// (each is delivered again later, as after a crash).
    func run() async {
        let consumers = outbox.consumerSet
        while !Task.isCancelled {
            let pass = ContinuousClock.now
            let deliveries: OutboxDispatcher.Pass
            do {
                deliveries = try await outbox.startDue()
            } catch {
                // Said by the dispatcher; the releases go on (they may free the room the queue needs).
                deliveries = OutboxDispatcher.Pass(busy: [], full: true, unrecorded: true)
            }
            if await retention.releaseDue() == RetentionSweeper.batch { continue }
            await retention.pruneIfDue()
            // With every delivery slot taken, the next entry's time does not matter: a delivery's end wakes the loop.
            let next = try? store.nextOwedDue(of: deliveries.full ? [] : consumers, excluding: deliveries.busy)
            var wait = next.map { Duration.seconds(max($0.timeIntervalSinceNow, 0)) } ?? Self.poll
            if deliveries.unrecorded { wait = min(wait, .seconds(1)) }
            await wake.wait(timeout: min(max(wait, .milliseconds(10)), Self.poll), spacedFrom: pass, by: Self.spacing)
        }
        await outbox.stop()
    }

    /// Delivers every entry due now, then carries out every release due now (what a batch run does before it
    /// exits: no patch is left behind that could be sent, then no copy that could be released).
    func finishDue() async {
        await outbox.deliverDue()
        await retention.releaseAllDue()
    }
}
