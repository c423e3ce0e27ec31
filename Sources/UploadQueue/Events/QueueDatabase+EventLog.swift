import GRDB

extension QueueDatabase {
    /// Migration v14: the durable event log. Each job's enqueue, start, upload, failure and cancel is a row with a
    /// sequence number (`AUTOINCREMENT`: never reused, also after a crash or a prune), written by triggers in the
    /// very transaction that changes the job: an event is durable exactly when what it tells is.
    ///
    /// Frozen: plain SQL, no application types (a later change of the app's types cannot change what it did).
    static func migrateToEventLog(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE event (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                at DATETIME NOT NULL,
                kind TEXT NOT NULL,
                job_id TEXT,
                owner_uid INTEGER,
                fields TEXT NOT NULL
            )
            """)
        // A dropper's events, for its reads (the queue's own user reads by sequence alone).
        try db.execute(sql: "CREATE INDEX event_owner ON event(owner_uid, seq) WHERE owner_uid IS NOT NULL")
        try db.execute(sql: """
            CREATE TRIGGER event_enqueued AFTER INSERT ON job BEGIN
                INSERT INTO event (at, kind, job_id, owner_uid, fields) VALUES (NEW.created_at, 'enqueued', NEW.id,
                    NEW.owner_uid, json_object('name', NEW.original_name, 'destination', NEW.destination,
                    'size', NEW.size));
            END
            """)
        // A job back to pending (a retry, an interruption) tells nothing a reader acts on: no row.
        try db.execute(sql: """
            CREATE TRIGGER event_state AFTER UPDATE OF state ON job
            WHEN NEW.state IS NOT OLD.state AND NEW.state IN ('uploading', 'uploaded', 'failed') BEGIN
                INSERT INTO event (at, kind, job_id, owner_uid, fields) VALUES (NEW.updated_at,
                    CASE NEW.state WHEN 'uploading' THEN 'started' ELSE NEW.state END, NEW.id, NEW.owner_uid,
                    CASE NEW.state
                        WHEN 'uploading' THEN json_object('destination', NEW.destination, 'attempt', NEW.attempts,
                            'offset', NEW.bytes_confirmed)
                        WHEN 'uploaded' THEN json_object('destination', NEW.destination, 'size', NEW.size,
                            'remote_url', NEW.remote_url)
                        ELSE json_object('error', NEW.last_error,
                            'permanent', json(CASE WHEN NEW.permanent THEN 'true' ELSE 'false' END),
                            'retry_at', CASE WHEN NEW.permanent THEN NULL ELSE NEW.next_attempt_at END)
                    END);
            END
            """)
        // A job leaves the queue before its upload only when cancelled (pruning takes uploaded ones alone).
        try db.execute(sql: """
            CREATE TRIGGER event_cancelled AFTER DELETE ON job WHEN OLD.state != 'uploaded' BEGIN
                INSERT INTO event (at, kind, job_id, owner_uid, fields) VALUES (
                    strftime('%Y-%m-%d %H:%M:%f', 'now'), 'cancelled', OLD.id, OLD.owner_uid, '{}');
            END
            """)
    }

    /// Migration v17: a job claimed ahead for the runner's next free slot (`uploading`, waiting for `concurrency`)
    /// has not started: its `started` row is written when it goes into a slot (its wait ends), not at the claim.
    ///
    /// Frozen: plain SQL, no application types.
    static func migrateToClaimAhead(_ db: Database) throws {
        try db.execute(sql: """
            DROP TRIGGER event_state;
            CREATE TRIGGER event_state AFTER UPDATE OF state, waiting_reason ON job
            WHEN (NEW.state IS NOT OLD.state AND NEW.state IN ('uploaded', 'failed'))
              OR (NEW.state = 'uploading' AND NEW.waiting_reason IS NULL
                  AND (OLD.state IS NOT 'uploading' OR OLD.waiting_reason IS NOT NULL)) BEGIN
                INSERT INTO event (at, kind, job_id, owner_uid, fields) VALUES (NEW.updated_at,
                    CASE NEW.state WHEN 'uploading' THEN 'started' ELSE NEW.state END, NEW.id, NEW.owner_uid,
                    CASE NEW.state
                        WHEN 'uploading' THEN json_object('destination', NEW.destination, 'attempt', NEW.attempts,
                            'offset', NEW.bytes_confirmed)
                        WHEN 'uploaded' THEN json_object('destination', NEW.destination, 'size', NEW.size,
                            'remote_url', NEW.remote_url)
                        ELSE json_object('error', NEW.last_error,
                            'permanent', json(CASE WHEN NEW.permanent THEN 'true' ELSE 'false' END),
                            'retry_at', CASE WHEN NEW.permanent THEN NULL ELSE NEW.next_attempt_at END)
                    END);
            END;
            """)
    }
}
