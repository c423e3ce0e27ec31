import Foundation
import Logging

/// Delivers the metadata patches the outbox owes: `METHOD url` with the filled body, `Idempotency-Key: <job id>`
/// and the `[patch]` credentials, through the transfer engine.
///
/// 2xx marks the patch done; 408, 429, 5xx and network failures retry on the `[retry]` schedule (or the server's
/// `Retry-After`); any other 4xx fails it for good (visible in `status` and `show`), and the job stays uploaded.
/// Every patch is a row written in the transaction that marked its job uploaded, so a crash at any point only
/// means it is sent again, with the same idempotency key.
actor PatchDispatcher {
    private let configuration: Configuration
    private let store: QueueStore
    private let engine: TransferEngine
    private let monitor: LinkMonitor
    private let logger: Logger
    private let client: DestinationClient
    nonisolated let wake = WakeSignal()
    /// Patches sent at once.
    private let parallel = 4
    /// Outcomes the database could not take yet (a full disk): recorded first thing each round, and their
    /// patches not sent again meanwhile.
    private var unrecorded: [JobID: PatchOutcome] = [:]
    /// Why the queue cannot be read or written, while it cannot (logged once per cause).
    private var storeTrouble: String?

    init(configuration: Configuration, store: QueueStore, engine: TransferEngine, monitor: LinkMonitor, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.engine = engine
        self.monitor = monitor
        self.logger = logger
        // Patch URLs come from the admin's own callers, or from a sidecar within `[patch] allowed_urls`.
        client = DestinationClient(name: "[patch]", http: configuration.patch.http, engine: engine, scope: .everyURL)
    }

    /// Sends due patches until the task is cancelled.
    func run() async {
        while !Task.isCancelled {
            let pass = ContinuousClock.now
            do {
                try recordUnrecorded()
                let due = try store.duePatches(limit: parallel)
                if !due.isEmpty {
                    await withTaskGroup(of: Void.self) { group in
                        for job in due { group.addTask { await self.deliver(job) } }
                    }
                    if unrecorded.isEmpty { continue }
                    await wake.wait(timeout: .seconds(1))
                    continue
                }
                if storeTrouble != nil {
                    storeTrouble = nil
                    logger.notice("patches: the queue can be written again")
                }
                let next = try store.nextPatchDue().map { $0.timeIntervalSinceNow } ?? 5
                await wake.wait(timeout: .milliseconds(Int64(min(max(next, 0.01), 5) * 1000)), spacedFrom: pass,
                                by: .milliseconds(20))
            } catch {
                storeFailed(error)
                await wake.wait(timeout: .seconds(1))
            }
        }
    }

    /// Logs a store error once per cause (a disk that stays full for hours says so once).
    private func storeFailed(_ error: any Error) {
        let reason = "\(error)"
        guard storeTrouble != reason else { return }
        storeTrouble = reason
        logger.error("patches: cannot read or write the queue (retrying every second): \(error)")
    }

    /// Records the outcomes kept from earlier rounds; throws while the database still cannot take them.
    private func recordUnrecorded() throws {
        for (id, outcome) in unrecorded.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            try store.finishPatch(id, outcome: outcome)
            unrecorded[id] = nil
        }
    }

    /// Sends every patch due now once (what a batch run does before it exits).
    func deliverDue() async {
        try? recordUnrecorded()
        guard let due = try? store.duePatches(limit: 10_000) else { return }
        for start in stride(from: 0, to: due.count, by: parallel) {
            await withTaskGroup(of: Void.self) { group in
                for job in due[start..<min(due.count, start + parallel)] { group.addTask { await self.deliver(job) } }
            }
        }
    }

    /// Whether a patch may go on the link to `url`'s server: not offline, and on a metered link as
    /// `[patch] on_metered` says (a patch is a few hundred bytes).
    private func linkAllows(_ url: String) -> Bool {
        switch monitor.status(forURL: url).linkClass {
        case .unmetered: return true
        case .offline: return false
        case .metered: return configuration.patch.onMetered.allows(size: 512)
        }
    }

    private func deliver(_ job: Job) async {
        guard unrecorded[job.id] == nil else { return }
        guard let patch = job.patch, let remoteURL = job.remoteURL else {
            try? store.finishPatch(job.id, outcome: .failed(error: "the job has no patch target or remote URL"))
            return
        }
        guard linkAllows(patch.url) else {
            // Waiting for the link is not an attempt: the patch is only looked at again later.
            try? store.postponePatch(job.id, until: Date().addingTimeInterval(2))
            return
        }
        let metadata: Logger.Metadata = ["uploadq.job": "\(job.id)"]
        let outcome: PatchOutcome
        do throws(TransferFailure) {
            let body = try patchBody(patch).render(for: job, remoteURL: remoteURL)
            var headers = [HTTPHeader("Content-Type", "application/json"), HTTPHeader("Idempotency-Key", job.id.rawValue)]
            for (name, value) in (patch.headers ?? [:]).sorted(by: { $0.key < $1.key }) {
                headers.append(HTTPHeader(name, value))
            }
            let method = patch.method ?? configuration.patch.method
            let response = try await client.send(method, patch.url, headers: headers, body: .bytes(Array(body.utf8)))
            if response.isSuccess {
                outcome = .done
            } else {
                throw client.failure(for: response, request: "\(method) \(URLRedaction.redact(patch.url))")
            }
        } catch {
            outcome = verdict(error, job: job)
        }
        do {
            try store.finishPatch(job.id, outcome: outcome)
        } catch {
            // Kept, and recorded once the queue can be written: the patch is not sent again meanwhile.
            unrecorded[job.id] = outcome
            storeFailed(error)
        }
        switch outcome {
        case .done: logger.info("record patched", metadata: metadata)
        case .retry(let error, let at): logger.warning("patch failed, retried at \(at): \(error)", metadata: metadata)
        case .failed(let error): logger.error("patch failed for good: \(error)", metadata: metadata)
        }
    }

    private func patchBody(_ patch: PatchTarget) throws(TransferFailure) -> PatchBody {
        guard let text = patch.body else { return configuration.patch.body }
        do {
            return try PatchBody(text)
        } catch {
            throw .permanent("patch-body", error.message)
        }
    }

    private func verdict(_ failure: TransferFailure, job: Job) -> PatchOutcome {
        switch failure.kind {
        case .permanent:
            return .failed(error: failure.message)
        case .transient(let retryAfter):
            let attempts = ((try? store.patchRecord(job.id))?.attempts ?? 0) + 1
            let delay = configuration.retry.delay(afterFailure: attempts, random: Double.random(in: 0...1),
                                                  retryAfter: retryAfter)
            return .retry(error: failure.message, at: Date().addingTimeInterval(delay.seconds))
        case .interrupted where failure.code == TransferFailure.quotaFullCode:
            // A full patch target (507) waits like a failure; it is no reason to send the patch again at once.
            let attempts = ((try? store.patchRecord(job.id))?.attempts ?? 0) + 1
            let delay = configuration.retry.delay(afterFailure: attempts, random: Double.random(in: 0...1),
                                                  retryAfter: nil)
            return .retry(error: failure.message, at: Date().addingTimeInterval(delay.seconds))
        case .interrupted:
            return .retry(error: failure.message, at: Date())
        }
    }
}
