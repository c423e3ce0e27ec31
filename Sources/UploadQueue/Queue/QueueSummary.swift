import Foundation
import GRDB

extension QueueStatus {
    /// Counts and bytes per state, the active transfers and the next retry: the data behind `uploadq status`.
    public struct Summary: Sendable, Equatable {
        /// A transfer in progress.
        public struct ActiveTransfer: Sendable, Equatable {
            public var id: JobID
            public var file: String
            public var originalName: String
            public var destination: String
            public var bytesConfirmed: Int64
            public var size: Int64
            public var rateBytesPerSecond: Int64
        }

        public var counts: [JobState: Int]
        public var bytes: [JobState: Int64]
        /// Pending jobs per waiting reason (jobs without a reason are not listed).
        public var waiting: [Job.WaitingReason: Int]
        /// Failed jobs that need a person.
        public var permanentFailures: Int
        public var active: [ActiveTransfer]
        public var nextAttemptAt: Date?
        public var patches: [Job.PatchState: Int]
        /// Attempts that ended in a failure (each one a retry or a permanent failure), since the queue was created.
        public var failedAttempts: Int = 0
        /// Destinations whose jobs wait because their circuit is open.
        public var openCircuits: Set<String> = []
        /// Destinations whose storage said it is full (HTTP 507); their jobs wait as `quota-full`.
        public var fullDestinations: Set<String> = []
        /// Destinations whose answers proved nothing (a captive portal, a proxy), with what answered; their jobs wait
        /// as `unverified-answer`.
        public var unverifiedAnswers: [String: String] = [:]
        /// Uploaded copies whose release (delete or archive, by `[retention]`) is still owed.
        public var owedReleases: Int = 0
        /// The last error of an owed release that failed, if any (a full archive disk, a file in the way).
        public var releaseError: String?
    }
}

extension QueueStore {
    /// The summary, read in one short read transaction. Counts come from `job_tally` (kept by triggers) and the
    /// holds, so the history kept costs nothing; a metered hold counts the jobs it keeps back, and the owed
    /// releases are counted. The tally counts `uploading` jobs as `pending` (a claim writes no tally row): those
    /// few are read as rows and told apart here. `holdsInForce: false` (no runner): the holds a killed runner left
    /// are not shown.
    public func summary(holdsInForce: Bool = true) throws -> QueueStatus.Summary {
        try writer.read { db in
            var counts = Dictionary(uniqueKeysWithValues: JobState.allCases.map { ($0, 0) })
            var bytes = Dictionary(uniqueKeysWithValues: JobState.allCases.map { ($0, Int64(0)) })
            var permanent = 0
            var patches = Dictionary(uniqueKeysWithValues: PatchState.allCases.map { ($0, 0) })
            var pendingByDestination: [String: Int] = [:]
            for row in try Row.fetchAll(db, sql: """
                SELECT state, destination, permanent, patch_state, jobs, bytes FROM job_tally WHERE jobs != 0
                """) {
                guard let state = JobState(rawValue: row["state"]) else { continue }
                let jobs: Int = row["jobs"]
                counts[state, default: 0] += jobs
                bytes[state, default: 0] += row["bytes"] as Int64
                if state == .failed, row["permanent"] as Bool { permanent += jobs }
                if let patch = PatchState(rawValue: row["patch_state"]), patch != .none { patches[patch, default: 0] += jobs }
                if state == .pending { pendingByDestination[row["destination"], default: 0] += jobs }
            }
            let holds = holdsInForce ? try Self.displayHolds(db) : QueueHolds()
            let uploading = try Self.unfinishedJobs(in: .uploading).order(Job.Columns.id).fetchAll(db)
            for job in uploading { pendingByDestination[job.destination, default: 0] -= 1 }
            var waiting = try Self.waitingCounts(db, holds: holds, pending: pendingByDestination)
            for job in uploading {
                if job.waitingReason == .concurrency {
                    // Claimed for the runner's next free slot, not transferring yet: pending, waiting for a slot,
                    // until it starts.
                    waiting[.concurrency, default: 0] += 1
                } else {
                    counts[.pending, default: 0] -= 1
                    counts[.uploading, default: 0] += 1
                    bytes[.pending, default: 0] -= job.size
                    bytes[.uploading, default: 0] += job.size
                }
            }
            let active = uploading.filter { $0.waitingReason == nil }
                .map {
                    QueueSummary.ActiveTransfer(id: $0.id, file: $0.file, originalName: $0.originalName,
                                                destination: $0.destination, bytesConfirmed: $0.bytesConfirmed,
                                                size: $0.size, rateBytesPerSecond: $0.rateBytesPerSecond)
                }
            var summary = QueueSummary(counts: counts, bytes: bytes, waiting: waiting, permanentFailures: permanent,
                                       active: active, nextAttemptAt: try Self.nextDueDate(db), patches: patches)
            summary.failedAttempts = try Int.fetchOne(db, sql: """
                SELECT value FROM queue_counter WHERE name = 'failed_attempts'
                """) ?? 0
            summary.openCircuits = holds.openCircuits
            summary.fullDestinations = holds.quotaFull
            summary.unverifiedAnswers = holds.unverifiedAnswers
            summary.owedReleases = try FileRelease.fetchCount(db)
            summary.releaseError = try String.fetchOne(db, sql: """
                SELECT last_error FROM file_release WHERE last_error IS NOT NULL ORDER BY due_at LIMIT 1
                """)
            return summary
        }
    }

