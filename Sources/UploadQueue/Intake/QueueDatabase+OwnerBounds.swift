import GRDB

extension QueueDatabase {
    /// Migration v20: what each dropper holds of what everyone shares.
    /// - `owner_tally`: per dropper (a job's `owner_uid`, not root's 0), its jobs not uploaded yet and their bytes,
    ///   kept by triggers as `job_tally` is: what `[limits] owner_pending_jobs` and `owner_pending_bytes` are
    ///   checked against, one row read per enqueue.
    /// - `job.source_mode`: the permission bits a copy of the file keeps (`FileFingerprint.modeKept`), recorded at
    ///   intake: what a `file` destination delivers it with, the queue's own copy staying 0600.
    /// - `spool_hold`: the spool files left where they are for a reason of their owner's (over its quota, a
    ///   sidecar another user owns), so that `status` and the API can say so; written by the spool watcher. A
    ///   foreign sidecar's hold outlives a restart (the file, by `file_device` and `file_inode`, waits until its
    ///   owner writes its own sidecar): each is recorded, one row per file another user holds up. The others (a
    ///   quota's, looked at afresh at a start) are at most a bounded number, found by `spool_hold_capped`.
    ///
    /// The tables are `WITHOUT ROWID`: an `INTEGER PRIMARY KEY` would refuse a damaged row's owner (text), and
    /// with it the write of that row, which the intake and the claims must survive.
    ///
    /// Frozen: plain SQL, no application types.
    static func migrateToOwnerBounds(_ db: Database) throws {
        let counted = { (row: String) in
            "(\(row).owner_uid IS NOT NULL AND \(row).owner_uid != 0 AND \(row).state != 'uploaded')"
        }
        let add = """
            INSERT INTO owner_tally (owner_uid, jobs, bytes) SELECT NEW.owner_uid, 1, NEW.size WHERE \(counted("NEW"))
                ON CONFLICT (owner_uid) DO UPDATE SET jobs = jobs + 1, bytes = bytes + excluded.bytes;
            """
        let remove = """
            UPDATE owner_tally SET jobs = jobs - 1, bytes = bytes - OLD.size
                WHERE \(counted("OLD")) AND owner_uid = OLD.owner_uid;
            """
        try db.execute(sql: """
            ALTER TABLE job ADD COLUMN source_mode INTEGER;
            CREATE TABLE owner_tally (
                owner_uid INTEGER NOT NULL PRIMARY KEY,
                jobs INTEGER NOT NULL,
                bytes INTEGER NOT NULL
            ) WITHOUT ROWID;
            INSERT INTO owner_tally (owner_uid, jobs, bytes)
                SELECT owner_uid, COUNT(*), COALESCE(SUM(size), 0) FROM job WHERE \(counted("job")) GROUP BY owner_uid;
            CREATE TRIGGER owner_tally_insert AFTER INSERT ON job WHEN \(counted("NEW")) BEGIN \(add) END;
            CREATE TRIGGER owner_tally_delete AFTER DELETE ON job WHEN \(counted("OLD")) BEGIN \(remove) END;
            CREATE TRIGGER owner_tally_update AFTER UPDATE OF state, size, owner_uid ON job
                WHEN \(counted("OLD")) IS NOT \(counted("NEW"))
                  OR (\(counted("OLD")) AND (OLD.size IS NOT NEW.size OR OLD.owner_uid IS NOT NEW.owner_uid))
                BEGIN \(remove) \(add) END;
            CREATE TABLE spool_hold (
                name TEXT NOT NULL PRIMARY KEY,
                owner_uid INTEGER NOT NULL,
                reason TEXT NOT NULL,
                message TEXT NOT NULL,
                since DATETIME NOT NULL,
                file_device INTEGER NOT NULL,
                file_inode INTEGER NOT NULL
            ) WITHOUT ROWID;
            CREATE INDEX spool_hold_owner ON spool_hold(owner_uid);
            CREATE INDEX spool_hold_capped ON spool_hold(owner_uid) WHERE reason != 'foreign-sidecar';
            """)
    }
}
