import Foundation
import Logging

/// Delivers what a job's end owes, one outbox consumer at a time: the metadata patch (`PatchDelivery`) and the
/// hooks (`HookDelivery`).
///
/// Every entry is a row written in the transaction that ended its job, so a crash at any point only means it is
/// delivered again (a patch with the same idempotency key, a hook run once more): at least once, never lost.
/// Entries are taken oldest first, `parallel` at a time; an outcome the database cannot take yet (a full disk) is
/// kept and recorded first thing in a later pass, and its entry is not delivered again meanwhile.
///
/// It has no loop of its own: the owed-work loop (`OwedWork`) calls `startDue()` on each pass, and each delivery's
/// end calls `ended`, which wakes that loop.
actor OutboxDispatcher {
    /// Runs on a thread of its own (`ActorThread`): the SQLite it calls blocks that thread, never the shared pool.
    private let thread = ActorThread(name: "uploadq-outbox")
    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    private let store: QueueStore
    private let deliveries: [OutboxConsumer: any OutboxDelivery]
    private var consumers: Set<OutboxConsumer> { Set(deliveries.keys) }
    private let logger: Logger
    /// Entries delivered at once.
    private let parallel = 4
    /// The deliveries under way.
    private var inFlight: [Key: Task<Void, Never>] = [:]
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
    /// Called when a delivery ends.
    private let ended: @Sendable () -> Void

    /// A dispatcher for these consumers; an entry of a consumer not among them waits (a hook taken out of the
    /// config is not run, and stays visible as pending).
    init(store: QueueStore, deliveries: [OutboxConsumer: any OutboxDelivery], logger: Logger,
         recorded: @escaping @Sendable (OutboxEntry, OutboxOutcome) -> Void = { _, _ in },
         ended: @escaping @Sendable () -> Void = {}) {
        self.store = store
        self.deliveries = deliveries
        self.logger = logger
        self.recorded = recorded
        self.ended = ended
    }

    /// The consumers delivered here.
    nonisolated var consumerSet: Set<OutboxConsumer> { Set(deliveries.keys) }

    /// What a pass left behind, for the owed-work loop's next wake.
    struct Pass: Sendable {
        /// Entries that are pending in the database but not due for a new delivery: under way, or with an outcome
        /// waiting to be recorded.
        var busy: [(JobID, OutboxConsumer)]
        /// Every slot is taken: a delivery's end wakes the loop, the due times of the others do not matter yet.
        var full: Bool
        /// Outcomes the database could not take wait: look again in a second.
        var unrecorded: Bool
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
        case .groupPatch:
            fields["group_patch"] = .boolean(true)
            return FeedEvent(.patch, job: entry.jobID, fields: fields)
        case .hook(let event):
            fields["hook"] = .string(event.key)
            return FeedEvent(.hook, job: entry.jobID, fields: fields)
        }
    }

    /// One pass: records the outcomes kept from earlier passes, then starts the due entries for the free slots,
    /// without waiting for them (each one's end calls `ended`). Throws while the queue cannot be read or written
    /// (said once per cause).
    func startDue(now: Date = Date()) throws -> Pass {
        do {
            try recordUnrecorded()
            if inFlight.count < parallel {
                // Those under way are still pending, and may come back: asked for enough to fill the free slots.
                for (entry, job) in try store.dueOutbox(of: consumers, now: now, limit: parallel + inFlight.count)
                where inFlight.count < parallel {
                    let key = Key(job: entry.jobID, consumer: entry.consumer)
                    guard inFlight[key] == nil, unrecorded[key] == nil, let delivery = deliveries[entry.consumer] else { continue }
                    HopTrace.record(entry.jobID, "\(entry.consumer) due")
                    inFlight[key] = Task {
                        let outcome = await delivery.deliver(job, entry: entry)
                        HopTrace.record(entry.jobID, "\(entry.consumer) delivered")
                        self.finish(key, entry, outcome)
                    }
                }
            }
        } catch {
            storeFailed(error)
            throw error
        }
        if storeTrouble != nil, unrecorded.isEmpty {
            storeTrouble = nil
            logger.notice("outbox: the queue can be written again")
        }
        let busy = Set(inFlight.keys).union(unrecorded.keys).map { ($0.job, $0.consumer) }
        return Pass(busy: busy, full: inFlight.count >= parallel, unrecorded: !unrecorded.isEmpty)
    }

    private func finish(_ key: Key, _ entry: OutboxEntry, _ outcome: OutboxOutcome) {
        inFlight[key] = nil
        record(entry, outcome)
        ended()
    }

    /// Asks the deliveries under way to stop (a request is dropped; a hook runs on to its end or its timeout) and
    /// records how each ended: one cut short is delivered again later, as after a crash.
    func stop() async {
        let running = inFlight.values
        for task in running { task.cancel() }
        for task in running { await task.value }
    }

    /// Delivers every entry due now once, after those under way (what a batch run does before it exits).
    func deliverDue() async {
        for task in inFlight.values { await task.value }
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
            HopTrace.record(entry.jobID, "\(entry.consumer) recorded")
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