    /// Pending jobs per waiting reason, by the precedence of `QueueHolds.holds(for:)` (each job under its strongest
    /// reason), from the pending count of each destination: only the holds that keep back some jobs and not others
    /// (a metered link, a spent budget, a window with an urgent priority) count rows, from the claim indexes.
    private static func waitingCounts(_ db: Database, holds: QueueHolds,
                                      pending: [String: Int]) throws -> [WaitingReason: Int] {
        var waiting: [WaitingReason: Int] = [:]
        let slotsFull = holds.hold(.concurrency, on: QueueHolds.wholeQueue) != nil
        let byPolicy = QueueDatabase.ClaimIndex.byDestinationPolicy
        for (destination, count) in pending where count > 0 {
            if let shut = [WaitingReason.offline, .portal, .power].first(where: { holds.hold($0, on: destination) != nil }) {
                waiting[shut, default: 0] += count
                continue
            }
            var left = count
            if let metered = holds.hold(.meteredLink, on: destination) {
                let own = QueueDatabase.ClaimIndex.meteredDeferred
                let held = try Int.fetchOne(db, sql: """
                    SELECT (SELECT COUNT(*) FROM job INDEXED BY \(own.rawValue) WHERE \(own.condition) AND destination = ?)
                    + (SELECT COUNT(*) FROM job INDEXED BY \(byPolicy.rawValue) WHERE \(byPolicy.condition)
                       AND destination = ? AND size >= ?)
                    """, arguments: [destination, destination, metered.meteredBelow ?? 0]) ?? 0
                waiting[.meteredLink, default: 0] += held
                left -= held
                if left > 0, let spent = holds.hold(.budgetSpent, on: destination) {
                    // Those the metered link lets go, larger than what is left (all, once it is spent), that do
                    // not ignore the budget (`always`, their own, or the destination's for jobs without one).
                    let spentHeld = try Int.fetchOne(db, sql: """
                        SELECT COUNT(*) FROM job WHERE \(QueueDatabase.runnableCondition) AND destination = ?
                        AND size < COALESCE(metered_below, ?) AND size > ?
                        AND NOT COALESCE(on_metered = 'always', ?)
                        """, arguments: [destination, metered.meteredBelow ?? 0, spent.sizeAbove ?? -1,
                                         spent.ignoresBudget]) ?? 0
                    waiting[.budgetSpent, default: 0] += spentHeld
                    left -= spentHeld
                }
            }
            guard left > 0 else { continue }
            if let window = holds.hold(.outsideWindow, on: destination) {
                var urgent = 0
                if let minimum = window.minimumPriority {
                    urgent = try Int.fetchOne(db, sql: """
                        SELECT COUNT(*) FROM job WHERE \(QueueDatabase.runnableCondition) AND destination = ? AND priority >= ?
                        """, arguments: [destination, minimum]) ?? 0
                }
                let held = max(0, left - urgent)
                waiting[.outsideWindow, default: 0] += held
                left -= held
            }
            guard left > 0 else { continue }
            if holds.hold(.circuitOpen, on: destination) != nil {
                waiting[.circuitOpen, default: 0] += left
            } else if holds.hold(.quotaFull, on: destination) != nil {
                waiting[.quotaFull, default: 0] += left
            } else if slotsFull {
                waiting[.concurrency, default: 0] += left
            }
        }
        // Of those waiting for a slot, the ones other owners' turns come before.
        let waitingForTurns = min(FairShare.waitingForTurns(among: holds.turns), waiting[.concurrency, default: 0])
        waiting[.concurrency, default: 0] -= waitingForTurns
        waiting[.fairShare, default: 0] += waitingForTurns
        return waiting.filter { $0.value > 0 }
    }
}
