import Foundation
import GRDB

extension QueueDatabase {
    /// The runnable jobs (`pending`, taken in, not being cancelled): the condition of the claim indexes and of
    /// every query that walks them. They hold only those jobs, so they grow with what is in flight, never with
    /// history.
    /// Since v15, not waiting for another job either (`blocked_by`).
    static let runnableCondition =
        "state = 'pending' AND intake_complete = 1 AND cancel_requested = 0 AND blocked_by IS NULL"

    /// The three claim indexes, which split the runnable jobs by what a metered link does to them, so that each
    /// door of a `ClaimGate` is a seek, not a walk past the jobs the link holds back.
    enum ClaimIndex: String, CaseIterable, Sendable {
        /// Jobs without a metered policy of their own: their destination's `on_metered` decides.
        case byDestinationPolicy = "job_claim"
        /// Jobs whose own policy lets them go on a metered link.
        case meteredAllowed = "job_claim_metered_allowed"
        /// Jobs whose own policy keeps them off a metered link.
        case meteredDeferred = "job_claim_metered_deferred"

        /// The rows the index holds (what migration v15 wrote; `MigrationTests` checks the two agree).
        var condition: String {
            switch self {
            case .byDestinationPolicy: "\(runnableCondition) AND metered_below IS NULL"
            case .meteredAllowed: "\(runnableCondition) AND metered_below > size"
            case .meteredDeferred: "\(runnableCondition) AND metered_below <= size"
            }
        }
    }

