import Foundation
import GRDB

/// Every read and write of the queue: each state change is one write transaction that runs the state machine.
///
/// Shared by the daemon, the CLI (short reads and small command writes) and library hosts; safe across
/// processes through SQLite's WAL and busy timeout.
package struct QueueStore: Sendable {
    let database: QueueDatabase
    /// The database, reached by every query: the debug build checks that no cooperative thread blocks on it.
    var writer: any DatabaseWriter {
        BlockingCheck.check("a query of the queue's database")
        return database.writer
    }

    package init(database: QueueDatabase) {
        self.database = database
    }

    /// Records that a `move` job's file now lives under `blobs/`, with the identity of the file there.
    func markIntakeComplete(_ id: JobID, inode: Int64, device: Int64, modifiedNanoseconds: Int64) throws {
        try writer.write { db in
            try db.execute(sql: """
                UPDATE job SET intake_complete = 1, inode = ?, device = ?, mtime_ns = ?, updated_at = ? WHERE id = ?
                """, arguments: [inode, device, modifiedNanoseconds, Date(), id.rawValue])
        }
    }

    /// The jobs in `state` not uploaded yet, read through `job_unfinished` (never a walk of the history).
    static func unfinishedJobs(in state: JobState) -> QueryInterfaceRequest<Job> {
        precondition(state != .uploaded, "uploaded jobs are not in job_unfinished")
        return Job.filter(Job.Columns.state == state.rawValue).filter(sql: QueueDatabase.unfinishedCondition)
    }

    /// `move` jobs whose rename into `blobs/` was cut short by a crash.
    func incompleteIntakes() throws -> [Job] {
        try writer.read { db in try Job.fetchAll(db, sql: "SELECT * FROM job WHERE intake_complete = 0") }
    }

    /// One job, or nil; a pending one says why it waits (derived from the holds in force; with `holdsInForce`
    /// false, when no runner is up, the holds a killed one left are not read).
    package func job(_ id: JobID, holdsInForce: Bool = true) throws -> Job? {
        try writer.read { db in
            let holds = holdsInForce ? try Self.displayHolds(db) : QueueHolds()
            return try Job.fetchOne(db, key: id.rawValue).map(holds.explained)
        }
    }

    /// Jobs newest first, optionally of one state; pending ones say why they wait (see `job(_:holdsInForce:)`).
    /// A row this version cannot read is an error (`listing` leaves it out instead).
    package func jobs(state: JobState? = nil, limit: Int? = nil, holdsInForce: Bool = true) throws -> [Job] {
        let listing = try listing(state: state, limit: limit, holdsInForce: holdsInForce)
        if let unreadable = listing.unreadable.first {
            throw DatabaseError(resultCode: .SQLITE_MISMATCH, message: unreadable.reason)
        }
        return listing.jobs
    }

    /// Jobs newest first, optionally of one state, and apart, the rows among them this version cannot read: one
    /// damaged or newer row does not take the whole list down with it.
    package func listing(state: JobState? = nil, limit: Int? = nil, holdsInForce: Bool = true) throws -> JobListing {
        try listing(state: state, limit: limit, owner: nil, holdsInForce: holdsInForce)
    }

    /// `listing(state:limit:holdsInForce:)` of one owner's jobs alone (`owner`: a uid; nil: everyone's), older than
    /// `before` when given; at most `byteBudget` bytes of what the jobs hold (their metadata, patch, names and error,
    /// about what their JSON takes), so a page is built in bounded memory whatever its jobs carry. A page cut short by
    /// `limit` or the budget says where the next one begins (`next`).
    func listing(state: JobState?, limit: Int?, owner: UInt32?, holdsInForce: Bool, before: JobID? = nil,
                 byteBudget: Int? = nil) throws -> JobListing {
        try writer.read { db in
            let holds = holdsInForce ? try Self.displayHolds(db) : QueueHolds()
            var sql = "SELECT * FROM job"
            var conditions: [String] = []
            var arguments: StatementArguments = []
            if state == .uploaded {
                // The history, newest first: a walk of the jobs by id (the uploaded ones are most of them).
                conditions.append("+state = 'uploaded'")
            } else if let state {
                conditions.append("state = ? AND \(QueueDatabase.unfinishedCondition)")
                _ = arguments.append(contentsOf: [state.rawValue])
            }
            if let owner {
                conditions.append("owner_uid = ?")
                _ = arguments.append(contentsOf: [Int64(owner)])
            }
            if let before {
                conditions.append("id < ?")
                _ = arguments.append(contentsOf: [before.rawValue])
            }
            if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
            sql += " ORDER BY id DESC"
            if let limit {
                // One more than the page, to tell whether another follows.
                sql += " LIMIT ?"
                _ = arguments.append(contentsOf: [limit + 1])
            }
            var listing = JobListing()
            var bytes = 0
            var last: JobID?
            let rows = try Row.fetchCursor(db, sql: sql, arguments: arguments)
            while let row = try rows.next() {
                let id = JobID(trusted: row["id"] as String? ?? "?")
                let size = Self.listedBytes(row)
                let full = limit.map { listing.jobs.count + listing.unreadable.count == $0 } ?? false
                if full || byteBudget.map({ bytes + size > $0 && bytes > 0 }) == true {
                    // The next page goes on after the last row listed, read or not.
                    listing.next = last
                    break
                }
                last = id
                bytes += size
                do {
                    listing.jobs.append(holds.explained(try Job(row: row)))
                } catch {
                    guard let reason = Self.unreadableRow(error) else { throw error }
                    listing.unreadable.append(.init(id: id, reason: reason))
                }
            }
            return listing
        }
    }

    /// About what a job's row takes as JSON: its texts that callers choose or servers answer, and the rest.
    static func listedBytes(_ row: Row) -> Int {
        var bytes = 700
        for column in ["meta", "patch", "file", "source_path", "original_name", "last_error", "remote_url", "resume_state"] {
            if let text = row[column] as String? { bytes += text.utf8.count }
        }
        return bytes
    }

    /// The jobs of `ids` that exist, by id, read in one transaction; pending ones say why they wait (see
    /// `job(_:holdsInForce:)`).
    package func jobs(_ ids: some Collection<JobID>, holdsInForce: Bool = true) throws -> [JobID: Job] {
        try writer.read { db in
            let holds = holdsInForce ? try Self.displayHolds(db) : QueueHolds()
            var found: [JobID: Job] = [:]
            for id in ids {
                if let job = try Job.read(id, in: db) { found[id] = holds.explained(job) }
            }
            return found
        }
    }

    /// A job's attempts, first to last.
    package func attempts(of id: JobID) throws -> [JobAttempt] {
        try writer.read { db in
            try JobAttempt.filter(JobAttempt.Columns.jobID == id.rawValue).order(JobAttempt.Columns.number).fetchAll(db)
        }
    }

    /// Applies a state-machine event to one job in its own transaction and returns the job after it.
    @discardableResult
    func apply(_ event: JobLifecycle.Event, to id: JobID, now: Date = Date(),
               change: (inout Job) -> Void = { _ in }) throws -> Job? {
        try writer.write { db in try Self.apply(event, to: id, in: db, now: now, change: change) }
    }

    /// `settlesOrder`: whether the jobs that wait for this one learn of the change (`settleOrder`); the order's own
    /// changes to waiting jobs pass false, and settle those in its worklist.
    static func apply(_ event: JobLifecycle.Event, to id: JobID, in db: Database, now: Date, settlesOrder: Bool = true,
                      change: (inout Job) -> Void = { _ in }) throws -> Job? {
        // Cached statements on the paths every job takes: parsing SQL cost more than running it.
        guard var job = try Job.read(id, in: db) else {
            throw UploadQueueError(.jobNotFound, "no job with id \(id); `uploadq list` shows the queue", job: id)
        }
        var lifecycle = job.lifecycle
        let effect: JobLifecycle.Effect
        do {
            effect = try lifecycle.apply(event)
        } catch {
            throw UploadQueueError(.invalidTransition, error.description, job: id)
        }
        if effect == .remove {
            // Its lane waits for what it waited for; the jobs after it learn it was cancelled; a job enqueued after it
            // later learns so from its tombstone.
            let laneParents = try Self.lanePrerequisites(of: id, in: db)
            try job.delete(db)
            try Self.recordTombstone(id.rawValue, owner: job.ownerUID, outcome: "cancelled", in: db, now: now)
            if job.group != nil {
                try Self.settleGroup(job, .left(failedForGood: job.state == .failed && job.permanent), in: db, now: now)
            }
            if settlesOrder { try Self.settleOrder(job, .cancelled, laneParents: laneParents, in: db, now: now) }
            if job.lane != nil { try Self.settleLane(job, left: true, in: db, now: now) }
            return nil
        }
        let before = job
        job.lifecycle = lifecycle
        change(&job)
        job.updatedAt = now
        assert(before.withChangeableColumns(of: job) == job, "a change touched a column `apply` does not write")
        try Self.update(job, from: before, in: db)
        let change = OrderRule.change(from: before, to: job)
        // Its group first: the order's worklist may change this very job again (a revived job whose own
        // prerequisite still failed fails anew), and that change settles the group in its turn.
        if job.group != nil, let change {
            switch change {
            case .uploaded: try Self.settleGroup(job, .uploaded, in: db, now: now)
            case .failedForGood: try Self.settleGroup(job, .failedForGood, in: db, now: now)
            case .revived: try Self.settleGroup(job, .revived, in: db, now: now)
            case .cancelled, .skipped: break
            }
        }
        if settlesOrder, let change {
            try Self.settleOrder(job, change, in: db, now: now)
        }
        if job.lane != nil, job.state != before.state || job.permanent != before.permanent {
            try Self.settleLane(job, in: db, now: now)
        }
        return job
    }

    /// Writes the columns a state change altered (`withChangeableColumns`), and only those: encoding the whole
    /// row (its metadata and patch as JSON) cost more than the rest of the transaction, and SQLite rewrites the
    /// entry of every index over a column the statement sets, changed or not. A few shapes recur (a claim, a
    /// success, a failure), each a cached statement.
    private static func update(_ job: Job, from before: Job, in db: Database) throws {
        var columns: [Job.Columns] = []
        var values: [(any DatabaseValueConvertible)?] = []
        func write<Value: DatabaseValueConvertible & Equatable>(_ column: Job.Columns, _ value: Value, _ old: Value) {
            if value != old {
                columns.append(column)
                values.append(value)
            }
        }
        write(.state, job.state.rawValue, before.state.rawValue)
        write(.waitingReason, job.waitingReason?.rawValue, before.waitingReason?.rawValue)
        write(.permanent, job.permanent, before.permanent)
        write(.attempts, job.attempts, before.attempts)
        write(.failures, job.failures, before.failures)
        write(.nextAttemptAt, job.nextAttemptAt.map(StoredDate.init), before.nextAttemptAt.map(StoredDate.init))
        write(.lastError, job.lastError, before.lastError)
        write(.rateBytesPerSecond, job.rateBytesPerSecond, before.rateBytesPerSecond)
        write(.remoteURL, job.remoteURL, before.remoteURL)
        write(.sha256, job.sha256, before.sha256)
        write(.bytesConfirmed, job.bytesConfirmed, before.bytesConfirmed)
        write(.cancelRequested, job.cancelRequested, before.cancelRequested)
        write(.intakeComplete, job.intakeComplete, before.intakeComplete)
        write(.patchState, job.patchState.rawValue, before.patchState.rawValue)
        columns.append(.updatedAt)
        values.append(StoredDate(job.updatedAt))
        let assignments = columns.map { "\($0.rawValue) = ?" }.joined(separator: ", ")
        try db.cachedStatement(sql: "UPDATE job SET \(assignments) WHERE id = ?")
            .execute(arguments: StatementArguments(values + [job.id.rawValue]))
    }

    /// Records the SHA-256 of a job that had none (taken before its upload, which needed it first); a digest
    /// already there is left as it is.
    func recordDigest(_ id: JobID, sha256: String) throws {
        try writer.write { db in try Self.recordDigest(id, sha256: sha256, in: db) }
    }

    /// `recordDigest` in a transaction the caller holds (an intake that compared the job with its own).
    static func recordDigest(_ id: JobID, sha256: String, in db: Database) throws {
        try db.cachedStatement(sql: "UPDATE job SET sha256 = ? WHERE id = ? AND sha256 = ''")
            .execute(arguments: [sha256, id.rawValue])
    }

    /// Records that the start offset of the running attempt was corrected by the uploader (after it looked at
    /// what the destination really holds).
    func recordResumeOffset(_ id: JobID, attempt: Int, offset: Int64) throws {
        try writer.write { db in
            try db.execute(sql: "UPDATE job_attempt SET start_offset = ? WHERE job_id = ? AND number = ?",
                           arguments: [offset, id.rawValue, attempt])
            try db.execute(sql: "UPDATE job SET bytes_confirmed = ?, updated_at = ? WHERE id = ?",
                           arguments: [offset, Date(), id.rawValue])
        }
    }

    /// Persists confirmed progress and the uploader's resume record.
    func recordProgress(_ id: JobID, bytesConfirmed: Int64, resumeState: String?, rate: Int64) throws {
        try writer.write { db in
            try db.cachedStatement(sql: """
                UPDATE job SET bytes_confirmed = ?, resume_state = COALESCE(?, resume_state), rate_bytes_per_s = ?,
                updated_at = ? WHERE id = ?
                """).execute(arguments: [bytesConfirmed, resumeState, rate, Date(), id.rawValue])
        }
    }

    /// Forgets an uploader's resume record (the remote upload is gone or abandoned): nothing is confirmed any more.
    func clearResumeState(_ id: JobID) throws {
        try writer.write { db in
            try db.execute(sql: "UPDATE job SET resume_state = NULL, bytes_confirmed = 0, updated_at = ? WHERE id = ?",
                           arguments: [Date(), id.rawValue])
        }
    }

    /// Makes the retryable failures of `destinations` due now: their network came back, so waiting out a
    /// backoff computed while it was down helps no one.
    func retryFailedNow(destinations: Set<String>, now: Date = Date()) throws {
        guard !destinations.isEmpty else { return }
        try writer.write { db in
            _ = try Self.unfinishedJobs(in: .failed).filter(Job.Columns.permanent == false)
                .filter(destinations.contains(Job.Columns.destination))
                .updateAll(db, Job.Columns.nextAttemptAt.set(to: now), Job.Columns.updatedAt.set(to: now))
        }
    }

    /// Adds bytes sent per destination and link class (what `status` shows as traffic).
    func addTraffic(_ entries: [(destination: String, linkClass: String, bytes: Int64)],
                    budgetLedger: BudgetLedger? = nil) throws {
        guard !entries.isEmpty else { return }
        try writer.write { db in
            // The metered budget's ledger goes with the bytes it counted: both or neither.
            if let budgetLedger { try QueueStore.recordBudgetLedger(budgetLedger, in: db) }
            for entry in entries where entry.bytes > 0 {
                try db.execute(sql: """
                    INSERT INTO traffic (destination, link_class, bytes) VALUES (?, ?, ?)
                    ON CONFLICT(destination, link_class) DO UPDATE SET bytes = bytes + excluded.bytes
                    """, arguments: [entry.destination, entry.linkClass, entry.bytes])
            }
        }
    }

    /// Bytes sent so far: destination → link class → bytes.
    package func traffic() throws -> [String: [String: Int64]] {
        try writer.read { db in
            var result: [String: [String: Int64]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT destination, link_class, bytes FROM traffic") {
                result[row["destination"], default: [:]][row["link_class"]] = row["bytes"]
            }
            return result
        }
    }

    /// Ends an attempt and applies its verdict to the job, in one transaction; a success also records the
    /// `release` owed for the queue's copy of the file.
    @discardableResult
    func finish(_ id: JobID, attempt: Int, event: JobLifecycle.Event, outcome: String, error: String?,
                now: Date = Date(), release: FileRelease? = nil, change: (inout Job) -> Void = { _ in }) throws -> Job? {
        try writer.write { db in
            try Self.finish(id, attempt: attempt, event: event, outcome: outcome, error: error, now: now, release: release,
                            in: db, change: change)
        }
    }

    /// `finish` inside a transaction the caller holds (the group commit of several transfer ends).
    @discardableResult
    static func finish(_ id: JobID, attempt: Int, event: JobLifecycle.Event, outcome: String, error: String?,
                       now: Date, release: FileRelease? = nil, in db: Database,
                       change: (inout Job) -> Void = { _ in }) throws -> Job? {
        let job = try Self.apply(event, to: id, in: db, now: now) { job in
            job.rateBytesPerSecond = 0
            change(&job)
            if case .succeed = event, job.patch != nil { job.patchState = .pending }
        }
        // An upload ends at the file's size (its last confirmation is written here, not before); any other end
        // at what the destination confirmed. A job the event removed took its attempts with it.
        if let job {
            let endOffset = if case .succeed = event { job.size } else { job.bytesConfirmed }
            try db.cachedStatement(sql: """
                UPDATE job_attempt SET ended_at = ?, end_offset = ?, outcome = ?, error = ?
                WHERE job_id = ? AND number = ?
                """).execute(arguments: [StoredDate(now), endOffset, outcome, error, id.rawValue, attempt])
        }
        // The patch is owed from the moment the job is uploaded: same transaction, so a crash cannot lose it.
        if case .succeed = event, let job, job.patch != nil { try owePatch(id, now: now, in: db) }
        // So is the release of the queue's copy: a crash after this commit cannot leak the file.
        if case .succeed = event, let release { try release.insert(db, onConflict: .replace) }
        return job
    }

    /// Puts the `uploading` jobs of a dead process back to `pending`, keeping their resume state.
    @discardableResult
    func recoverInterrupted(now: Date = Date()) throws -> [JobID] {
        try writer.write { db in
            let stale = try Self.unfinishedJobs(in: .uploading).fetchAll(db)
            for job in stale {
                try db.execute(sql: """
                    UPDATE job_attempt SET ended_at = ?, end_offset = ?, outcome = 'interrupted',
                    error = 'the daemon stopped during the transfer' WHERE job_id = ? AND number = ? AND ended_at IS NULL
                    """, arguments: [now, job.bytesConfirmed, job.id.rawValue, job.attempts])
                _ = try Self.apply(.interrupt, to: job.id, in: db, now: now) { $0.rateBytesPerSecond = 0 }
            }
            return stale.map(\.id)
        }
    }

    /// Makes failed jobs pending now (`uploadq retry`); returns the ids that changed.
    package func retry(_ ids: [JobID]) throws -> [JobID] {
        try writer.write { db in
            var changed: [JobID] = []
            for id in ids {
                // An uploaded job has nothing to retry here (its patch may: see `retryPatch`).
                if try Job.fetchOne(db, key: id.rawValue)?.state == .uploaded { continue }
                _ = try Self.apply(.retryNow, to: id, in: db, now: Date())
                changed.append(id)
            }
            return changed
        }
    }

    /// Makes every failed job pending now (`uploadq retry --failed`).
    package func retryAllFailed() throws -> [JobID] {
        try writer.write { db in
            let failed = try Self.unfinishedJobs(in: .failed).fetchAll(db)
            for job in failed {
                _ = try Self.apply(.retryNow, to: job.id, in: db, now: Date())
            }
            return failed.map(\.id)
        }
    }

    /// Records a cancel request: while a runner is up, a job it is transferring, or one that left a remote upload
    /// to drop, is flagged for it (`requested`); any other job may leave at once (`removed`: the caller keeps its
    /// file, then removes the row with `CancelledFiles.remove`). Returns the verdict and the job.
    func requestCancel(_ id: JobID, workerRunning: Bool) throws -> (CancelOutcome, Job) {
        try writer.write { db in
            guard let job = try Job.fetchOne(db, key: id.rawValue) else {
                throw UploadQueueError(.jobNotFound, "no job with id \(id); `uploadq list` shows the queue", job: id)
            }
            var lifecycle = job.lifecycle
            do throws(JobTransitionError) { _ = try lifecycle.apply(.cancel) } catch {
                throw UploadQueueError(.invalidTransition, error.description, job: id)
            }
            // Flagged in any case: no runner claims it from now on, and one that finds it flagged finishes the
            // cancel should this caller stop half-way.
            try db.execute(sql: "UPDATE job SET cancel_requested = 1, updated_at = ? WHERE id = ?",
                           arguments: [Date(), id.rawValue])
            if workerRunning && (job.state == .uploading || job.resumeState != nil) {
                return (.requested, job)
            }
            return (.removed, job)
        }
    }

    /// Removes a job whose worker stopped after a cancel request; returns it as it was.
    func removeCancelled(_ id: JobID) throws -> Job? {
        try writer.write { db in
            guard let job = try Job.fetchOne(db, key: id.rawValue) else { return nil }
            _ = try Self.apply(.cancel, to: id, in: db, now: Date())
            return job
        }
    }

    /// True when no job is pending or uploading (failed jobs may remain). A job still being taken in by another
    /// process, or waiting for its cancel to finish, is not work this runner can do, so it does not count: a batch
    /// run never waits for ever on a row it cannot move. Nor does a job that waits for another (its lane held by a
    /// job failed for good, a prerequisite still failing).
    func isIdle() throws -> Bool {
        try writer.read { db in
            let busy = try Bool.fetchOne(db.cachedStatement(sql: """
                SELECT EXISTS (SELECT 1 FROM job WHERE state IN ('pending', 'uploading')
                AND \(QueueDatabase.unfinishedCondition) AND intake_complete = 1 AND cancel_requested = 0
                AND blocked_by IS NULL)
                """))
            return busy == false
        }
    }

    /// The earliest time a waiting job becomes runnable, if any job waits on time: the first due retry, read from
    /// the `job_retry` index (only retryable failures have a time; a permanent one has none).
    static func nextDueDate(_ db: Database) throws -> Date? {
        try Date.fetchOne(db.cachedStatement(sql: """
            SELECT MIN(next_attempt_at) FROM job INDEXED BY job_retry WHERE state = 'failed'
            """))
    }

    /// Moves the stored due times (retries, patch deliveries and hook runs, owed releases) written between `from` and
    /// `through` by `step` seconds, with the time they were written, in one transaction: what keeps the waits
    /// they stand for as long as they were when the wall clock steps. Rows written at other times (before this
    /// process, under another clock) stay as they are.
    func rebaseDueTimes(by step: TimeInterval, writtenFrom from: Date, through: Date) throws {
        let modifier = String(format: "%+.3f seconds", step)
        let tables = [("job", "next_attempt_at", "updated_at"), ("outbox", "next_attempt_at", "updated_at"),
                      ("file_release", "due_at", "created_at")]
        try writer.write { db in
            for (table, due, written) in tables {
                try db.execute(sql: """
                    UPDATE \(table) SET \(due) = strftime('%Y-%m-%d %H:%M:%f', \(due), ?),
                    \(written) = strftime('%Y-%m-%d %H:%M:%f', \(written), ?)
                    WHERE \(due) IS NOT NULL AND \(written) BETWEEN ? AND ?
                    """, arguments: [modifier, modifier, from, through])
            }
        }
    }

    /// Reads a persistent setting (for example the link override).
    func setting(_ key: String) throws -> String? {
        try writer.read { db in try String.fetchOne(db, sql: "SELECT value FROM setting WHERE key = ?", arguments: [key]) }
    }

    /// Writes or clears a persistent setting.
    func setSetting(_ key: String, _ value: String?) throws {
        try writer.write { db in
            if let value {
                try db.execute(sql: "INSERT INTO setting (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                               arguments: [key, value])
            } else {
                try db.execute(sql: "DELETE FROM setting WHERE key = ?", arguments: [key])
            }
        }
    }
}

