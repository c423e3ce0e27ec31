import Foundation
import Logging

/// Delivers a job's metadata patch: `METHOD url` with the filled body, `Idempotency-Key: <job id>` and the
/// `[patch]` credentials, through the transfer engine.
///
/// 2xx marks the patch done; 408, 429, 5xx and network failures retry on the `[retry]` schedule (or the server's
/// `Retry-After`); any other 4xx fails it for good (visible in `status` and `show`), and the job stays uploaded.
struct PatchDelivery: OutboxDelivery {
    let configuration: Configuration
    let monitor: LinkMonitor
    let logger: Logger
    let client: DestinationClient
    /// Set for the `group-patch` consumer: where the group's patch and completion are read.
    let groups: QueueStore?

    init(configuration: Configuration, engine: TransferEngine, monitor: LinkMonitor, logger: Logger,
         groups: QueueStore? = nil) {
        self.groups = groups
        self.configuration = configuration
        self.monitor = monitor
        self.logger = logger
        // Patch URLs come from the admin's own callers, or from a sidecar within `[patch] allowed_urls`.
        client = DestinationClient(name: "[patch]", http: configuration.patch.http, engine: engine, scope: .everyURL)
    }

    func deliver(_ job: Job, entry: OutboxEntry) async -> OutboxOutcome {
        if let groups { return await deliverGroup(job, entry: entry, store: groups) }
        guard let patch = job.patch, let remoteURL = job.remoteURL else {
            return .failed(error: "the job has no patch target or remote URL")
        }
        return await send(patch, body: { () throws(TransferFailure) in
            try patchBody(patch).render(for: job, remoteURL: remoteURL)
        }, key: job.id.rawValue, entry: entry, metadata: ["uploadq.job": "\(job.id)"])
    }

    /// The patch a group's close asked for, owed on its completing member: the group's body, the idempotency key
    /// `group:<owner uid, or - for the queue's own user>:<name, percent-encoded>:<when it was made, in ms>`.
    private func deliverGroup(_ job: Job, entry: OutboxEntry, store: QueueStore) async -> OutboxOutcome {
        let found: (PatchTarget, JobGroup)?
        do {
            found = try await BlockingWork.run { try store.groupPatch(of: job) }
        } catch {
            return .retry(error: "the queue cannot be read: \(error)", at: Date().addingTimeInterval(5))
        }
        guard let (patch, group) = found, group.state == .uploaded else {
            return .failed(error: "the job's group has no patch, or is not uploaded")
        }
        // The name percent-encoded: a header value is ASCII whatever the name holds.
        let name = PercentEncoding.unreserved(group.name)
        // With when the group was made: a group of the same name made after this one was pruned is another.
        let made = Int64((group.createdAt.timeIntervalSince1970 * 1000).rounded())
        let key = "group:\(group.ownerUID.map(String.init) ?? "-"):\(name):\(made)"
        return await send(patch, body: { () throws(TransferFailure) in
            let body: PatchBody
            if let text = patch.body {
                do throws(Destination.PathTemplateError) {
                    body = try PatchBody(text)
                } catch {
                    throw .permanent("patch-body", error.message)
                }
            } else {
                body = .standardGroup
            }
            return body.render(for: group)
        }, key: key, entry: entry, metadata: ["uploadq.job": "\(job.id)", "uploadq.group": "\(group.name)"])
    }

    private func send(_ patch: PatchTarget, body makeBody: () throws(TransferFailure) -> String, key: String,
                      entry: OutboxEntry, metadata: Logger.Metadata) async -> OutboxOutcome {
        // Waiting for the link is not an attempt: the patch is only looked at again later.
        guard linkAllows(patch.url) else { return .postpone(until: Date().addingTimeInterval(2)) }
        let outcome: OutboxOutcome
        do throws(TransferFailure) {
            let body = try makeBody()
            var headers = [HTTPHeader("Content-Type", "application/json"), HTTPHeader("Idempotency-Key", key)]
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
            outcome = verdict(error, attempts: entry.attempts + 1)
        }
        switch outcome {
        case .done: logger.info("record patched", metadata: metadata)
        case .retry(let error, let at): logger.warning("patch failed, retried at \(at): \(error)", metadata: metadata)
        case .failed(let error): logger.error("patch failed for good: \(error)", metadata: metadata)
        case .postpone: break
        }
        return outcome
    }

    /// Whether a patch may go on the link to `url`'s server: not offline, and on a metered link as
    /// `[patch] on_metered` says (a patch is a few hundred bytes).
    private func linkAllows(_ url: String) -> Bool {
        switch monitor.status(forURL: url).linkClass {
        case .unmetered: return true
        case .offline, .portal: return false
        case .metered: return configuration.patch.onMetered.allows(size: 512)
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

    private func verdict(_ failure: TransferFailure, attempts: Int) -> OutboxOutcome {
        switch failure.kind {
        case .permanent:
            return .failed(error: failure.message)
        case .transient(let retryAfter):
            let delay = configuration.retry.delay(afterFailure: attempts, random: Double.random(in: 0...1),
                                                  retryAfter: retryAfter)
            return .retry(error: failure.message, at: Date().addingTimeInterval(delay.seconds))
        case .interrupted where failure.code == TransferFailure.quotaFullCode || failure.isUnverified:
            // A full patch target (507), or a captive portal answering for it, waits like a failure; it is no
            // reason to send the patch again at once.
            let delay = configuration.retry.delay(afterFailure: attempts, random: Double.random(in: 0...1),
                                                  retryAfter: nil)
            return .retry(error: failure.message, at: Date().addingTimeInterval(delay.seconds))
        case .interrupted:
            return .retry(error: failure.message, at: Date())
        }
    }
}
