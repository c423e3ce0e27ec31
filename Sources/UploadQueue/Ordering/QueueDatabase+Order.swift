import Foundation
import GRDB

extension QueueDatabase {
    /// Migration v15: order between jobs.
    /// - `job.lane` and `job.lane_seq`: the lane a job goes in, and its place there (given in the enqueue's
    ///   transaction from `lane.next_seq`).
    /// - `job.after_mode`: what the job's prerequisites must have come to (`uploaded`, the default, or `settled`).
    /// - `job.blocked_by`: one job it still waits for (its lane's previous job, a prerequisite), NULL when none.
    ///   The claim indexes hold only jobs with none, so a claim never walks past a lane's waiting jobs.
    /// - `job_prerequisite`: what each job waits for (`kind` `lane` or `after`), by the job waited for too. An edge
    ///   goes when it is met; an `after` edge to a job that failed for good stays, so that retrying that job
    ///   brings the waiting one back.
    /// - `lane`: per owner and name, the next sequence number, the lane's last job and its `on_failure`.
    /// - `settled_job`: a small tombstone of each job cancelled or pruned, so that a job enqueued `after` one
    ///   that is gone is told how it ended (uploaded, cancelled) rather than refused as unknown.
    ///
    /// Frozen: plain SQL, no application types.
    static func migrateToOrder(_ db: Database) throws {
        try db.execute(sql: """
            ALTER TABLE job ADD COLUMN lane TEXT;
            ALTER TABLE job ADD COLUMN lane_seq INTEGER;
            ALTER TABLE job ADD COLUMN after_mode TEXT;
            ALTER TABLE job ADD COLUMN blocked_by TEXT;
            CREATE INDEX job_lane ON job(owner_uid, lane, lane_seq) WHERE lane IS NOT NULL;
            CREATE TABLE job_prerequisite (
                job_id TEXT NOT NULL REFERENCES job(id) ON DELETE CASCADE,
                parent_id TEXT NOT NULL,
                kind TEXT NOT NULL,
                PRIMARY KEY (job_id, parent_id, kind)
            ) WITHOUT ROWID;
            CREATE INDEX job_prerequisite_parent ON job_prerequisite(parent_id);
            CREATE TABLE lane (
                owner_uid INTEGER NOT NULL,
                name TEXT NOT NULL,
                next_seq INTEGER NOT NULL,
                last_job TEXT,
                on_failure TEXT NOT NULL,
                PRIMARY KEY (owner_uid, name)
            ) WITHOUT ROWID;
            CREATE TABLE settled_job (
                id TEXT NOT NULL PRIMARY KEY,
                owner_uid INTEGER,
                outcome TEXT NOT NULL,
                settled_at DATETIME NOT NULL
            ) WITHOUT ROWID;
            CREATE INDEX settled_job_age ON settled_job(settled_at);
            DROP INDEX job_claim;
            DROP INDEX job_claim_metered_allowed;
            DROP INDEX job_claim_metered_deferred;
            DROP INDEX job_claim_budget_exempt;
            """)
        let runnable = "state = 'pending' AND intake_complete = 1 AND cancel_requested = 0 AND blocked_by IS NULL"
        try db.execute(sql: """
            CREATE INDEX job_claim ON job(destination, priority DESC, id, size)
                WHERE \(runnable) AND metered_below IS NULL;
            CREATE INDEX job_claim_metered_allowed ON job(destination, priority DESC, id)
                WHERE \(runnable) AND metered_below > size;
            CREATE INDEX job_claim_metered_deferred ON job(destination, priority DESC, id)
                WHERE \(runnable) AND metered_below <= size;
            CREATE INDEX job_claim_budget_exempt ON job(destination, priority DESC, id)
                WHERE \(runnable) AND on_metered = 'always';
            """)
    }
}
