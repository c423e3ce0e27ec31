import Foundation
import GRDB
import GRDBSQLite

/// One file in the queue: where it is, where it goes, how far it got and why it waits or failed.
///
/// The stored row is the whole truth about a job; the JSON of `uploadq list --json`/`show --json` is made from it.
public struct Job: Sendable, Equatable, Codable {
    public internal(set) var id: JobID
    public internal(set) var state: JobState
    public internal(set) var waitingReason: WaitingReason?
    /// Everything that keeps a pending job from starting, the strongest first (`waitingReason` is the first), with
    /// when each is expected to clear where that is known. Derived when the job is read, never stored.
    public internal(set) var waitingHolds: [WaitingHold] = []
    /// For a failed job: true when only a person can make it go (`uploadq retry`).
    public internal(set) var permanent: Bool
    public internal(set) var attempts: Int
    /// Failures since the last success; picks the next retry delay.
    public internal(set) var failures: Int
    public internal(set) var nextAttemptAt: Date?
    public internal(set) var lastError: String?
    /// The file the uploader reads: the queue's own copy under `blobs/`, or the original for `reference` jobs.
    public internal(set) var file: String
    /// Where the file was found (spool entry, CLI argument or library call).
    public internal(set) var sourcePath: String
    public internal(set) var originalName: String
    public internal(set) var mode: IntakeMode
    public internal(set) var size: Int64
    /// The lowercase hex SHA-256 of the content; empty until the upload for a destination that hashes while
    /// sending (`sha256 = "while-sending"`), then the digest of the bytes that were sent.
    public internal(set) var sha256: String
    public internal(set) var contentType: String
    /// Modification time of the file at intake, in nanoseconds since 1970: a `reference` file must keep it.
    public internal(set) var modifiedNanoseconds: Int64
    public internal(set) var inode: Int64
    public internal(set) var device: Int64
    public internal(set) var destination: String
    /// Higher runs sooner; equal priorities run oldest first.
    public internal(set) var priority: Int
    public internal(set) var remoteURL: String?
    /// Bytes the destination has confirmed (after a chunk is durable there).
    public internal(set) var bytesConfirmed: Int64
    public internal(set) var rateBytesPerSecond: Int64
    public internal(set) var meta: [String: String]
    public internal(set) var patch: PatchTarget?
    public internal(set) var patchState: PatchState
    /// The job's own metered-link policy (`defer`, `allow`, `allow-below:SIZE`), overriding its destination's.
    public internal(set) var onMetered: String? {
        didSet { meteredBelow = onMetered.flatMap(MeteredPolicy.init)?.sizeLimit }
    }
    /// `onMetered` as the number the claim compares in SQL (`MeteredPolicy.sizeLimit`); nil follows the destination.
    var meteredBelow: Int64? = nil
    /// For a `reference` job: what becomes of the file after the upload (`keep`, `delete`, `move:DIR`), when the
    /// job says; nil follows its destination's `source_after_upload`.
    public internal(set) var sourceAfterUpload: String? = nil
    /// The uploader's own resume record (JSON), persisted before bytes move and after each confirmed chunk.
    public internal(set) var resumeState: String?
    /// False between the commit of a `move` job and the rename of its file into `blobs/`.
    public internal(set) var intakeComplete: Bool
    public internal(set) var cancelRequested: Bool
    public internal(set) var createdAt: Date
    public internal(set) var updatedAt: Date
    /// Who handed the job over when it was not the queue's own user (nil): a spool file's owner, a control API
    /// client. That user sees and steers its own jobs alone.
    public internal(set) var ownerUID: UInt32? = nil
    /// The lane the job goes in: strictly after the lane's earlier jobs, one at a time (`enqueue --lane`); nil: no
    /// order of its own. A lane is its owner's: another user's lane of the same name is another lane.
    public internal(set) var lane: String? = nil
    /// The job's place in its lane, given in the transaction that enqueued it.
    public internal(set) var laneSequence: Int64? = nil
    /// What the jobs it was enqueued `after` must come to before it starts: nil or `.uploaded`, all of them
    /// uploaded; `.settled`, each uploaded, failed for good or cancelled.
    public internal(set) var afterMode: AfterMode? = nil
    /// A job this one still waits for (its lane's previous job, or one it was enqueued `after`); nil: none.
    public internal(set) var blockedBy: JobID? = nil
    /// How it waits for `blockedBy` (nil in a row from before v16: then as its lane's, when it has one). Written by
    /// the order alone (`blocked_kind`), never by an insert or a state change.
    var blockedKind: PrerequisiteKind? = nil
    /// The group the job is a member of (`enqueue --group`): once the group is closed and every member uploaded,
    /// one completion carries them all. nil: none. A group is its owner's, as a lane is.
    public internal(set) var group: String? = nil
    /// The permission bits a copy of the file keeps, in the daemon's own group (`FileFingerprint.modeKept`), as
    /// intake found them: what a `file` destination delivers it with. nil in a row from before they were recorded.
    var sourceMode: UInt32? = nil
    /// The turn the job took among its owner's and the others' at its priority (`FairShare`), given at enqueue
    /// (nil only in a row no intake wrote; such rows go first among their priority, oldest first).
    var fairKey: Int64? = nil

