import Foundation
import Logging

/// Why the scheduler stopped a running transfer.
enum TransferStop: Sendable, Equatable {
    case shutdown, cancel, link
}

/// How a transfer ended, kept until the database has taken it.
struct Settlement: Sendable {
    var job: Job
    var attempt: Int
    var result: Result<UploadOutcome, TransferFailure>
    /// Why the scheduler stopped it, if it did.
    var stop: TransferStop?
    /// When the transfer ended (the uploaded time, and what a retry delay counts from).
    var at: Date
}

/// Writes how a transfer ended: the job's state change through the state machine, its attempt, what it owes
/// (a release, a patch), and tells listeners. Throws when the database cannot take it, leaving the row as it was
/// so the scheduler can keep the settlement and try again.
struct SettlementRecorder: Sendable {
    let configuration: Configuration
    let store: QueueStore
    let events: EventHub
    let uploaders: [String: any Uploader]
    let cancelled: CancelledFiles
    let logger: Logger

    /// What becomes of a `reference` job's file after its upload: the job's own choice, else its destination's.
    func sourceAfterUpload(for job: Job) -> SourceAfterUpload {
        if let own = job.sourceAfterUpload, let parsed = SourceAfterUpload(own, base: "/") { return parsed }
        return configuration.destinations[job.destination]?.sourceAfterUpload ?? .keep
    }

    /// Writes how a transfer ended (its state change and attempt) and tells listeners; throws when the database
    /// cannot take it, leaving the row as it was.
    func record(_ settlement: Settlement, link: LinkStatus.LinkClass?) async throws {
        let job = settlement.job
        let attempt = settlement.attempt
        let metadata: Logger.Metadata = ["uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)"]
        switch settlement.result {
        case .success(let outcome):
            let release = FileRelease.owed(for: job, policy: configuration.retention,
                                           source: sourceAfterUpload(for: job), now: settlement.at)
            try store.finish(job.id, attempt: attempt, event: .succeed, outcome: "uploaded", error: nil, now: settlement.at,
                             release: release) {
                $0.remoteURL = outcome.remoteURL
                $0.bytesConfirmed = $0.size
            }
            events.emit(.stateChanged(job.id, .uploaded))
            logger.info("upload finished", metadata: metadata.merging(["remote_url": "\(outcome.remoteURL)"]) { $1 })
        case .failure(let failure) where settlement.stop != nil && failure.kind != .permanent:
            if settlement.stop == .cancel {
                // The resume state as the transfer left it (it may have created the remote upload).
                await uploaders[job.destination]?.discard((try? store.job(job.id)) ?? job)
                do {
                    _ = try cancelled.remove(job.id, from: store)
                    events.emit(.cancelled(job.id))
                    logger.info("upload cancelled", metadata: metadata)
                } catch {
                    // Its file could not be kept: the job stays, flagged, and a later pass tries again.
                    try store.finish(job.id, attempt: attempt, event: .interrupt, outcome: "interrupted",
                                     error: "cancel requested; waiting to keep the file: \(error)") {
                        $0.cancelRequested = true
                    }
                    logger.error("cannot cancel yet: \(error)", metadata: metadata)
                }
            } else if settlement.stop == .link {
                try store.finish(job.id, attempt: attempt, event: .interrupt, outcome: "interrupted",
                                 error: "stopped: the link is \(link?.rawValue ?? "changed"); it resumes from its confirmed offset")
                events.emit(.stateChanged(job.id, .pending))
                logger.info("upload stopped for the link; it resumes from its confirmed offset", metadata: metadata)
            } else {
                try store.finish(job.id, attempt: attempt, event: .interrupt, outcome: "interrupted",
                                 error: "stopped by a graceful shutdown")
                events.emit(.stateChanged(job.id, .pending))
                logger.info("upload interrupted; it resumes from its confirmed offset", metadata: metadata)
            }
        case .failure(let failure):
            switch failure.kind {
            case .transient(let retryAfter):
                let delay = configuration.retry.delay(afterFailure: job.failures + 1, random: Double.random(in: 0...1),
                                                      retryAfter: retryAfter)
                let retryAt = settlement.at.addingTimeInterval(delay.seconds)
                try store.finish(job.id, attempt: attempt, event: .failTransient(error: failure.message, retryAt: retryAt),
                                 outcome: "failed", error: failure.message)
                logger.warning("upload failed, will retry in \(delay)", metadata: metadata.merging(["error": "\(failure.message)"]) { $1 })
            case .permanent:
                try store.finish(job.id, attempt: attempt, event: .failPermanent(error: failure.message),
                                 outcome: "failed", error: failure.message)
                logger.error("upload failed permanently", metadata: metadata.merging(["error": "\(failure.message)"]) { $1 })
            case .interrupted:
                try store.finish(job.id, attempt: attempt, event: .interrupt, outcome: "interrupted", error: failure.message)
                events.emit(.stateChanged(job.id, .pending))
                return
            }
            events.emit(.stateChanged(job.id, .failed))
        }
    }
}
