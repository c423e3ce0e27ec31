import Foundation
import GRDB

extension QueueStore {
    /// Claims up to `limit` runnable jobs the gate lets through, in one write transaction (retryable failures whose
    /// time has come first become pending): highest priority first, then the earliest turn (`FairShare`: owners
    /// take turns), then oldest, across destinations. Each claim moves its priority's fair clock on. Each claim
    /// opens an attempt. Each pick is one indexed query (`claimQuery`): its cost does not grow with the queue.
    ///
    /// A nil gate lets any destination through (tests, and hosts without a scheduler view).
    func claim(limit: Int = 1, gate: ClaimGate? = nil, now: Date = Date()) throws -> [(Job, JobAttempt)] {
        guard limit > 0 else { return [] }
        return try writer.write { db in try Self.claim(limit: limit, gate: gate, now: now, in: db) }
    }

    /// `claim` in a transaction the caller holds (the scheduler's round, with the transfer ends it records).
    ///
    /// `aheadUpTo`: the jobs are claimed for the runner's next free slots (`JobLifecycle.Event.claimAhead`), as
    /// long as the next one is at most this size (a large file waits for a slot of its own, so that a job of
    /// higher priority enqueued meanwhile never waits long behind it). Each is returned as it will be once it
    /// starts, with the attempt it will open; neither is written until `recordStart` (or `returnClaimedAhead`).
    static func claim(limit: Int, gate: ClaimGate?, now: Date, aheadUpTo: Int64? = nil,
                      in db: Database) throws -> [(Job, JobAttempt)] {
        let ahead = aheadUpTo != nil
        guard limit > 0 else { return [] }
        try promoteDueRetries(db, now: now)
        var gate = try gate ?? anyDestination(db)
        guard var query = claimQuery(gate) else { return [] }
        var claimed: [(Job, JobAttempt)] = []
        while claimed.count < limit {
            guard let row = try Row.fetchOne(db.cachedStatement(sql: query.sql), arguments: query.arguments)
            else { break }
            let id: String = row[0]
            if let largest = aheadUpTo, (row[1] as Int64?) ?? .max > largest { break }
            let (priority, turn): (Int, Int64) = (row[2], row[3] ?? 0)
            let picked: Job?
            do {
                picked = try apply(ahead ? .claimAhead : .claim, to: JobID(trusted: id), in: db, now: now,
                                   change: { $0.rateBytesPerSecond = 0 })
            } catch {
                // A row this version cannot read would be the first pick of every round, and hold up the queue.
                guard let why = unreadableRow(error) else { throw error }
                try setAside(JobID(trusted: id), why, in: db, now: now)
                continue
            }
            guard var job = picked else { break }
            try advanceFairClock(destination: job.destination, priority: priority, claimed: turn, in: db)
            if ahead {
                // As it will be when it starts (`recordStart` writes it then).
                var lifecycle = job.lifecycle
                _ = try? lifecycle.apply(.start)
                job.lifecycle = lifecycle
            }
            let attempt = JobAttempt(jobID: job.id, number: job.attempts, startedAt: now, endedAt: nil,
                                     startOffset: job.bytesConfirmed, endOffset: nil, outcome: nil, error: nil)
            if !ahead { try insertAttempt(attempt, in: db) }
            claimed.append((job, attempt))
            // The budget left for whole files is one pool: the file that took it is its only taker this round (the
            // next round counts what it will send).
            if let door = gate.doors[job.destination], door.maximumSize != nil, !door.exempts(job) {
                gate.spendWholeFileBudget()
                guard let next = claimQuery(gate) else { break }
                query = next
            }
        }
        return claimed
    }