    /// The state-machine view of this job.
    var lifecycle: JobLifecycle {
        get {
            JobLifecycle(state: state, waitingReason: waitingReason, permanent: permanent, attempts: attempts,
                         failures: failures, nextAttemptAt: nextAttemptAt, lastError: lastError)
        }
        set {
            state = newValue.state
            waitingReason = newValue.waitingReason
            permanent = newValue.permanent
            attempts = newValue.attempts
            failures = newValue.failures
            nextAttemptAt = newValue.nextAttemptAt
            lastError = newValue.lastError
        }
    }

    /// This job with the columns a state change may write (`QueueStore.apply`) taken from `other`: the state
    /// machine's, progress and outcome (with the SHA-256 of a job hashed while sending), cancel and intake flags,
    /// patch state and update time.
    func withChangeableColumns(of other: Job) -> Job {
        var job = self
        job.lifecycle = other.lifecycle
        job.rateBytesPerSecond = other.rateBytesPerSecond
        job.remoteURL = other.remoteURL
        job.sha256 = other.sha256
        job.bytesConfirmed = other.bytesConfirmed
        job.cancelRequested = other.cancelRequested
        job.intakeComplete = other.intakeComplete
        job.patchState = other.patchState
        job.updatedAt = other.updatedAt
        return job
    }

    public enum CodingKeys: String, CodingKey, ColumnExpression, CaseIterable {
        case id, state
        case waitingReason = "waiting_reason"
        case permanent, attempts, failures
        case nextAttemptAt = "next_attempt_at"
        case lastError = "last_error"
        case file
        case sourcePath = "source_path"
        case originalName = "original_name"
        case mode, size, sha256
        case contentType = "content_type"
        case modifiedNanoseconds = "mtime_ns"
        case inode, device, destination, priority
        case remoteURL = "remote_url"
        case bytesConfirmed = "bytes_confirmed"
        case rateBytesPerSecond = "rate_bytes_per_s"
        case meta, patch
        case patchState = "patch_state"
        case onMetered = "on_metered"
        case meteredBelow = "metered_below"
        case sourceAfterUpload = "source_after_upload"
        case resumeState = "resume_state"
        case intakeComplete = "intake_complete"
        case cancelRequested = "cancel_requested"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
        case ownerUID = "owner_uid"
        case lane
        case laneSequence = "lane_seq"
        case afterMode = "after_mode"
        case blockedBy = "blocked_by"
        case group = "group_name"
        case fairKey = "fair_key"
        case sourceMode = "source_mode"
    }
}

extension Job: FetchableRecord, PersistableRecord {
    public static let databaseTableName = "job"
    public typealias Columns = CodingKeys

    /// Reads a stored row column by column: what every claim and every transfer end decodes, where the generic
    /// `Decodable` path cost more than the SQL around it (a profile of 5,000 small files put it at a quarter of
    /// the scheduler's time). Writes still go through `Encodable`; a test checks both ways agree.
    public init(row: Row) throws {
        func stored(_ name: String) -> DatabaseValue? {
            // (`row[name] as DatabaseValue?` is nil for NULL too.)
            row.hasColumn(name) ? row[name] as DatabaseValue : nil
        }
        try self.init(stored: { stored($0.rawValue) }, blockedKind: stored(Self.blockedKindColumn))
    }