    /// Migration v7: what keeps the cost of a job independent of the queue's length.
    /// - `ClaimIndex`: partial indexes over runnable jobs by destination, priority and age: a claim is one seek
    ///   per destination.
    /// - `job_cancel` and `job_intake`, partial indexes over the jobs someone asked to cancel (the scheduler looks
    ///   every round) and over intakes a crash cut short (looked for at every start).
    /// - `job_state_id`, for `list --state` newest first.
    /// - `hold`: why whole destinations wait (offline, metered link, open circuit, busy slots), one row each,
    ///   instead of a reason written into every row; `list`, `show` and `status` derive a job's reason from it.
    /// - `job_tally` and `queue_counter`, kept by triggers: `status` counts without reading the jobs.
    /// - `metered_below`: the job's own metered policy as a number SQL compares with its size.
    ///
    /// Frozen: plain SQL and its own reading of the policies it found, no application types (a later change of
    /// `ClaimIndex` or `MeteredPolicy` cannot change what it did).
    static func migrateToScale(_ db: Database) throws {
        try db.alter(table: "job") { t in t.add(column: "metered_below", .integer) }
        for row in try Row.fetchAll(db, sql: "SELECT id, on_metered FROM job WHERE on_metered IS NOT NULL") {
            try db.execute(sql: "UPDATE job SET metered_below = ? WHERE id = ?",
                           arguments: [v7MeteredBelow(row["on_metered"]), row["id"] as String])
        }
        // Reasons written into rows by earlier versions: from now on they are derived from `hold`.
        try db.execute(sql: "UPDATE job SET waiting_reason = NULL WHERE waiting_reason IS NOT NULL")
        // The runnable jobs by what a metered link does to them; size too where the destination's limit is
        // compared with it (`allow-below`), read from the index.
        let runnable = "state = 'pending' AND intake_complete = 1 AND cancel_requested = 0"
        try db.execute(sql: """
            CREATE INDEX job_claim ON job(destination, priority DESC, id, size)
                WHERE \(runnable) AND metered_below IS NULL;
            CREATE INDEX job_claim_metered_allowed ON job(destination, priority DESC, id)
                WHERE \(runnable) AND metered_below > size;
            CREATE INDEX job_claim_metered_deferred ON job(destination, priority DESC, id)
                WHERE \(runnable) AND metered_below <= size;
            """)
        try db.execute(sql: "CREATE INDEX job_cancel ON job(id) WHERE cancel_requested = 1 AND state != 'uploaded'")
        // `move` intakes a crash cut short, looked for at every start.
        try db.execute(sql: "CREATE INDEX job_intake ON job(id) WHERE intake_complete = 0")
        // Status counts come from the tally now; this index only cost every state change a write.
        try db.execute(sql: "DROP INDEX IF EXISTS job_summary")
        try db.create(index: "job_state_id", on: "job", columns: ["state", "id"])
        try db.create(table: "hold") { t in
            // A destination's name, or "" for the whole queue (every slot busy).
            t.column("scope", .text).notNull()
            t.column("reason", .text).notNull()
            // For `metered-link`: the destination's own limit (jobs at least this large wait; 0: all of them).
            t.column("metered_below", .integer)
            t.column("since", .datetime).notNull()
            t.primaryKey(["scope", "reason"])
        }
        try db.create(table: "job_tally") { t in
            t.column("state", .text).notNull()
            t.column("destination", .text).notNull()
            t.column("permanent", .boolean).notNull()
            t.column("patch_state", .text).notNull()
            t.column("jobs", .integer).notNull()
            t.column("bytes", .integer).notNull()
            t.primaryKey(["state", "destination", "permanent", "patch_state"])
        }
        try db.execute(sql: """
            INSERT INTO job_tally (state, destination, permanent, patch_state, jobs, bytes)
            SELECT state, destination, permanent, patch_state, COUNT(*), COALESCE(SUM(size), 0) FROM job
            GROUP BY state, destination, permanent, patch_state
            """)
        let add = """
            INSERT INTO job_tally (state, destination, permanent, patch_state, jobs, bytes)
            VALUES (NEW.state, NEW.destination, NEW.permanent, NEW.patch_state, 1, NEW.size)
            ON CONFLICT (state, destination, permanent, patch_state)
            DO UPDATE SET jobs = jobs + 1, bytes = bytes + NEW.size;
            """
        let remove = """
            UPDATE job_tally SET jobs = jobs - 1, bytes = bytes - OLD.size
            WHERE state = OLD.state AND destination = OLD.destination AND permanent = OLD.permanent
            AND patch_state = OLD.patch_state;
            """
        try db.execute(sql: "CREATE TRIGGER job_tally_insert AFTER INSERT ON job BEGIN \(add) END")
        try db.execute(sql: "CREATE TRIGGER job_tally_delete AFTER DELETE ON job BEGIN \(remove) END")
        try db.execute(sql: """
            CREATE TRIGGER job_tally_update AFTER UPDATE OF state, destination, permanent, patch_state, size ON job
            WHEN OLD.state IS NOT NEW.state OR OLD.destination IS NOT NEW.destination
              OR OLD.permanent IS NOT NEW.permanent OR OLD.patch_state IS NOT NEW.patch_state
              OR OLD.size IS NOT NEW.size
            BEGIN \(remove) \(add) END
            """)
        try db.create(table: "queue_counter") { t in
            t.primaryKey("name", .text)
            t.column("value", .integer).notNull()
        }
        // Attempts that ended in a failure since the queue was created: pruning history does not lower it.
        try db.execute(sql: """
            INSERT INTO queue_counter (name, value)
            SELECT 'failed_attempts', COUNT(*) FROM job_attempt WHERE outcome = 'failed'
            """)
        try db.execute(sql: """
            CREATE TRIGGER failed_attempt_count AFTER UPDATE OF outcome ON job_attempt
            WHEN NEW.outcome = 'failed' AND OLD.outcome IS NOT 'failed'
            BEGIN UPDATE queue_counter SET value = value + 1 WHERE name = 'failed_attempts'; END
            """)
    }

