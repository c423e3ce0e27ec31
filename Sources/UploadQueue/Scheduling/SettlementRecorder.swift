import Foundation
import GRDB
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

/// A job claimed ahead that went into a slot handed on (`Scheduler.handOn`): its start, written by the next
/// transaction.
struct HandedOnStart: Sendable {
    var id: JobID
    var at: Date
    /// Where its transfer started.
    var offset: Int64
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

    /// Whether `record(together:)` can take the settlement: all but a cancel, which keeps the job's file first.
    static func isGroupable(_ settlement: Settlement) -> Bool {
        guard settlement.stop == .cancel, case .failure(let failure) = settlement.result else { return true }
        return failure.kind == .permanent
    }

    /// What `record(together:)` could not record: ends to drop (their job changed meanwhile: gone, no longer
    /// uploading) and ends to keep for a later try (any other error of their own).
    struct Leftovers {
        var dropped: [JobID: UploadQueueError] = [:]
        var kept: [JobID: any Error] = [:]
    }

    /// Records the ends of transfers in one transaction: the group commit of concurrent transfers, one commit
    /// (one flush to disk) for all of them; then runs `next` in the same transaction (the scheduler's claims for
    /// the slots they freed). Listeners hear of each end only once it is on disk. Cancels do not belong here
    /// (`isGroupable`).
    ///
    /// When the database as a whole refuses (busy, full, failing), that error is thrown and nothing is recorded.
    /// When something in the transaction fails on its own account (a job that changed meanwhile, a row that cannot
    /// be read), it is rolled back and the ends are written again in a transaction of their own, each in a
    /// savepoint: what fails there is rolled back alone and returned (`Leftovers`); then `next` runs in another
    /// transaction, and what it throws is returned too.
    ///
    /// `starts` (of slots handed on) go in the same transaction. Ends and starts are written in the order they
    /// happened, so the event log's sequence tells them in that order too, and a job's start always comes before
    /// its end.
    func record<Next>(together batch: [Settlement], links: [String: LinkStatus.LinkClass],
                      starts: [HandedOnStart] = [],
                      then next: (Database) throws -> Next) throws -> (Leftovers, Result<Next, any Error>) {
        let batch = batch.sorted { $0.at < $1.at }
        let starts = starts.sorted { $0.at < $1.at }
        /// Writes the starts up to `time` (all that are left when nil) that `written` has not written yet.
        func writeStarts(upTo time: Date?, _ written: inout Int, in db: Database) throws {
            while written < starts.count, time.map({ starts[written].at <= $0 }) ?? true {
                let start = starts[written]
                // (A job flagged for cancel meanwhile started all the same: its cancel stops it as a running one.)
                try QueueStore.recordStart(start.id, at: start.at, offset: start.offset, evenIfCancelled: true, in: db)
                written += 1
            }
        }
        do {
            // The common case: everything goes in, and no savepoint (each a statement SQLite parses, and a
            // journal of its own) is needed.
            let (effects, value) = try store.writer.write { db in
                var effects: [() -> Void] = []
                var written = 0
                for settlement in batch {
                    try writeStarts(upTo: settlement.at, &written, in: db)
                    effects += try write(settlement, link: links[settlement.job.destination], in: db)
                }
                try writeStarts(upTo: nil, &written, in: db)
                return (effects, try next(db))
            }
            for effect in effects { effect() }
            return (Leftovers(), .success(value))
        } catch where !Self.refusesAnyWrite(error) {
            let (effects, leftovers) = try store.writer.write { db in
                var effects: [() -> Void] = []
                var leftovers = Leftovers()
                var written = 0
                for settlement in batch {
                    try writeStarts(upTo: settlement.at, &written, in: db)
                    do {
                        var told: [() -> Void] = []
                        try db.inSavepoint {
                            told = try write(settlement, link: links[settlement.job.destination], in: db)
                            return .commit
                        }
                        effects += told
                    } catch let error as UploadQueueError where error.code == .jobNotFound || error.code == .invalidTransition {
                        leftovers.dropped[settlement.job.id] = error
                    } catch {
                        leftovers.kept[settlement.job.id] = error
                    }
                }
                try writeStarts(upTo: nil, &written, in: db)
                return (effects, leftovers)
            }
            for effect in effects { effect() }
            return (leftovers, Result { try store.writer.write { db in try next(db) } })
        }
    }

    /// Whether `error` is the database refusing writes as a whole (busy past its timeout, a full disk, an I/O
    /// error, a read-only or unreadable file): trying the same work again in smaller pieces cannot help, and
    /// would only wait out the busy timeout twice. Damage (`SQLITE_CORRUPT`) is often one page: the pieces that
    /// do not touch it still go in.
    static func refusesAnyWrite(_ error: any Error) -> Bool {
        guard let error = error as? DatabaseError else { return false }
        let whole: [ResultCode] = [.SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_FULL, .SQLITE_IOERR, .SQLITE_NOMEM,
                                   .SQLITE_READONLY, .SQLITE_NOTADB, .SQLITE_CANTOPEN, .SQLITE_PROTOCOL,
                                   .SQLITE_INTERRUPT, .SQLITE_ABORT]
        return whole.contains(error.resultCode)
    }