    /// The job's columns in the order `read(_:in:)` reads them by position: what it selects in place of `*`,
    /// whose order is the table's, which its migrations decide.
    static let selection = (Columns.allCases.map(\.rawValue) + [blockedKindColumn]).map { "job.\"\($0)\"" }
        .joined(separator: ", ")
    private static let byID = "SELECT \(selection) FROM job WHERE id = ?"
    /// `job.blocked_kind`, which only the order writes (`QueueStore.settleOrder`), last in `selection`.
    private static let blockedKindColumn = "blocked_kind"
    /// Each column's place in `selection`, by the order of `Columns.allCases`.
    private static let selectedPositions = Dictionary(uniqueKeysWithValues: Columns.allCases.enumerated().map {
        ($0.element, CInt($0.offset))
    })

    /// The job of `id`, read by position (`selection`) straight from SQLite's statement, where `fetchOne(_:key:)`
    /// reads `*` by name: GRDB's row lowercases each of 41 names, and its cursor makes a dictionary of them. The
    /// claim and the end of every transfer read a job: that was a tenth of the scheduler's time.
    static func read(_ id: JobID, in db: Database) throws -> Job? {
        let statement = try db.cachedStatement(sql: byID)
        try statement.setArguments([id.rawValue])
        // Stepped here, GRDB's checks around a statement (an aborted transaction, its cancel, the regions a
        // `ValueObservation` tracks) do not run: none applies to this read of one row, within the caller's
        // transaction. The statement stays cached, and is reset whatever happens.
        let sqlite = statement.sqliteStatement
        defer { sqlite3_reset(sqlite) }
        switch sqlite3_step(sqlite) {
        case SQLITE_ROW:
            return try Job(stored: { column in
                selectedPositions[column].map { DatabaseValue(sqliteStatement: sqlite, index: $0) }
            }, blockedKind: DatabaseValue(sqliteStatement: sqlite, index: CInt(Columns.allCases.count)))
        case SQLITE_DONE:
            return nil
        default:
            // GRDB's own read says what went wrong, with the statement and its arguments.
            sqlite3_reset(sqlite)
            return try Row.fetchOne(db, sql: byID, arguments: [id.rawValue]).map(Job.init(row:))
        }
    }

    /// A job from its stored values: `read(column)` gives a column's (nil: the row lacks it), `blockedKind` that
    /// of `blocked_kind`. Each goes through `DatabaseValue`, which checks the stored type (GRDB's faster path
    /// reads text `'x'` as the integer 0, and an owner's uid must never come out of a damaged row).
    private init(stored read: (Columns) -> DatabaseValue?, blockedKind storedKind: DatabaseValue?) throws {
        let storedID = read(.id).flatMap(String.fromDatabaseValue)
        /// A column's value; one of the wrong type is a bad row (`badColumn`), and so is a column the row lacks,
        /// unless the value is optional (nil, as GRDB reads a missing column).
        func decoded<Value: DatabaseValueConvertible>(_ column: Columns, as type: Value.Type = Value.self) throws
            -> Value
        {
            guard let stored = read(column) else {
                guard let missing = Value.fromMissingColumn() else { throw Self.missingColumn(column, id: storedID) }
                return missing
            }
            guard let decoded = Value.fromDatabaseValue(stored) else { throw Self.badColumn(column, id: storedID) }
            return decoded
        }
        func text(_ column: Columns) throws -> String {
            try decoded(column)
        }
        func value<Value: RawRepresentable<String>>(_ column: Columns, as: Value.Type) throws -> Value {
            guard let value = Value(rawValue: try text(column)) else { throw Self.badColumn(column, id: storedID) }
            return value
        }
        func json<Value: Decodable>(_ column: Columns, as type: Value.Type) throws -> Value? {
            guard let stored = try decoded(column, as: String?.self) else { return nil }
            do {
                return try JSONDecoder().decode(type, from: Data(stored.utf8))
            } catch {
                throw Self.badColumn(column, id: storedID)
            }
        }
        id = JobID(trusted: try text(.id))
        state = try value(.state, as: JobState.self)
        waitingReason = try decoded(.waitingReason, as: String?.self).map { stored in
            guard let reason = WaitingReason(rawValue: stored) else { throw Self.badColumn(.waitingReason, id: storedID) }
            return reason
        }
        permanent = try decoded(.permanent)
        attempts = try decoded(.attempts)
        failures = try decoded(.failures)
        nextAttemptAt = try decoded(.nextAttemptAt)
        lastError = try decoded(.lastError)
        file = try text(.file)
        sourcePath = try text(.sourcePath)
        originalName = try text(.originalName)
        mode = try value(.mode, as: IntakeMode.self)
        size = try decoded(.size)
        sha256 = try text(.sha256)
        contentType = try text(.contentType)
        modifiedNanoseconds = try decoded(.modifiedNanoseconds)
        inode = try decoded(.inode)
        device = try decoded(.device)
        destination = try text(.destination)
        priority = try decoded(.priority)
        remoteURL = try decoded(.remoteURL)
        bytesConfirmed = try decoded(.bytesConfirmed)
        rateBytesPerSecond = try decoded(.rateBytesPerSecond)
        // Most jobs carry no metadata: the empty object is not worth a JSON decoder.
        let storedMeta = try text(.meta)
        meta = storedMeta == "{}" ? [:] : try json(.meta, as: [String: String].self) ?? [:]
        patch = try json(.patch, as: PatchTarget.self)
        patchState = try value(.patchState, as: PatchState.self)
        onMetered = try decoded(.onMetered)
        meteredBelow = try decoded(.meteredBelow)
        sourceAfterUpload = try decoded(.sourceAfterUpload)
        resumeState = try decoded(.resumeState)
        intakeComplete = try decoded(.intakeComplete)
        cancelRequested = try decoded(.cancelRequested)
        createdAt = try decoded(.createdAt)
        updatedAt = try decoded(.updatedAt)
        ownerUID = try decoded(.ownerUID, as: Int64?.self).map { stored in
            // A value no uid can have is a damaged row, never another user's job.
            guard let uid = UInt32(exactly: stored) else { throw Self.badColumn(.ownerUID, id: storedID) }
            return uid
        }
        lane = try decoded(.lane)
        laneSequence = try decoded(.laneSequence)
        afterMode = try decoded(.afterMode, as: String?.self).map { stored in
            guard let mode = AfterMode(rawValue: stored) else { throw Self.badColumn(.afterMode, id: storedID) }
            return mode
        }
        blockedBy = try decoded(.blockedBy, as: String?.self).map(JobID.init(trusted:))
        blockedKind = storedKind.flatMap(String.fromDatabaseValue).flatMap(PrerequisiteKind.init(rawValue:))
        group = try decoded(.group)
        fairKey = try decoded(.fairKey, as: Int64?.self)
        sourceMode = try decoded(.sourceMode, as: Int64?.self).flatMap { UInt32(exactly: $0) }.map { $0 & 0o777 }
    }