    /// Migration v8: indexes that hold only the rows their queries look for. An index over every job is written
    /// by every state change (SQLite rewrites the entry of each index over a column an UPDATE sets); a partial one
    /// only when a row enters or leaves it. Claims and transfer ends touched two such indexes for nothing.
    /// - `job_retry` replaces `job_runnable`: only retryable failures have a due time.
    /// - `job_uploaded` replaces `job_finished`: only uploaded jobs are pruned or reported by their age.
    /// The claim index of jobs that ignore a spent metered budget (`on_metered = "always"`), so a claim while the
    /// budget is spent seeks them instead of walking past the others.
    static let budgetExemptIndex = "job_claim_budget_exempt"
    static var budgetExemptCondition: String { "\(runnableCondition) AND on_metered = 'always'" }

    /// Migration v11: the device constraints.
    /// - `hold` learns when a hold is expected to clear (`until`: a window opens, a budget resets), the priority
    ///   that passes it (`minimum_priority`, windows), whether its destination's jobs ignore it
    ///   (`ignores_budget`), a word on it (`detail`: what the power lacks, which budget is spent), and for a budget
    ///   partly spent the size above which whole files wait (`size_above`).
    /// - `metered_budget`: the ledger of the bytes metered links carried this period, one row whatever the
    ///   traffic.
    /// - `job_claim_budget_exempt` (`budgetExemptIndex`).
    ///
    /// Frozen: plain SQL, no application types.
    static func migrateToDeviceConstraints(_ db: Database) throws {
        try db.alter(table: "hold") { t in
            t.add(column: "until", .datetime)
            t.add(column: "minimum_priority", .integer)
            t.add(column: "ignores_budget", .boolean).notNull().defaults(to: false)
            t.add(column: "detail", .text)
            t.add(column: "size_above", .integer)
        }
        try db.create(table: "metered_budget") { t in
            t.primaryKey("id", .integer).check { $0 == 1 }
            t.column("period_start", .datetime).notNull()
            t.column("resets_at", .datetime).notNull()
            t.column("used", .integer).notNull()
        }
        try db.execute(sql: """
            CREATE INDEX job_claim_budget_exempt ON job(destination, priority DESC, id)
                WHERE state = 'pending' AND intake_complete = 1 AND cancel_requested = 0 AND on_metered = 'always'
            """)
    }

    /// A job's own `on_metered` as v7 read it: files below the number may go on a metered link (`defer` 0,
    /// `allow` and `always` all, `allow-below:SIZE` that size in bytes, `KB`/`MB`/`GB` or `KiB`/`MiB`/`GiB`);
    /// anything else is no policy of its own.
    static func v7MeteredBelow(_ text: String) -> Int64? {
        switch text {
        case "defer": return 0
        case "allow", "always": return .max
        default:
            guard text.hasPrefix("allow-below:") else { return nil }
            let size = text.dropFirst("allow-below:".count).trimmingCharacters(in: .whitespaces)
            let units: [(String, Double)] = [("KiB", 1024), ("MiB", 1_048_576), ("GiB", 1_073_741_824), ("KB", 1e3),
                                             ("MB", 1e6), ("GB", 1e9), ("B", 1)]
            // With a unit, a decimal number of it; without one, a whole number of bytes.
            guard let (unit, factor) = units.first(where: { size.hasSuffix($0.0) }) else {
                return Int64(size).flatMap { $0 >= 0 ? $0 : nil }
            }
            let number = size.dropLast(unit.count).trimmingCharacters(in: .whitespaces)
            guard let value = Double(number), value >= 0, value.isFinite, value * factor < 9e18 else { return nil }
            return Int64((value * factor).rounded())
        }
    }

    /// Frozen: plain SQL.
    static func migrateToLeanIndexes(_ db: Database) throws {
        try db.execute(sql: "DROP INDEX IF EXISTS job_runnable")
        try db.execute(sql: "DROP INDEX IF EXISTS job_finished")
        try db.execute(sql: "CREATE INDEX job_retry ON job(next_attempt_at) WHERE state = 'failed'")
        try db.execute(sql: "CREATE INDEX job_uploaded ON job(updated_at, id) WHERE state = 'uploaded'")
    }
}
