import Foundation
import GRDB

/// Who consumes a job's end from the outbox: the metadata patch, or a hook.
package enum OutboxConsumer: Hashable, Sendable, CustomStringConvertible {
    /// The job's metadata patch (`--patch-url`, a sidecar's `patch`).
    case patch
    /// The `[hooks]` program for this event.
    case hook(HookEvent)
    /// The patch a group's close asked for, owed on the member that completed it.
    case groupPatch

    /// The name stored in `outbox.consumer`: `patch`, `hook:uploaded`, `hook:failed`.
    package var description: String {
        switch self {
        case .patch: "patch"
        case .groupPatch: "group-patch"
        case .hook(let event): "hook:\(event.rawValue)"
        }
    }

    init?(stored: String) {
        if stored == "patch" {
            self = .patch
        } else if stored == "group-patch" {
            self = .groupPatch
        } else if stored.hasPrefix("hook:"), let event = HookEvent(rawValue: String(stored.dropFirst(5))) {
            self = .hook(event)
        } else {
            return nil
        }
    }
}

/// One thing owed for a job's end (a patch, a hook run): how often it was tried, why it last failed, when it is
/// due.
package struct OutboxEntry: Sendable, Equatable {
    package var jobID: JobID
    package var consumer: OutboxConsumer
    package var state: OutboxState
    package var attempts: Int
    package var lastError: String?
    package var nextAttemptAt: Date?
}

/// What became of one outbox attempt.
enum OutboxOutcome: Sendable, Equatable {
    case done
    case retry(error: String, at: Date)
    case failed(error: String)
    /// Not tried now (its link does not allow it): looked at again then, no attempt counted.
    case postpone(until: Date)
}