    /// The error for a stored value this version cannot read (a newer version's state, a damaged row).
    private static func badColumn(_ column: Columns, id: String?) -> DatabaseError {
        DatabaseError(resultCode: .SQLITE_MISMATCH, message: """
            job \(id ?? "?"): column \(column.rawValue) holds a value \
            this version cannot read (a newer version's, or a damaged row); run the version of uploadq that wrote it
            """)
    }

    /// The error for a row that lacks one of the job's columns (a query that selected part of them).
    private static func missingColumn(_ column: Columns, id: String?) -> DatabaseError {
        DatabaseError(resultCode: .SQLITE_ERROR, message: "job \(id ?? "?"): the row read has no column \(column.rawValue) "
            + "(a query that selects only some of the job's columns)")
    }
}

extension Job {
    /// What the jobs a job was enqueued `after` must come to before it starts.
    public enum AfterMode: String, Sendable, Codable, CaseIterable {
        /// Each of them uploaded; one that fails for good or is cancelled fails the job (`prerequisite-failed`,
        /// `prerequisite-cancelled`), which comes back when that one is retried.
        case uploaded
        /// Each of them uploaded, failed for good or cancelled: the job runs whatever they came to.
        case settled
    }
}

extension Job {
    /// One try at uploading a job: when, from which offset, how far, and how it ended.
    public struct Attempt: Sendable, Equatable, Codable, FetchableRecord, PersistableRecord {
        public static let databaseTableName = "job_attempt"

        public internal(set) var jobID: JobID
        public internal(set) var number: Int
        public internal(set) var startedAt: Date
        public internal(set) var endedAt: Date?
        /// The offset the transfer resumed from (0 for a fresh start).
        public internal(set) var startOffset: Int64
        public internal(set) var endOffset: Int64?
        /// `uploaded`, `failed`, `interrupted` or `cancelled`; nil while running.
        public internal(set) var outcome: String?
        public internal(set) var error: String?

        public enum CodingKeys: String, CodingKey, ColumnExpression {
            case jobID = "job_id"
            case number
            case startedAt = "started_at"
            case endedAt = "ended_at"
            case startOffset = "start_offset"
            case endOffset = "end_offset"
            case outcome, error
        }
        public typealias Columns = CodingKeys
    }
}
