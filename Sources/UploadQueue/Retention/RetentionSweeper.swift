import Foundation
import Logging

/// Carries out owed releases as they come due and prunes old history once an hour, while the queue runs.
///
/// It has no loop of its own: the owed-work loop (`OwedWork`), woken when a job is uploaded, calls it on each
/// pass, so the queue's copy goes within moments of the confirmation. A release that cannot be done now (a full
/// archive disk, a file in the way) stays owed and is tried again on the `[retry]` schedule; nothing is forgotten
/// before the file system has made the change durable.
actor RetentionSweeper {
    /// Runs on a thread of its own (`ActorThread`): the SQLite it calls blocks that thread, never the shared pool.
    private let thread = ActorThread(name: "uploadq-retention")
    nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    private let configuration: Configuration
    private let store: QueueStore
    private let logger: Logger
    private let pruner: HistoryPruner
    private let releaser = FileReleaser()
    /// How often history is pruned (on the monotonic clock: a clock step neither skips nor repeats a prune).
    static let pruneInterval: Duration = .seconds(3600)
    /// Releases carried out per pass (one sync of their directories each).
    static let batch = 256

    init(configuration: Configuration, store: QueueStore, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.logger = logger
        pruner = HistoryPruner(store: store, cancelled: CancelledFiles(directory: configuration.cancelledDirectory),
                               databasePath: configuration.databasePath)
    }

    /// Whether the releases an upgrade left to the configured policy were resolved (once per process: only
    /// migration v5 writes them).
    private var policyResolved = false

    /// What one batch of releases came to.
    struct Batch: Sendable, Equatable {
        /// How many releases were looked at (`batch`: there may be more due now).
        var looked: Int
        /// The queue could not be read or written: look again after a while, not at once.
        var storeFailed: Bool
    }

    /// Carries out one batch of the releases due now.
    @discardableResult
    func releaseDue(now: Date = Date()) async -> Batch {
        let due: [FileRelease]
        do {
            if !policyResolved {
                try store.resolvePolicyReleases(configuration.retention)
                policyResolved = true
            }
            due = try store.dueReleases(now: now, limit: Self.batch)
        } catch {
            logger.error("retention: cannot read the releases owed: \(error)")
            return Batch(looked: 0, storeFailed: true)
        }
        guard !due.isEmpty else { return Batch(looked: 0, storeFailed: false) }
        // A reference file another job still has to upload stays until that job is done.
        var blocked: [JobID: String] = [:]
        for release in due where release.action.actsOnSource {
            do {
                if let other = try store.otherJobReading(release.path, except: release.jobID) {
                    blocked[release.jobID] = "job \(other) still has to upload this file; it stays until then"
                }
            } catch {
                blocked[release.jobID] = "cannot tell whether another job still reads this file (\(error)); it stays"
            }
        }
        let releaser = self.releaser
        let ready = due.filter { blocked[$0.jobID] == nil }
        for release in ready { HopTrace.record(release.jobID, "release due") }
        var outcomes = await BlockingWork.runResult { () throws(Never) in
            let outcomes = releaser.perform(ready)
            for release in ready where outcomes[release.jobID] == .done { HopTrace.record(release.jobID, "released") }
            return outcomes
        }.get()
        for (id, reason) in blocked { outcomes[id] = .failed(reason) }
        var done: [JobID] = []
        var storeFailed = false
        for release in due {
            switch outcomes[release.jobID] {
            case .done?:
                done.append(release.jobID)
            case .left(let reason)?:
                done.append(release.jobID)
                logger.notice("retention: \(reason)", metadata: ["uploadq.job": "\(release.jobID)"])
            case .failed(let reason)?:
                let delay = configuration.retry.delay(afterFailure: release.attempts + 1, random: Double.random(in: 0...1))
                let what = release.action.actsOnSource ? "the uploaded file" : "the uploaded copy"
                logger.warning("""
                    retention: cannot \(release.action.rawValue) \(what) yet (\(reason)); trying again in \
                    \(delay)
                    """, metadata: ["uploadq.job": "\(release.jobID)"])
                if (try? store.postponeRelease(release.jobID, error: reason, until: now.addingTimeInterval(delay.seconds))) == nil {
                    storeFailed = true
                }
            case nil:
                break
            }
        }
        do {
            try store.completeReleases(done)
        } catch {
            // Done on disk but still recorded: a later pass finds the files gone and forgets them then.
            logger.error("retention: cannot record \(done.count) release(s): \(error)")
            storeFailed = true
        }
        return Batch(looked: due.count, storeFailed: storeFailed)
    }

    /// Carries out every release due now (what a batch run does before it exits).
    func releaseAllDue() async {
        while true {
            let batch = await releaseDue()
            if batch.storeFailed || batch.looked < Self.batch { return }
        }
    }

    /// Whether history is pruned at all (`[retention] history`).
    nonisolated var prunes: Bool { configuration.retention.history != nil }

    /// Prunes history older than `[retention] history` (the owed-work loop calls it once per `pruneInterval`).
    func prune() async {
        guard let history = configuration.retention.history else { return }
        do {
            let report = try await pruner.prune(before: Date().addingTimeInterval(-history.seconds), dryRun: false)
            if report.jobs + report.cancelledFiles > 0 {
                logger.notice("""
                    retention: pruned \(report.jobs) uploaded job(s) and \(report.cancelledFiles) cancelled file(s) \
                    older than \(history); database \(report.databaseBytesBefore) → \(report.databaseBytesAfter) bytes
                    """)
            }
        } catch {
            logger.error("retention: pruning history failed; tried again in an hour: \(error)")
        }
    }
}
