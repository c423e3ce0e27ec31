import GRDB

extension QueueDatabase {
    /// Migration v19: fair share of the slots between owners (`FairShare`).
    /// - `job.fair_key`: the turn a job took when it was enqueued; the claim indexes order by priority, turn, age.
    ///   Jobs from before take turn 0: among themselves, oldest first, as before.
    /// - `fair_turn`: per owner (a dropper's uid; -1 for the queue's own user and root) and priority, the next turn
    ///   it takes and how many of its jobs are runnable (kept by triggers, as `job_tally` is): what `status` and
    ///   `show` read to say a job waits for its turn, one row per owner whatever the jobs.
    /// - `fair_clock`: per priority, the turn of the last job claimed there.
    ///
    /// Frozen: plain SQL, no application types.
    static func migrateToFairShare(_ db: Database) throws {
        let runnable = { (row: String) in
            "(\(row).state = 'pending' AND \(row).intake_complete = 1 AND \(row).cancel_requested = 0 "
                + "AND \(row).blocked_by IS NULL)"
        }
        let owner = { (row: String) in
            "(CASE WHEN \(row).owner_uid IS NULL OR \(row).owner_uid = 0 THEN -1 ELSE \(row).owner_uid END)"
        }
        let add = """
            INSERT INTO fair_turn (owner_key, priority, next_key, runnable) SELECT \(owner("NEW")), NEW.priority, 0, 1
                WHERE \(runnable("NEW"))
                ON CONFLICT (owner_key, priority) DO UPDATE SET runnable = runnable + 1;
            """
        let remove = """
            UPDATE fair_turn SET runnable = runnable - 1
                WHERE \(runnable("OLD")) AND owner_key = \(owner("OLD")) AND priority = OLD.priority;
            """
        let condition = "state = 'pending' AND intake_complete = 1 AND cancel_requested = 0 AND blocked_by IS NULL"
        try db.execute(sql: """
            ALTER TABLE job ADD COLUMN fair_key INTEGER DEFAULT 0;
            CREATE TABLE fair_turn (
                owner_key INTEGER NOT NULL,
                priority INTEGER NOT NULL,
                next_key INTEGER NOT NULL,
                runnable INTEGER NOT NULL,
                PRIMARY KEY (owner_key, priority)
            ) WITHOUT ROWID;
            CREATE TABLE fair_clock (
                priority INTEGER NOT NULL PRIMARY KEY,
                turn INTEGER NOT NULL
            ) WITHOUT ROWID;
            INSERT INTO fair_turn (owner_key, priority, next_key, runnable)
                SELECT \(owner("job")), priority, 0, COUNT(*) FROM job WHERE \(condition) GROUP BY 1, 2;
            CREATE TRIGGER fair_turn_insert AFTER INSERT ON job WHEN \(runnable("NEW")) BEGIN \(add) END;
            CREATE TRIGGER fair_turn_delete AFTER DELETE ON job WHEN \(runnable("OLD")) BEGIN \(remove) END;
            CREATE TRIGGER fair_turn_update AFTER UPDATE OF state, intake_complete, cancel_requested, blocked_by,
                priority, owner_uid ON job
                WHEN \(runnable("OLD")) IS NOT \(runnable("NEW"))
                  OR (\(runnable("OLD")) AND (OLD.priority IS NOT NEW.priority OR \(owner("OLD")) IS NOT \(owner("NEW"))))
                BEGIN \(remove) \(add) END;
            DROP INDEX job_claim;
            DROP INDEX job_claim_metered_allowed;
            DROP INDEX job_claim_metered_deferred;
            DROP INDEX job_claim_budget_exempt;
            CREATE INDEX job_claim ON job(destination, priority DESC, fair_key, id, size)
                WHERE \(condition) AND metered_below IS NULL;
            CREATE INDEX job_claim_metered_allowed ON job(destination, priority DESC, fair_key, id)
                WHERE \(condition) AND metered_below > size;
            CREATE INDEX job_claim_metered_deferred ON job(destination, priority DESC, fair_key, id)
                WHERE \(condition) AND metered_below <= size;
            CREATE INDEX job_claim_budget_exempt ON job(destination, priority DESC, fair_key, id)
                WHERE \(condition) AND on_metered = 'always';
            """)
    }
}
