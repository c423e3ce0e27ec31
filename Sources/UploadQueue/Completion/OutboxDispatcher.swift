import Foundation
import Logging

/// Delivers what a job's end owes, one outbox consumer at a time: the metadata patch (`PatchDelivery`) and the
/// hooks (`HookDelivery`).
///
/// Every entry is a row written in the transaction that ended its job, so a crash at any point only means it is
/// delivered again (a patch with the same idempotency key, a hook run once more): at least once, never lost.
/// Entries are taken oldest first, `parallel` at a time; an outcome the database cannot take yet (a full disk) is
/// kept and recorded first thing in a later round, and its entry is not delivered again meanwhile.
actor OutboxDispatcher {
    /// Runs on a thread of its own (`ActorThread`): the SQLite it calls blocks that thread, never the shared pool.
    private let thread = ActorThread(name: "uploadq-outbox")
    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    private let store: QueueStore
    private let deliveries: [OutboxConsumer: any OutboxDelivery]
    private var consumers: Set<OutboxConsumer> { Set(deliveries.keys) }
    private let logger: Logger
    nonisolated let wake = WakeSignal()
    /// Entries delivered at once.
    private let parallel = 4
    /// Outcomes the database could not take yet, by job and consumer.
    private var unrecorded: [Key: OutboxOutcome] = [:]
    /// Why the queue cannot be read or written, while it cannot (logged once per cause).
    private var storeTrouble: String?

    private struct Key: Hashable {
        var job: JobID
        var consumer: OutboxConsumer
    }

    /// Told each outcome once it is recorded (the event feed).
    private let recorded: @Sendable (OutboxEntry, OutboxOutcome) -> Void

    /// A dispatcher for these consumers; an entry of a consumer not among them waits (a hook taken out of the
    /// config is not run, and stays visible as pending).
    init(store: QueueStore, deliveries: [OutboxConsumer: any OutboxDelivery], logger: Logger,
         recorded: @escaping @Sendable (OutboxEntry, OutboxOutcome) -> Void = { _, _ in }) {
        self.store = store
        self.deliveries = deliveries
        self.logger = logger
        self.recorded = recorded
    }

    /// The feed's line for an outcome: `patch` or `hook`, with its state (`done`, `retry`, `failed`).
    static func feedEvent(_ entry: OutboxEntry, _ outcome: OutboxOutcome) -> FeedEvent {
        var fields: [String: FeedEvent.Value] = ["attempt": .integer(Int64(entry.attempts + 1))]
        switch outcome {
        case .done: fields["state"] = .string("done")
        case .retry(let error, let at):
            fields["state"] = .string("retry")
            fields["error"] = .string(error)
            fields["retry_at"] = .string(FeedEvent.timeText(at))
        case .failed(let error):
            fields["state"] = .string("failed")
            fields["error"] = .string(error)
        case .postpone: fields["state"] = .string("waiting")
        }
        switch entry.consumer {
        case .patch:
            return FeedEvent(.patch, job: entry.jobID, fields: fields)
        case .hook(let event):
            fields["hook"] = .string(event.key)
            return FeedEvent(.hook, job: entry.jobID, fields: fields)
        }
    }

    /// Delivers due entries until the task is cancelled.
    func run() async {
        while !Task.isCancelled {
            let pass = ContinuousClock.now
            do {
                try recordUnrecorded()
                let due = try store.dueOutbox(of: consumers, limit: parallel)
                if !due.isEmpty {
                    await deliver(due)
                    if unrecorded.isEmpty { continue }
                    await wake.wait(timeout: .seconds(1))
                    continue
                }
                if storeTrouble != nil {
                    storeTrouble = nil
                    logger.notice("outbox: the queue can be written again")
                }
                let next = try store.nextOutboxDue(of: consumers).map { $0.timeIntervalSinceNow } ?? 5
                await wake.wait(timeout: .milliseconds(Int64(min(max(next, 0.01), 5) * 1000)), spacedFrom: pass,
                                by: .milliseconds(20))
            } catch {
                storeFailed(error)
                await wake.wait(timeout: .seconds(1))
            }
        }
    }

    /// Delivers every entry due now once (what a batch run does before it exits).
    func deliverDue() async {
        try? recordUnrecorded()
        guard let due = try? store.dueOutbox(of: consumers, limit: 10_000) else { return }
        for start in stride(from: 0, to: due.count, by: parallel) {
            await deliver(Array(due[start..<min(due.count, start + parallel)]))
        }
    }

    private func deliver(_ due: [(entry: OutboxEntry, job: Job)]) async {
        let work = due.filter { unrecorded[Key(job: $0.entry.jobID, consumer: $0.entry.consumer)] == nil }
        await withTaskGroup(of: (OutboxEntry, OutboxOutcome).self) { group in
            for (entry, job) in work {
                guard let delivery = deliveries[entry.consumer] else { continue }
                group.addTask { (entry, await delivery.deliver(job, entry: entry)) }
            }
            for await (entry, outcome) in group { record(entry, outcome) }
        }
    }

    private func record(_ entry: OutboxEntry, _ outcome: OutboxOutcome) {
        if case .postpone = outcome {} else { recorded(entry, outcome) }
        do {
            try store.finishOutbox(entry.jobID, entry.consumer, outcome: outcome)
        } catch {
            // Kept, and recorded once the queue can be written: the entry is not delivered again meanwhile.
            unrecorded[Key(job: entry.jobID, consumer: entry.consumer)] = outcome
            storeFailed(error)
        }
    }

    /// Records the outcomes kept from earlier rounds; throws while the database still cannot take them.
    private func recordUnrecorded() throws {
        for (key, outcome) in unrecorded.sorted(by: { ($0.key.job.rawValue, "\($0.key.consumer)") < ($1.key.job.rawValue, "\($1.key.consumer)") }) {
            try store.finishOutbox(key.job, key.consumer, outcome: outcome)
            unrecorded[key] = nil
        }
    }

    /// Logs a store error once per cause (a disk that stays full for hours says so once).
    private func storeFailed(_ error: any Error) {
        let reason = "\(error)"
        guard storeTrouble != reason else { return }
        storeTrouble = reason
        logger.error("outbox: cannot read or write the queue (retrying every second): \(error)")
    }
}

/// One consumer of the outbox: delivers what a job's end owes it, and says what became of it. It never changes
/// the job; the dispatcher records the outcome.
protocol OutboxDelivery: Sendable {
    func deliver(_ job: Job, entry: OutboxEntry) async -> OutboxOutcome
}