    /// Writes one transfer end in `db`; returns what to tell once it is committed (events, log lines).
    private func write(_ settlement: Settlement, link: LinkStatus.LinkClass?, in db: Database) throws -> [() -> Void] {
        let job = settlement.job
        let attempt = settlement.attempt
        let metadata: Logger.Metadata = ["uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)"]
        let at = settlement.at
        switch settlement.result {
        case .success(let outcome):
            // A job hashed while sending gets its SHA-256 with the upload, in the same write.
            var uploaded = job
            if uploaded.sha256.isEmpty, let sha256 = outcome.sha256 { uploaded.sha256 = sha256 }
            let release = FileRelease.owed(for: uploaded, policy: configuration.retention,
                                           source: sourceAfterUpload(for: uploaded), now: at)
            try QueueStore.finish(job.id, attempt: attempt, event: .succeed, outcome: "uploaded", error: nil, now: at,
                                  release: release, in: db) {
                $0.remoteURL = outcome.remoteURL
                $0.bytesConfirmed = $0.size
                if $0.sha256.isEmpty { $0.sha256 = uploaded.sha256 }
            }
            let completedGroup = try QueueStore.groupCompleted(by: job, in: db)
            return [{
                events.emit(.stateChanged(job.id, .uploaded))
                if let completedGroup { events.emit(.groupUploaded(completedGroup)) }
                logger.info("upload finished", metadata: metadata.merging(["remote_url": "\(URLRedaction.redact(outcome.remoteURL))"]) { $1 })
            }]
        case .failure(let failure) where settlement.stop != nil && failure.kind != .permanent:
            let why = settlement.stop == .link
                ? "stopped: the link is \(link?.rawValue ?? "changed"); it resumes from its confirmed offset"
                : "stopped by a graceful shutdown"
            try QueueStore.finish(job.id, attempt: attempt, event: .interrupt, outcome: "interrupted", error: why,
                                  now: at, in: db)
            return [{
                events.emit(.stateChanged(job.id, .pending))
                if settlement.stop == .link {
                    logger.info("upload stopped for the link; it resumes from its confirmed offset", metadata: metadata)
                } else {
                    logger.info("upload interrupted; it resumes from its confirmed offset", metadata: metadata)
                }
            }]
        case .failure(let failure):
            switch failure.kind {
            case .transient(let retryAfter):
                let delay = configuration.retry.delay(afterFailure: job.failures + 1, random: Double.random(in: 0...1),
                                                      retryAfter: retryAfter)
                let retryAt = at.addingTimeInterval(delay.seconds)
                try QueueStore.finish(job.id, attempt: attempt, event: .failTransient(error: failure.message, retryAt: retryAt),
                                      outcome: "failed", error: failure.message, now: at, in: db)
                return [{
                    events.emit(.stateChanged(job.id, .failed))
                    logger.warning("upload failed, will retry in \(delay)",
                                   metadata: metadata.merging(["error": "\(failure.message)"]) { $1 })
                }]
            case .permanent:
                try QueueStore.finish(job.id, attempt: attempt, event: .failPermanent(error: failure.message),
                                      outcome: "failed", error: failure.message, now: at, in: db)
                return [{
                    events.emit(.stateChanged(job.id, .failed))
                    logger.error("upload failed permanently", metadata: metadata.merging(["error": "\(failure.message)"]) { $1 })
                }]
            case .interrupted:
                // An answer that proved nothing is its own outcome in the history: no verdict, but not a stop either.
                let unverified = failure.isUnverified
                try QueueStore.finish(job.id, attempt: attempt, event: .interrupt,
                                      outcome: unverified ? "unverified" : "interrupted", error: failure.message,
                                      now: at, in: db)
                return [{
                    events.emit(.stateChanged(job.id, .pending))
                    if unverified {
                        logger.warning("upload not proven; it waits and tries again",
                                       metadata: metadata.merging(["error": "\(failure.message)"]) { $1 })
                    }
                }]
            }
        }
    }

    /// A cancelled transfer (one `isGroupable` refuses): drops what it left at the destination, keeps the job's
    /// file, removes the job. Throws when the database cannot take it, leaving the row as it was.
    func recordCancel(_ settlement: Settlement) async throws {
        let job = settlement.job
        let metadata: Logger.Metadata = ["uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)"]
        let (store, cancelled, events, logger) = (store, cancelled, events, logger)
        // The resume state as the transfer left it (it may have created the remote upload).
        let left = (try? await BlockingWork.run { try store.job(job.id) }) ?? nil
        await uploaders[job.destination]?.discard(left ?? job)
        try await BlockingWork.run {
            do {
                _ = try cancelled.remove(job.id, from: store)
                events.emit(.cancelled(job.id))
                if let group = store.uploadedGroup(of: job) { events.emit(.groupUploaded(group)) }
                logger.info("upload cancelled", metadata: metadata)
            } catch {
                // Its file could not be kept: the job stays, flagged, and a later pass tries again.
                try store.finish(job.id, attempt: settlement.attempt, event: .interrupt, outcome: "interrupted",
                                 error: "cancel requested; waiting to keep the file: \(error)") {
                    $0.cancelRequested = true
                }
                logger.error("cannot cancel yet: \(error)", metadata: metadata)
            }
        }
    }
}
