import Foundation
import GRDB

/// The queue's SQLite database: connection settings and the frozen, numbered migrations.
///
/// Migrations are never edited once released; a change of schema is a new numbered migration.
package struct QueueDatabase: Sendable {
    let writer: any DatabaseWriter

    /// Opens (creating if needed) the database file with WAL, `synchronous=FULL` and a busy timeout.
    ///
    /// Processes that create a new queue at the same moment (a daemon starting while a CLI enqueues) contend for
    /// switching it to WAL and for its first migration; the loser backs off briefly and opens it again.
    package static func open(path: String) throws -> QueueDatabase {
        BlockingCheck.check("opening the queue's database")
        var attempt = 0
        while true {
            do {
                return try openOnce(path: path)
            } catch {
                attempt += 1
                guard attempt < 8, isCreationContention(error) else { throw error }
                Thread.sleep(forTimeInterval: 0.02 * Double(attempt))
            }
        }
    }

    private static func isCreationContention(_ error: any Error) -> Bool {
        guard let error = error as? DatabaseError else { return false }
        let message = error.message ?? ""
        return error.resultCode == .SQLITE_BUSY || error.resultCode == .SQLITE_LOCKED
            || ["already exists", "duplicate column name", "no such index", "no such trigger"].contains {
                message.contains($0)
            }
    }

    /// True for the database's way of saying the disk is full: `SQLITE_FULL`; or, given `path` (the database
    /// file), an I/O or open error while its file system has next to no room left (opening a queue on a full disk
    /// fails creating its WAL index with a plain `SQLITE_IOERR`). An I/O error with room left is a failing disk,
    /// not a full one.
    static func isDiskFull(_ error: any Error, at path: String? = nil) -> Bool {
        guard let error = error as? DatabaseError else { return false }
        if error.resultCode == .SQLITE_FULL { return true }
        guard let path, error.resultCode == .SQLITE_IOERR || error.resultCode == .SQLITE_CANTOPEN,
              let space = DiskSpace.of(path: (path as NSString).deletingLastPathComponent) else { return false }
        return space.available < 256 << 10
    }

    private static func openOnce(path: String) throws -> QueueDatabase {
        if !FileManager.default.fileExists(atPath: path) {
            let fd = Glibc.open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            if fd >= 0 { Glibc.close(fd) }
            // A new queue gives freed pages back from its first page on: set before the header is written, the
            // setting needs no `VACUUM` later (which, on a queue filled before the daemon first ran, rewrote the
            // whole file at its start).
            let creating = try DatabaseQueue(path: path)
            try creating.writeWithoutTransaction { db in
                if try Int.fetchOne(db, sql: "PRAGMA page_count") == 0 {
                    try db.execute(sql: "PRAGMA auto_vacuum = INCREMENTAL")
                    try db.execute(sql: "PRAGMA journal_mode = WAL")
                }
            }
            try creating.close()
        }
        var configuration = GRDB.Configuration()
        configuration.busyMode = .timeout(5)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(sql: "PRAGMA foreign_keys = ON")
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        // GRDB switches the writer to `synchronous = NORMAL` when it turns WAL on, after `prepareDatabase`:
        // NORMAL may lose the last commits on power loss, and an accepted job must survive that.
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        let database = QueueDatabase(writer: pool)
        try database.migrate(lockPath: path + "-migrate.lock")
        return database
    }

    /// Lets the database give pruned pages back to the file system in small steps (`PRAGMA incremental_vacuum`)
    /// instead of growing for ever. The setting only takes effect through a `VACUUM` once the file has its header
    /// (switching to WAL writes it), so it is done once here: instant on a new database, once on an older one. If
    /// it fails (a full disk, a busy queue), the next start tries again and the queue works as before. Only the
    /// runner does it (it holds the daemon lock), never a CLI command: a `VACUUM` rewrites the whole file.
    func enableIncrementalVacuum() throws {
        BlockingCheck.check("a vacuum of the queue's database")
        try writer.writeWithoutTransaction { db in
            guard try Int.fetchOne(db, sql: "PRAGMA auto_vacuum") != 2 else { return }
            try db.execute(sql: "PRAGMA auto_vacuum = INCREMENTAL")
            try db.execute(sql: "VACUUM")
            try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }

    /// An in-memory database for unit tests.
    static func inMemory() throws -> QueueDatabase {
        var configuration = GRDB.Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA foreign_keys = ON") }
        let database = QueueDatabase(writer: try DatabaseQueue(configuration: configuration))
        try database.migrate()
        return database
    }

    /// Applies the migrations not applied yet. Given `lockPath` (a file beside the database), processes that open
    /// a queue still being migrated take turns under an exclusive `flock` on it: each would otherwise apply the
    /// migrations it read as missing, and drop an index that another had just dropped. A queue whose migrations
    /// are all applied is opened without the lock (and without creating its file).
    private func migrate(lockPath: String? = nil) throws {
        if let lockPath, try !writer.read({ try Self.migrator.hasCompletedMigrations($0) }) {
            let descriptor = Glibc.open(lockPath, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
            // Without the lock (a state directory this process cannot write), the race is retried by `open`.
            if descriptor >= 0 {
                defer { Glibc.close(descriptor) }
                while flock(descriptor, LOCK_EX) != 0 && errno == EINTR {}
                try Self.migrator.migrate(writer)
                return
            }
        }
        try Self.migrator.migrate(writer)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "job") { t in
                t.primaryKey("id", .text)
                t.column("state", .text).notNull()
                t.column("waiting_reason", .text)
                t.column("permanent", .boolean).notNull().defaults(to: false)
                t.column("attempts", .integer).notNull().defaults(to: 0)
                t.column("failures", .integer).notNull().defaults(to: 0)
                t.column("next_attempt_at", .datetime)
                t.column("last_error", .text)
                t.column("file", .text).notNull()
                t.column("source_path", .text).notNull()
                t.column("original_name", .text).notNull()
                t.column("mode", .text).notNull()
                t.column("size", .integer).notNull()
                t.column("sha256", .text).notNull()
                t.column("content_type", .text).notNull()
                t.column("mtime_ns", .integer).notNull()
                t.column("inode", .integer).notNull()
                t.column("device", .integer).notNull()
                t.column("destination", .text).notNull()
                t.column("priority", .integer).notNull().defaults(to: 0)
                t.column("remote_url", .text)
                t.column("bytes_confirmed", .integer).notNull().defaults(to: 0)
                t.column("rate_bytes_per_s", .integer).notNull().defaults(to: 0)
                t.column("meta", .text).notNull()
                t.column("patch", .text)
                t.column("patch_state", .text).notNull().defaults(to: "none")
                t.column("on_metered", .text)
                t.column("resume_state", .text)
                t.column("intake_complete", .boolean).notNull()
                t.column("cancel_requested", .boolean).notNull().defaults(to: false)
                t.column("created_at", .datetime).notNull()
                t.column("updated_at", .datetime).notNull()
            }
            // "Next runnable job": state first, then due time, then priority and age.
            try db.create(index: "job_runnable", on: "job", columns: ["state", "next_attempt_at", "priority", "id"])
            try db.create(index: "job_content", on: "job", columns: ["destination", "sha256"])
            try db.create(table: "job_attempt") { t in
                t.column("job_id", .text).notNull().references("job", onDelete: .cascade)
                t.column("number", .integer).notNull()
                t.column("started_at", .datetime).notNull()
                t.column("ended_at", .datetime)
                t.column("start_offset", .integer).notNull()
                t.column("end_offset", .integer)
                t.column("outcome", .text)
                t.column("error", .text)
                t.primaryKey(["job_id", "number"])
            }
            try db.create(table: "setting") { t in
                t.primaryKey("key", .text)
                t.column("value", .text).notNull()
            }
        }
        migrator.registerMigration("v2-traffic") { db in
            try db.create(table: "traffic") { t in
                t.column("destination", .text).notNull()
                t.column("link_class", .text).notNull()
                t.column("bytes", .integer).notNull().defaults(to: 0)
                t.primaryKey(["destination", "link_class"])
            }
        }
        migrator.registerMigration("v3-outbox") { db in
            // One row per uploaded job with a patch target, written in the transaction that marks it uploaded.
            try db.create(table: "patch_outbox") { t in
                t.primaryKey("job_id", .text).references("job", onDelete: .cascade)
                t.column("attempts", .integer).notNull().defaults(to: 0)
                t.column("last_error", .text)
                t.column("next_attempt_at", .datetime).notNull()
                t.column("created_at", .datetime).notNull()
                t.column("updated_at", .datetime).notNull()
            }
            try db.create(table: "completion_ack") { t in
                t.primaryKey("job_id", .text).references("job", onDelete: .cascade)
                t.column("acknowledged_at", .datetime).notNull()
            }
            // Jobs uploaded before completions existed are history, not news for the first subscriber.
            try db.execute(sql: """
                INSERT INTO completion_ack (job_id, acknowledged_at) SELECT id, updated_at FROM job WHERE state = 'uploaded'
                """)
        }
        migrator.registerMigration("v4-summary-indexes") { db in
            // `status` on 100,000 jobs: counts and sums come from these covering indexes, not from the wide rows.
            try db.create(index: "job_summary", on: "job",
                          columns: ["state", "waiting_reason", "permanent", "patch_state", "destination", "size"])
            try db.create(index: "job_patch_state", on: "job", columns: ["patch_state"])
        }
        migrator.registerMigration("v5-retention") { db in
            // Releases owed: the queue's copy of an uploaded file, to delete or archive once due. A row stands on
            // its own (no reference to the job), so pruning a job's history can never strand its file.
            try db.create(table: "file_release") { t in
                t.primaryKey("job_id", .text)
                t.column("action", .text).notNull()
                t.column("path", .text).notNull()
                t.column("target", .text)
                t.column("due_at", .datetime).notNull()
                t.column("attempts", .integer).notNull().defaults(to: 0)
                t.column("last_error", .text)
                t.column("created_at", .datetime).notNull()
            }
            try db.create(index: "file_release_due", on: "file_release", columns: ["due_at"])
            // Copies uploaded before retention existed: released by the configured policy on the first look.
            try db.execute(sql: """
                INSERT INTO file_release (job_id, action, path, due_at, created_at)
                SELECT id, 'policy', file, updated_at, updated_at FROM job WHERE state = 'uploaded' AND mode != 'reference'
                """)
            // History is pruned by age among uploaded jobs.
            try db.create(index: "job_finished", on: "job", columns: ["state", "updated_at"])
        }
        migrator.registerMigration("v6-source-after-upload") { db in
            // A reference job's own choice of what becomes of its file after the upload.
            try db.alter(table: "job") { t in t.add(column: "source_after_upload", .text) }
            // A release of the caller's own file names the file that was enqueued: another one is left alone.
            try db.alter(table: "file_release") { t in
                t.add(column: "source_inode", .integer)
                t.add(column: "source_device", .integer)
                t.add(column: "source_size", .integer)
                t.add(column: "source_mtime_ns", .integer)
            }
        }
        migrator.registerMigration("v7-scale") { db in
            try QueueDatabase.migrateToScale(db)
        }
        migrator.registerMigration("v8-lean-indexes") { db in
            try QueueDatabase.migrateToLeanIndexes(db)
        }
        migrator.registerMigration("v9-identity-index") { db in
            // De-duplication looks jobs up by destination and size first (a job hashed while sending has no
            // digest yet), then by digest: one index serves both.
            try db.execute(sql: "DROP INDEX IF EXISTS job_content")
            try db.execute(sql: "CREATE INDEX job_identity ON job(destination, size, sha256)")
        }
        migrator.registerMigration("v10-request-limits") { db in
            // What each destination's server (or a proxy in front of it) taught with a 413: one row per
            // destination, whatever the number of files.
            try db.create(table: "request_limit") { t in
                t.primaryKey("destination", .text)
                t.column("chunk_cap", .integer)
                t.column("chunk_cap_learnt_at", .datetime)
                t.column("refused_at", .integer)
                t.column("refusal_learnt_at", .datetime)
            }
        }
        migrator.registerMigration("v11-device-constraints") { db in
            try QueueDatabase.migrateToDeviceConstraints(db)
        }
        migrator.registerMigration("v12-outbox") { db in
            try QueueDatabase.migrateToOutbox(db)
        }
        migrator.registerMigration("v13-control") { db in
            // Who handed a job over, when it was not the queue's own user: a spool file's owner, a control API
            // client's uid. Such a user sees and steers its own jobs alone.
            try db.execute(sql: "ALTER TABLE job ADD COLUMN owner_uid INTEGER")
            // Their jobs, for their listings and long polls; the queue's own user's (no owner) are not indexed.
            try db.execute(sql: "CREATE INDEX job_owner ON job(owner_uid, id) WHERE owner_uid IS NOT NULL")
            // What each such user acknowledged of its own completions (the queue's own user's are completion_ack).
            try db.execute(sql: """
                CREATE TABLE owner_ack (
                    job_id TEXT NOT NULL PRIMARY KEY REFERENCES job(id) ON DELETE CASCADE,
                    owner_uid INTEGER NOT NULL,
                    acknowledged_at DATETIME NOT NULL
                ) WITHOUT ROWID
                """)
            // A client's Idempotency-Key: the same key from the same user names the same job, also once the job
            // was cancelled or pruned (no foreign key: the key outlives its job). Pruning the history removes keys
            // older than its cutoff whose job is gone, so the table is bounded as the history is.
            try db.execute(sql: """
                CREATE TABLE idempotency_key (
                    owner_uid INTEGER NOT NULL,
                    key TEXT NOT NULL,
                    job_id TEXT NOT NULL,
                    created_at DATETIME NOT NULL,
                    PRIMARY KEY (owner_uid, key)
                ) WITHOUT ROWID
                """)
            try db.execute(sql: "CREATE INDEX idempotency_key_job ON idempotency_key(job_id)")
        }
        migrator.registerMigration("v14-event-log") { db in
            try QueueDatabase.migrateToEventLog(db)
        }
        migrator.registerMigration("v15-order") { db in
            try QueueDatabase.migrateToOrder(db)
        }
        migrator.registerMigration("v16-groups") { db in
            try QueueDatabase.migrateToGroups(db)
        }
        migrator.registerMigration("v17-claim-ahead") { db in
            try QueueDatabase.migrateToClaimAhead(db)
        }
        migrator.registerMigration("v18-fewer-writes") { db in
            try QueueDatabase.migrateToFewerWrites(db)
        }
        migrator.registerMigration("v19-fair-share") { db in
            try QueueDatabase.migrateToFairShare(db)
        }
        migrator.registerMigration("v20-owner-bounds") { db in
            try QueueDatabase.migrateToOwnerBounds(db)
        }
        migrator.registerMigration("v21-owner-events") { db in
            try QueueDatabase.migrateToOwnerEvents(db)
        }
        return migrator
    }
}
