import GRDB

extension QueueDatabase {
    /// Migration v16: groups of jobs that complete together, and what holds a lane.
    /// - `lane.blocked_by`: the lane's job that failed and holds it (its head), since `blocked_since`; NULL when
    ///   none does (what `lane.blocked` and `lane.unblocked` tell, and `uploadq lanes` shows).
    /// - `job.blocked_kind`: how a job waits for its `blocked_by` (`lane`, `after`): a lane's job may wait for a job
    ///   it names `after` once the job before it is done, and says so.
    /// - `job_lane_live` replaces v15's `job_lane`: a lane's jobs not uploaded yet, in order, so that finding a
    ///   lane's head or its work never walks its history.
    /// - `job.group_name`: the group a job is a member of (nil: none), indexed per owner.
    /// - `job_group`: per owner (`-1`: the queue's own user) and name, the group's state (`open`, `closed`,
    ///   `incomplete`, `uploaded`) and its tallies, kept in the transaction of each member's change: `members`
    ///   (enqueued and not cancelled), `remaining` (of those, not uploaded yet), `failed` (failed for good), with
    ///   one failing member named. When it is `uploaded`, `completion` holds the members as they were then (ids,
    ///   names, sizes, digests, remote URLs) and `completing_job` the member its hook and patch are owed on; a
    ///   library host's (the queue's own user's) acknowledgement is `acknowledged_at`, the group's owner's through
    ///   the control API `owner_acknowledged_at` (a dropper's reading changes nothing the host relies on). `patch`
    ///   is the patch the group's close asked for.
    ///
    /// Frozen: plain SQL, no application types.
    static func migrateToGroups(_ db: Database) throws {
        try db.execute(sql: """
            ALTER TABLE job ADD COLUMN group_name TEXT;
            CREATE INDEX job_group_member ON job(owner_uid, group_name) WHERE group_name IS NOT NULL;
            CREATE TABLE job_group (
                owner_uid INTEGER NOT NULL,
                name TEXT NOT NULL,
                state TEXT NOT NULL,
                members INTEGER NOT NULL DEFAULT 0,
                remaining INTEGER NOT NULL DEFAULT 0,
                failed INTEGER NOT NULL DEFAULT 0,
                failing_job TEXT,
                completing_job TEXT,
                patch TEXT,
                completion TEXT,
                created_at DATETIME NOT NULL,
                closed_at DATETIME,
                settled_at DATETIME,
                acknowledged_at DATETIME,
                owner_acknowledged_at DATETIME,
                PRIMARY KEY (owner_uid, name)
            ) WITHOUT ROWID;
            ALTER TABLE job ADD COLUMN blocked_kind TEXT;
            DROP INDEX job_lane;
            CREATE INDEX job_lane_live ON job(owner_uid, lane, lane_seq) WHERE lane IS NOT NULL AND state != 'uploaded';
            ALTER TABLE lane ADD COLUMN blocked_by TEXT;
            ALTER TABLE lane ADD COLUMN blocked_since DATETIME;
            CREATE INDEX job_group_unacknowledged ON job_group(settled_at) WHERE state = 'uploaded' AND acknowledged_at IS NULL;
            """)
    }
}
