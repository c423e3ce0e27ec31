import GRDB

extension QueueDatabase {
    /// Migration v19: fair share of the slots between owners (`FairShare`).
    /// - `job.fair_key`: the turn a job took when it was enqueued; the claim indexes order by priority, turn, age.
    ///   The jobs not uploaded yet are numbered in turn, per destination, priority and owner, oldest first, as if
    ///   each had taken its turn when it came: a backlog from before does not hold up an owner who comes later.
    /// - `fair_turn`: per destination, priority and owner (a dropper's uid; -1 for the queue's own user and root),
    ///   the next turn the owner takes there (after the turn of its last job inserted), how many of its jobs are
    ///   pending there (not claimed yet, whatever else holds them: their lane, `after`) and how many of those are
    ///   runnable, kept by triggers as `job_tally` is: what an enqueue reads (an owner with none pending starts
    ///   again at the clock), and what `status` and `show` read to say a job waits for its turn. One row per
    ///   destination and owner, whatever the jobs; `fair_turn_pending` finds those with jobs pending.
    /// - `fair_clock`: per destination and priority, the turn of the last job claimed there (where its turns started,
    ///   before any claim; 0 for a backlog from before).
    ///
    /// Frozen: plain SQL, no application types.
    static func migrateToFairShare(_ db: Database) throws {
        let runnable = { (row: String) in
            "(\(row).state = 'pending' AND \(row).intake_complete = 1 AND \(row).cancel_requested = 0 "
                + "AND \(row).blocked_by IS NULL)"
        }
        // Waiting for a slot, whatever holds it back (its lane, `after`, its intake): not claimed yet.
        let pending = { (row: String) in "(\(row).state = 'pending')" }
        let owner = { (row: String) in
            "(CASE WHEN \(row).owner_uid IS NULL OR \(row).owner_uid = 0 THEN -1 ELSE \(row).owner_uid END)"
        }
        let add = """
            INSERT INTO fair_turn (destination, priority, owner_key, next_key, runnable, pending)
                SELECT NEW.destination, NEW.priority, \(owner("NEW")), 0, \(runnable("NEW")), \(pending("NEW"))
                WHERE \(pending("NEW"))
                ON CONFLICT (destination, priority, owner_key) DO UPDATE SET runnable = runnable + excluded.runnable,
                pending = pending + 1;
            """
        let remove = """
            UPDATE fair_turn SET runnable = runnable - \(runnable("OLD")), pending = pending - 1
                WHERE \(pending("OLD")) AND destination = OLD.destination AND priority = OLD.priority
                AND owner_key = \(owner("OLD"));
            """
        // A new job: its turn taken (the owner's next after it: after the later of the two while the owner has jobs
        // pending there, after this one when it had none, and started again), and counted.
        let inserted = """
            INSERT INTO fair_turn (destination, priority, owner_key, next_key, runnable, pending)
                VALUES (NEW.destination, NEW.priority, \(owner("NEW")), COALESCE(NEW.fair_key, 0) + 1,
                        \(runnable("NEW")), \(pending("NEW")))
                ON CONFLICT (destination, priority, owner_key) DO UPDATE SET runnable = runnable + excluded.runnable,
                pending = pending + excluded.pending,
                next_key = CASE WHEN pending > 0 THEN max(next_key, excluded.next_key) ELSE excluded.next_key END;
            """
        let condition = "state = 'pending' AND intake_complete = 1 AND cancel_requested = 0 AND blocked_by IS NULL"
        try db.execute(sql: """
            ALTER TABLE job ADD COLUMN fair_key INTEGER DEFAULT 0;
            CREATE TABLE fair_turn (
                destination TEXT NOT NULL,
                priority INTEGER NOT NULL,
                owner_key INTEGER NOT NULL,
                next_key INTEGER NOT NULL,
                runnable INTEGER NOT NULL,
                pending INTEGER NOT NULL,
                PRIMARY KEY (destination, priority, owner_key)
            ) WITHOUT ROWID;
            CREATE INDEX fair_turn_pending ON fair_turn(destination, priority) WHERE pending > 0;
            CREATE TABLE fair_clock (
                destination TEXT NOT NULL,
                priority INTEGER NOT NULL,
                turn INTEGER NOT NULL,
                PRIMARY KEY (destination, priority)
            ) WITHOUT ROWID;
            WITH numbered AS (
                SELECT id, ROW_NUMBER() OVER (PARTITION BY destination, priority, \(owner("job")) ORDER BY id) - 1 AS turn
                FROM job WHERE state != 'uploaded'
            )
            UPDATE job SET fair_key = numbered.turn FROM numbered WHERE job.id = numbered.id;
            INSERT INTO fair_turn (destination, priority, owner_key, next_key, runnable, pending)
                SELECT destination, priority, \(owner("job")), COUNT(*), SUM(\(runnable("job"))), SUM(\(pending("job")))
                FROM job WHERE state != 'uploaded' GROUP BY 1, 2, 3;
            INSERT INTO fair_clock (destination, priority, turn)
                SELECT DISTINCT destination, priority, 0 FROM job WHERE state != 'uploaded';
            CREATE TRIGGER fair_turn_insert AFTER INSERT ON job WHEN NEW.state != 'uploaded' BEGIN \(inserted) END;
            CREATE TRIGGER fair_turn_delete AFTER DELETE ON job WHEN \(pending("OLD")) BEGIN \(remove) END;
            CREATE TRIGGER fair_turn_update AFTER UPDATE OF state, intake_complete, cancel_requested, blocked_by,
                priority, owner_uid, destination ON job
                WHEN \(runnable("OLD")) IS NOT \(runnable("NEW")) OR \(pending("OLD")) IS NOT \(pending("NEW"))
                  OR (\(pending("OLD")) AND (OLD.priority IS NOT NEW.priority OR OLD.destination IS NOT NEW.destination
                      OR \(owner("OLD")) IS NOT \(owner("NEW"))))
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