extension QueueStore {
    /// Records that `id`'s patch is owed, in the transaction that marks the job uploaded (so a crash cannot lose
    /// it); due at once. (Hooks are owed by the database's own triggers: see `migrateToOutbox`.)
    static func owePatch(_ id: JobID, now: Date, in db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO outbox (job_id, consumer, state, attempts, next_attempt_at, created_at, updated_at)
            VALUES (?, ?, ?, 0, ?, ?, ?) ON CONFLICT(job_id, consumer) DO NOTHING
            """).execute(arguments: [id.rawValue, OutboxConsumer.patch.description, OutboxState.pending.rawValue,
                                     now, now, now])
    }

    /// Makes the hooks of `hooks` the ones owed from now on (the running daemon's config): a job that ends from
    /// now on owes each a run. Writes nothing when they are already the ones recorded (a start with an unchanged
    /// config): a daemon started on a full disk then goes on to its scheduler, which explains the wait, instead
    /// of waiting here to record what is already there.
    func setHookConsumers(_ hooks: HookSettings) throws {
        let wanted = Set(HookEvent.allCases.filter { hooks.command(for: $0) != nil }
            .map { [OutboxConsumer.hook($0).description, $0.rawValue] })
        let recorded = try writer.read { db in
            Set(try Row.fetchAll(db, sql: "SELECT name, event FROM outbox_consumer")
                .map { [$0["name"] as String, $0["event"] as String] })
        }
        guard recorded != wanted else { return }
        try writer.write { db in
            try db.execute(sql: "DELETE FROM outbox_consumer")
            for row in wanted {
                try db.execute(sql: "INSERT INTO outbox_consumer (name, event) VALUES (?, ?)", arguments: [row[0], row[1]])
            }
        }
    }

    /// Pending entries of `consumers` that are due, oldest first, with their jobs. (An entry of another consumer,
    /// such as a hook taken out of the config, neither runs nor holds up the others.)
    func dueOutbox(of consumers: Set<OutboxConsumer>, now: Date = Date(), limit: Int) throws -> [(entry: OutboxEntry, job: Job)] {
        try writer.read { db in
            let names = consumers.map(\.description).sorted()
            let list = Array(repeating: "?", count: names.count).joined(separator: ",")
            // Cached: a daemon's consumers, hence this text, stay the same, and the owed work asks after each end.
            let rows = try Row.fetchAll(db.cachedStatement(sql: """
                SELECT job_id, consumer, state, attempts, last_error, next_attempt_at FROM outbox INDEXED BY outbox_due
                WHERE state = '\(OutboxState.pending.rawValue)' AND next_attempt_at <= ? AND consumer IN (\(list))
                ORDER BY next_attempt_at LIMIT ?
                """), arguments: StatementArguments([now] as [any DatabaseValueConvertible] + names + [limit]))
            return try rows.compactMap { row -> (OutboxEntry, Job)? in
                guard let entry = Self.entry(row), let job = try Job.fetchOne(db, key: entry.jobID.rawValue) else { return nil }
                return (entry, job)
            }
        }
    }

    /// When the owed-work loop has something to do next, in one read: the first pending entry of `consumers`
    /// that is not `busy` (under way, or its outcome waiting to be recorded), and the first owed release.
    func nextOwedDue(of consumers: Set<OutboxConsumer>,
                     excluding busy: [(JobID, OutboxConsumer)]) throws -> (outbox: Date?, release: Date?) {
        try writer.read { db in
            var outbox: Date?
            if !consumers.isEmpty {
                let names = consumers.map(\.description).sorted()
                let list = Array(repeating: "?", count: names.count).joined(separator: ",")
                let skip = Set(busy.map { "\($0.0.rawValue) \($0.1)" })
                // Read in due order through the index: at most one row past the busy ones.
                let rows = try Row.fetchCursor(db.cachedStatement(sql: """
                    SELECT job_id, consumer, next_attempt_at FROM outbox INDEXED BY outbox_due
                    WHERE state = '\(OutboxState.pending.rawValue)' AND consumer IN (\(list))
                    ORDER BY next_attempt_at LIMIT ?
                    """), arguments: StatementArguments(names) + [skip.count + 1])
                while let row = try rows.next() {
                    guard !skip.contains("\(row["job_id"] as String) \(row["consumer"] as String)") else { continue }
                    outbox = row["next_attempt_at"]
                    break
                }
            }
            let release = try Date.fetchOne(db.cachedStatement(sql: "SELECT MIN(due_at) FROM file_release"))
            return (outbox, release)
        }
    }

    /// Records an attempt's outcome on the entry (and, for a patch, on the job's `patch_state`), in one
    /// transaction.
    func finishOutbox(_ id: JobID, _ consumer: OutboxConsumer, outcome: OutboxOutcome, now: Date = Date()) throws {
        try writer.write { db in
            let state: OutboxState
            let error: String?
            let next: Date
            switch outcome {
            case .postpone(let until):
                try db.execute(sql: """
                    UPDATE outbox SET next_attempt_at = ?, updated_at = ? WHERE job_id = ? AND consumer = ?
                    """, arguments: [until, now, id.rawValue, consumer.description])
                return
            case .done: (state, error, next) = (.done, nil, now)
            case .retry(let message, let at): (state, error, next) = (.pending, message, at)
            case .failed(let message): (state, error, next) = (.failed, message, now)
            }
            try db.execute(sql: """
                UPDATE outbox SET state = ?, attempts = attempts + 1, last_error = ?, next_attempt_at = ?, updated_at = ?
                WHERE job_id = ? AND consumer = ?
                """, arguments: [state.rawValue, error, next, now, id.rawValue, consumer.description])
            if consumer == .patch {
                try db.execute(sql: "UPDATE job SET patch_state = ?, updated_at = ? WHERE id = ?",
                               arguments: [state.rawValue, now, id.rawValue])
            }
        }
    }

    /// Everything owed for a job, patch first.
    package func outboxEntries(_ id: JobID) throws -> [OutboxEntry] {
        try writer.read { db in try outboxEntries(id, in: db) }
    }

    func outboxEntries(_ id: JobID, in db: Database) throws -> [OutboxEntry] {
        try Row.fetchAll(db, sql: """
            SELECT job_id, consumer, state, attempts, last_error, next_attempt_at FROM outbox WHERE job_id = ?
            ORDER BY consumer = ? DESC, consumer
            """, arguments: [id.rawValue, OutboxConsumer.patch.description]).compactMap(Self.entry)
    }

    /// Entries per consumer and state, for `status` (from `outbox_tally`: no walk of the outbox).
    package func outboxCounts() throws -> [OutboxConsumer: [OutboxState: Int]] {
        try writer.read { db in
            var counts: [OutboxConsumer: [OutboxState: Int]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT consumer, state, entries AS n FROM outbox_tally WHERE entries != 0") {
                guard let consumer = OutboxConsumer(stored: row["consumer"]),
                      let state = OutboxState(rawValue: row["state"]) else { continue }
                counts[consumer, default: [:]][state] = row["n"]
            }
            return counts
        }
    }

    /// The patch owed for a job, if it has one.
    package func patchRecord(_ id: JobID) throws -> PatchRecord? {
        try outboxEntries(id).first { $0.consumer == .patch }.map {
            PatchRecord(jobID: id, attempts: $0.attempts, lastError: $0.lastError, nextAttemptAt: $0.nextAttemptAt)
        }
    }

    /// Makes a job's failed patch and hooks pending and due now (`uploadq retry` of a job that ended); whether any
    /// was.
    func retryOutbox(_ id: JobID, now: Date = Date()) throws -> Bool {
        try writer.write { db in
            try db.execute(sql: """
                UPDATE outbox SET state = ?, attempts = 0, next_attempt_at = ?, updated_at = ? WHERE job_id = ? AND state = ?
                """, arguments: [OutboxState.pending.rawValue, now, now, id.rawValue, OutboxState.failed.rawValue])
            let changed = db.changesCount > 0
            try db.execute(sql: "UPDATE job SET patch_state = ? WHERE id = ? AND patch_state = ?",
                           arguments: [PatchState.pending.rawValue, id.rawValue, PatchState.failed.rawValue])
            return changed
        }
    }

    private static func entry(_ row: Row) -> OutboxEntry? {
        guard let id = JobID(row["job_id"] as String), let consumer = OutboxConsumer(stored: row["consumer"]),
              let state = OutboxState(rawValue: row["state"]) else { return nil }
        return OutboxEntry(jobID: id, consumer: consumer, state: state, attempts: row["attempts"],
                           lastError: row["last_error"], nextAttemptAt: state == .pending ? row["next_attempt_at"] : nil)
    }

    /// Uploaded jobs whose completion the library host has not acknowledged, oldest first.
    func unacknowledgedCompletions() throws -> [Job] {
        try writer.read { db in
            try Job.fetchAll(db, sql: """
                SELECT * FROM job INDEXED BY job_uploaded WHERE state = 'uploaded'
                AND id NOT IN (SELECT job_id FROM completion_ack) ORDER BY updated_at, id
                """)
        }
    }

    func isAcknowledged(_ id: JobID) throws -> Bool {
        try writer.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM completion_ack WHERE job_id = ?", arguments: [id.rawValue]) ?? false
        }
    }

    /// Records that the host has handled a job's completion: it is not delivered again.
    func acknowledge(_ id: JobID, now: Date = Date()) throws {
        try writer.write { db in
            try db.execute(sql: "INSERT INTO completion_ack (job_id, acknowledged_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                           arguments: [id.rawValue, now])
        }
    }
}