    /// Opens a claimed job's attempt.
    private static func insertAttempt(_ attempt: JobAttempt, in db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO job_attempt (job_id, number, started_at, start_offset) VALUES (?, ?, ?, ?)
            """).execute(arguments: [attempt.jobID.rawValue, attempt.number, StoredDate(attempt.startedAt),
                                       attempt.startOffset])
    }

    /// Records that a job claimed ahead went into a free slot at `startedAt`: its wait ends, its attempt is counted
    /// and opened (the event log's `started`). False when the job is no longer waiting for a slot (cancelled
    /// meanwhile): nothing is written.
    ///
    /// `JobLifecycle.Event.start` as one statement (a test holds the two to the same result): its condition is the
    /// event's, its assignments the event's effect. The state does not change, so no lane, group or tally learns
    /// anything; reading and decoding the whole row, as `apply` does, cost more than the rest of the start.
    ///
    /// `offset`: where the transfer started (it may have confirmed more since). `evenIfCancelled`: the transfer
    /// already runs (a slot handed on), so its start is written whatever flag came meanwhile; otherwise a job
    /// flagged for cancel does not start.
    @discardableResult
    static func recordStart(_ id: JobID, at startedAt: Date, offset: Int64, evenIfCancelled: Bool = false,
                            in db: Database) throws -> Bool {
        guard let attempts = try Int.fetchOne(db.cachedStatement(sql: """
            UPDATE job SET waiting_reason = NULL, attempts = attempts + 1, updated_at = ?
            WHERE id = ? AND state = 'uploading' AND waiting_reason = 'concurrency' AND cancel_requested <= ?
            RETURNING attempts
            """), arguments: [StoredDate(startedAt), id.rawValue, evenIfCancelled]) else { return false }
        try insertAttempt(JobAttempt(jobID: id, number: attempts, startedAt: startedAt, endedAt: nil,
                                     startOffset: offset, endOffset: nil, outcome: nil, error: nil), in: db)
        return true
    }

    /// Gives the jobs claimed ahead that did not start back to the queue (`pending`, no attempt counted): the
    /// runner stops, or the gate they went through changed. A job that is no longer waiting for a slot is left as
    /// it is.
    static func returnClaimedAhead(_ ids: [JobID], in db: Database, now: Date) throws {
        for id in ids {
            guard let job = try Job.read(id, in: db),
                  job.state == .uploading, job.waitingReason == .concurrency else { continue }
            _ = try apply(.interrupt, to: id, in: db, now: now)
        }
    }

    /// Claims the next runnable job, if any (see `claim`).
    func claimNext(now: Date = Date(), gate: ClaimGate? = nil) throws -> (Job, JobAttempt)? {
        try claim(limit: 1, gate: gate, now: now).first
    }

    /// The query that picks the next job through `gate`: per open destination, the first job of each claim index
    /// its door lets through (`ClaimIndex`), and the best of those few. nil when the gate is shut everywhere.
    static func claimQuery(_ gate: ClaimGate) -> (sql: String, arguments: StatementArguments)? {
        var picks: [String] = []
        var arguments: StatementArguments = []
        var door = ClaimGate.Door.open
        func pick(_ index: String, _ condition: String, _ destination: String, below limit: Int64? = nil,
                  budgetApplies: Bool = true) {
            let largest = budgetApplies ? door.maximumSize : nil
            let sizeFilter = limit == nil ? "" : " AND size < ?"
            let largestFilter = largest == nil ? "" : " AND size <= ?"
            let priorityFilter = door.minimumPriority == nil ? "" : " AND priority >= ?"
            picks.append("""
                SELECT * FROM (SELECT id, size, priority, fair_key FROM job INDEXED BY \(index)
                WHERE \(condition) AND destination = ?\(sizeFilter)\(largestFilter)\(priorityFilter)
                ORDER BY priority DESC, fair_key, id LIMIT 1)
                """)
            _ = arguments.append(contentsOf: [destination])
            if let limit { _ = arguments.append(contentsOf: [limit]) }
            if let largest { _ = arguments.append(contentsOf: [largest]) }
            if let priority = door.minimumPriority { _ = arguments.append(contentsOf: [priority]) }
        }
        func pick(_ index: QueueDatabase.ClaimIndex, _ destination: String, below limit: Int64? = nil,
                  budgetApplies: Bool = true) {
            pick(index.rawValue, index.condition, destination, below: limit, budgetApplies: budgetApplies)
        }
        for (name, terms) in gate.doors.sorted(by: { $0.key < $1.key }) {
            door = terms
            if door.budgetSpent {
                // Only what ignores the budget: the jobs that say `always`, and those that say nothing where their
                // destination does.
                pick(QueueDatabase.budgetExemptIndex, QueueDatabase.budgetExemptCondition, name)
                if door.destinationIgnoresBudget { pick(.byDestinationPolicy, name) }
            } else if let below = door.meteredBelow {
                pick(.meteredAllowed, name)
                // What is left of the budget limits whole files, but not those that ignore it.
                if door.maximumSize != nil {
                    pick(QueueDatabase.budgetExemptIndex, QueueDatabase.budgetExemptCondition, name, budgetApplies: false)
                }
                if below == .max {
                    pick(.byDestinationPolicy, name, budgetApplies: !door.destinationIgnoresBudget)
                } else if below > 0 {
                    // `allow-below`: the one walk left, over this destination's jobs that are too large, read
                    // from the index alone.
                    pick(.byDestinationPolicy, name, below: below)
                }
            } else {
                for index in QueueDatabase.ClaimIndex.allCases { pick(index, name) }
            }
        }
        guard !picks.isEmpty else { return nil }
        // `-priority`, not `priority DESC`: ordered by plain columns, SQLite sorts each pick on its own and merges
        // them (a sorter per pick); by an expression, the few picks are sorted once.
        let sql = """
            SELECT id, size, priority, fair_key FROM (\(picks.joined(separator: " UNION ALL ")))
            ORDER BY -priority, fair_key, id LIMIT 1
            """
        return (sql, arguments)
    }

    /// A gate open to every destination that has runnable jobs.
    private static func anyDestination(_ db: Database) throws -> ClaimGate {
        let names = try String.fetchAll(db, sql: """
            SELECT DISTINCT destination FROM job WHERE \(QueueDatabase.runnableCondition)
            """)
        return ClaimGate(doors: Dictionary(uniqueKeysWithValues: names.map { ($0, .open) }))
    }

    /// What a scheduler round reads before it decides (`roundView()`).
    struct RoundView: Sendable {
        /// The hand-set link class (`uploadq link`), if any.
        var linkOverride: String?
        /// Jobs someone asked to cancel while a runner was up.
        var cancelRequests: [JobID]
        /// When the first retryable failure is due.
        var nextDue: Date?
    }

    /// Reads what a scheduler round needs: three indexed lookups on the writer's connection, each its own
    /// snapshot (they need not agree with each other). A pooled read transaction cost three times the lookups
    /// themselves, every round.
    func roundView() throws -> RoundView {
        try writer.writeWithoutTransaction(Self.roundView)
    }

    static func roundView(_ db: Database) throws -> RoundView {
        RoundView(
            linkOverride: try String.fetchOne(db.cachedStatement(sql: "SELECT value FROM setting WHERE key = ?"),
                                              arguments: [LinkMonitor.overrideSetting]),
            cancelRequests: try String.fetchAll(db.cachedStatement(sql: """
                SELECT id FROM job INDEXED BY job_cancel WHERE cancel_requested = 1 AND state != 'uploaded'
                """)).map { JobID(trusted: $0) },
            nextDue: try Self.nextDueDate(db))
    }

    /// Destinations of runnable jobs (what the scheduler compares with its config once, at start).
    func runnableDestinations() throws -> Set<String> {
        try writer.read { db in Set(try Self.anyDestination(db).doors.keys) }
    }

    /// Makes retryable failures whose time has come pending again (through the `job_retry` index: only the due
    /// ones are read).
    static func promoteDueRetries(_ db: Database, now: Date) throws {
        // States are literals in cached statements: a bound value compared with the claim indexes' `state =
        // 'pending'` makes SQLite compile the statement again at every use.
        let due = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT id, next_attempt_at FROM job INDEXED BY job_retry
            WHERE state = 'failed' AND next_attempt_at <= ? AND permanent = 0
            """), arguments: [StoredDate(now)])
        for row in due {
            let id = JobID(trusted: row["id"])
            // SQLite compared millisecond texts and found it due; the state machine must agree even when `now`
            // is a fraction of a millisecond before the stored time.
            // (A stored time that is no date is left to `apply`, which sets the row aside.)
            let dueAt = max(now, ((try? row.decode(Date?.self, forColumn: "next_attempt_at")) ?? nil) ?? now)
            do {
                _ = try apply(.retryDue(now: dueAt), to: id, in: db, now: now)
            } catch {
                guard let why = unreadableRow(error) else { throw error }
                try setAside(id, why, in: db, now: now)
            }
        }
    }

    /// Why a job's row cannot be read by this version (a value it does not know, a damaged row: what
    /// `Job.init(row:)` throws, naming the column, never the row's values, whose patch headers may hold a token),
    /// or nil when `error` is something else. A column missing from the table is not a bad row but a schema this
    /// version does not know: it is not taken for one (it would set every job aside).
    static func unreadableRow(_ error: any Error) -> String? {
        guard let error = error as? DatabaseError, error.resultCode == .SQLITE_MISMATCH else { return nil }
        return error.message ?? "\(error)"
    }

    /// Sets aside a job whose row this version cannot read: failed for good, with why, so that the claims go on
    /// past it (it would otherwise be the first pick of every round). Nothing else in the row is touched.
    static func setAside(_ id: JobID, _ why: String, in db: Database, now: Date) throws {
        // Read through the columns this version knows (the row as a whole is what it cannot read).
        let before = try Row.fetchOne(db, sql: """
            SELECT owner_uid, lane, group_name, state = 'failed' AND permanent = 1 AS failed FROM job WHERE id = ?
            """, arguments: [id.rawValue])
        try db.execute(sql: """
            UPDATE job SET state = 'failed', permanent = 1, waiting_reason = NULL, next_attempt_at = NULL,
            last_error = ?, updated_at = ? WHERE id = ?
            """, arguments: ["""
                set aside: this version of uploadq cannot read the job's row (\(why)); the other jobs go on. Run the \
                version that wrote it, or mend the row, then `uploadq retry \(id)`
                """, StoredDate(now), id.rawValue])
        // Its group and lane learn of it as of any failure for good.
        if let row = before, row["failed"] != true {
            let owner = (row["owner_uid"] as Int64?).flatMap { UInt32(exactly: $0) }
            if let group: String = row["group_name"] {
                try settleGroup(member: id, owner: owner, group: group, error: "set aside", .failedForGood, in: db, now: now)
            }
            if let lane: String = row["lane"] { try settleLane(owner: owner, lane: lane, in: db, now: now) }
        }
    }

    /// The holds in force, as recorded by the runner.
    func holds() throws -> QueueHolds {
        try writer.read { db in try Self.holds(db) }
    }

    /// The holds with every owner's turns: what a job's waiting reasons are derived from where they are shown.
    static func displayHolds(_ db: Database) throws -> QueueHolds {
        var holds = try Self.holds(db)
        holds.turns = try fairTurns(db)
        return holds
    }

    static func holds(_ db: Database) throws -> QueueHolds {
        QueueHolds(try Row.fetchAll(db, sql: """
            SELECT scope, reason, metered_below, until, minimum_priority, ignores_budget, detail, size_above FROM hold
            """).compactMap { row in
            WaitingReason(rawValue: row["reason"]).map {
                QueueHolds.Hold(scope: row["scope"], reason: $0, meteredBelow: row["metered_below"],
                                until: (row["until"] as StoredDate?)?.date, minimumPriority: row["minimum_priority"],
                                ignoresBudget: row["ignores_budget"], detail: row["detail"], sizeAbove: row["size_above"])
            }
        })
    }

    /// Records the holds in force: those that ended are removed, new ones added with the time they began, and
    /// those that go on keep theirs. A handful of rows, written only when something changed.
    func recordHolds(_ holds: QueueHolds, now: Date = Date()) throws {
        try writer.write { db in try Self.recordHolds(holds, now: now, in: db) }
    }

    /// `recordHolds` in a transaction the caller holds.
    static func recordHolds(_ holds: QueueHolds, now: Date, in db: Database) throws {
        let recorded = try Self.holds(db)
        for gone in recorded.entries.subtracting(holds.entries) {
            try db.execute(sql: "DELETE FROM hold WHERE scope = ? AND reason = ?",
                           arguments: [gone.scope, gone.reason.rawValue])
        }
        for new in holds.entries.subtracting(recorded.entries) {
            try db.execute(sql: """
                INSERT INTO hold (scope, reason, metered_below, until, minimum_priority, ignores_budget, detail,
                                  size_above, since)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (scope, reason) DO UPDATE SET metered_below = excluded.metered_below, until = excluded.until,
                minimum_priority = excluded.minimum_priority, ignores_budget = excluded.ignores_budget,
                detail = excluded.detail, size_above = excluded.size_above
                """, arguments: [new.scope, new.reason.rawValue, new.meteredBelow, new.until.map(StoredDate.init),
                                 new.minimumPriority, new.ignoresBudget, new.detail, new.sizeAbove, StoredDate(now)])
        }
    }
}
