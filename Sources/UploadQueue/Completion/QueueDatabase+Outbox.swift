import GRDB

extension QueueDatabase {
    /// v12: one outbox for every consumer of a job's end (the metadata patch, the hooks), where there was one for
    /// patches.
    ///
    /// - `outbox` holds a row per job and consumer: its state (`pending`, `done`, `failed`), attempts, last error
    ///   and next attempt. The patch rows move over with their job's `patch_state`.
    /// - `outbox_consumer` names the hooks the running daemon's config has, by the event they follow. Two triggers
    ///   owe each of them a row in the very transaction that makes a job `uploaded`, or `failed` for good, whichever
    ///   code path does it: a crash cannot lose a hook, and no path can forget one. A job that fails for good again
    ///   (after `uploadq retry`) owes its `on_failed` hook again; a job retried before that hook ran no longer owes
    ///   it (it is not failed any more).
    /// - `outbox_tally`, kept by triggers as `job_tally` is: `status` and the metrics count entries per consumer
    ///   and state without reading the outbox, whose done rows stay as long as their jobs' history.
    ///
    /// Frozen: plain SQL, no application types. The names of states, consumers and events are written as they
    /// were then; `MigrationTests` checks that the app's enums still name them so.
    static func migrateToOutbox(_ db: Database) throws {
        let (pending, done) = ("pending", "done")
        let (uploaded, failedJob) = ("uploaded", "failed")
        let patch = "patch"
        let (onUploaded, onFailed) = ("uploaded", "failed")
        let failedHook = "hook:failed"
        let noPatch = "none"
        try db.execute(sql: """
            CREATE TABLE outbox (
                job_id TEXT NOT NULL REFERENCES job(id) ON DELETE CASCADE,
                consumer TEXT NOT NULL,
                state TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                last_error TEXT,
                next_attempt_at DATETIME NOT NULL,
                created_at DATETIME NOT NULL,
                updated_at DATETIME NOT NULL,
                PRIMARY KEY (job_id, consumer)
            ) WITHOUT ROWID;
            CREATE INDEX outbox_due ON outbox(next_attempt_at) WHERE state = '\(pending)';
            INSERT INTO outbox (job_id, consumer, state, attempts, last_error, next_attempt_at, created_at, updated_at)
                SELECT o.job_id, '\(patch)', CASE j.patch_state WHEN '\(noPatch)' THEN '\(done)' ELSE j.patch_state END,
                       o.attempts, o.last_error, o.next_attempt_at, o.created_at, o.updated_at
                FROM patch_outbox o JOIN job j ON j.id = o.job_id;
            DROP TABLE patch_outbox;
            CREATE TABLE outbox_tally (
                consumer TEXT NOT NULL,
                state TEXT NOT NULL,
                entries INTEGER NOT NULL,
                PRIMARY KEY (consumer, state)
            ) WITHOUT ROWID;
            INSERT INTO outbox_tally (consumer, state, entries) SELECT consumer, state, COUNT(*) FROM outbox GROUP BY consumer, state;
            CREATE TRIGGER outbox_tally_insert AFTER INSERT ON outbox BEGIN
                INSERT INTO outbox_tally (consumer, state, entries) VALUES (NEW.consumer, NEW.state, 1)
                ON CONFLICT (consumer, state) DO UPDATE SET entries = entries + 1;
            END;
            CREATE TRIGGER outbox_tally_delete AFTER DELETE ON outbox BEGIN
                UPDATE outbox_tally SET entries = entries - 1 WHERE consumer = OLD.consumer AND state = OLD.state;
            END;
            CREATE TRIGGER outbox_tally_update AFTER UPDATE OF consumer, state ON outbox
                WHEN OLD.consumer IS NOT NEW.consumer OR OLD.state IS NOT NEW.state
            BEGIN
                UPDATE outbox_tally SET entries = entries - 1 WHERE consumer = OLD.consumer AND state = OLD.state;
                INSERT INTO outbox_tally (consumer, state, entries) VALUES (NEW.consumer, NEW.state, 1)
                ON CONFLICT (consumer, state) DO UPDATE SET entries = entries + 1;
            END;
            CREATE TABLE outbox_consumer (name TEXT PRIMARY KEY, event TEXT NOT NULL) WITHOUT ROWID;
            CREATE TRIGGER outbox_owed_on_upload AFTER UPDATE OF state ON job
                WHEN NEW.state = '\(uploaded)' AND OLD.state != '\(uploaded)'
            BEGIN
                INSERT OR IGNORE INTO outbox (job_id, consumer, state, next_attempt_at, created_at, updated_at)
                    SELECT NEW.id, name, '\(pending)', NEW.updated_at, NEW.updated_at, NEW.updated_at
                    FROM outbox_consumer WHERE event = '\(onUploaded)';
            END;
            CREATE TRIGGER outbox_owed_on_failure AFTER UPDATE OF state, permanent ON job
                WHEN NEW.state = '\(failedJob)' AND NEW.permanent = 1 AND NOT (OLD.state = '\(failedJob)' AND OLD.permanent = 1)
            BEGIN
                INSERT INTO outbox (job_id, consumer, state, next_attempt_at, created_at, updated_at)
                    SELECT NEW.id, name, '\(pending)', NEW.updated_at, NEW.updated_at, NEW.updated_at
                    FROM outbox_consumer WHERE event = '\(onFailed)'
                ON CONFLICT (job_id, consumer) DO UPDATE SET state = '\(pending)', attempts = 0, last_error = NULL,
                    next_attempt_at = excluded.next_attempt_at, updated_at = excluded.updated_at;
            END;
            CREATE TRIGGER outbox_failure_withdrawn AFTER UPDATE OF state ON job
                WHEN OLD.state = '\(failedJob)' AND NEW.state != '\(failedJob)'
            BEGIN
                DELETE FROM outbox WHERE job_id = NEW.id AND consumer = '\(failedHook)' AND state != '\(done)';
            END;
            """)
    }
}
