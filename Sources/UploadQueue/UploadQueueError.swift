import Foundation

/// An error from the queue, with what went wrong, where (job, path) and what to do next.
///
/// `code` is stable and safe to use as a metric label or to branch on; `message` is for people.
public struct UploadQueueError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable error category, spelled as in the CLI's messages and the control API's `error.code`.
    ///
    /// A struct, not an enum: a later version adds codes without breaking a `switch` (which needs a `default`), as
    /// GRDB's `ResultCode` does; a code from a newer daemon arrives through `UploadQueueClient` as it is spelled.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String

        public init(rawValue: String) { self.rawValue = rawValue }

        public var description: String { rawValue }

        public static let jobNotFound = Code(rawValue: "job-not-found")
        public static let invalidTransition = Code(rawValue: "invalid-transition")
        public static let fileNotFound = Code(rawValue: "file-not-found")
        public static let notRegularFile = Code(rawValue: "not-regular-file")
        public static let symbolicLink = Code(rawValue: "symbolic-link")
        public static let sourceChanged = Code(rawValue: "source-changed")
        public static let sourceUnstable = Code(rawValue: "source-unstable")
        public static let unknownDestination = Code(rawValue: "unknown-destination")
        public static let io = Code(rawValue: "io")
        public static let configuration = Code(rawValue: "configuration")
        public static let daemonAlreadyRunning = Code(rawValue: "daemon-already-running")
        public static let database = Code(rawValue: "database")
        public static let invalidArgument = Code(rawValue: "invalid-argument")
        /// The queue's disk is below `[limits] min_free_space`, or full: nothing was taken; try again once there
        /// is room (the CLI exits 5).
        public static let diskLow = Code(rawValue: "disk-low")
        /// The intake was stopped (the daemon is shutting down, or the control API client that asked left) before
        /// the file was read whole: nothing was taken, and the file is where it was.
        public static let interrupted = Code(rawValue: "interrupted")
        /// The caller may not do this: a control API client that is not the queue's own user reached for another
        /// user's job or file, or for a choice the admin did not allow droppers.
        public static let forbidden = Code(rawValue: "forbidden")
        /// The daemon's control API cannot be reached (no daemon runs, or its socket is not this user's to use):
        /// `UploadQueueClient` only.
        public static let daemonUnreachable = Code(rawValue: "daemon-unreachable")
        /// The control API refused the request as malformed, or answered with what this version cannot read.
        public static let badRequest = Code(rawValue: "bad-request")
        /// The control API asks to send the request again once one of the caller's others is answered.
        public static let tooManyRequests = Code(rawValue: "too-many-requests")
        /// The control API refused a request that conflicts with one being answered (the same `Idempotency-Key`)
        /// or with the job's state.
        public static let conflict = Code(rawValue: "conflict")
        /// An enqueue named `after` a job that is none of the caller's (nor was, in the history kept): nothing was
        /// taken.
        public static let unknownPrerequisite = Code(rawValue: "unknown-prerequisite")
        /// An enqueue named a group that is closed (or uploaded), or a close named one that is: nothing changed.
        public static let groupClosed = Code(rawValue: "group-closed")
        /// No group of the caller's has this name.
        public static let groupNotFound = Code(rawValue: "group-not-found")
        /// The caller (a dropper) holds as many jobs or bytes in the queue as `[limits] owner_pending_jobs` and
        /// `owner_pending_bytes` let one user hold: nothing was taken; send it again once some of them are
        /// uploaded.
        public static let ownerQuota = Code(rawValue: "owner-quota")
    }

    public var code: Code
    /// What happened and, where it helps, what to do about it.
    public var message: String
    public var job: JobID?
    public var path: String?
    /// The system's word for the cause (`strerror`), when there is one.
    public var cause: String?

    public init(_ code: Code, _ message: String, job: JobID? = nil, path: String? = nil, cause: String? = nil) {
        self.code = code
        self.message = message
        self.job = job
        self.path = path
        self.cause = cause
    }

    /// An error from a failed system call, with `errno` turned into words.
    static func system(_ call: String, path: String?, errno code: Int32 = errno, job: JobID? = nil) -> UploadQueueError {
        let reason = String(cString: strerror(code))
        let kind: Code = code == ENOENT ? .fileNotFound : (code == ENOSPC || code == EDQUOT) ? .diskLow : .io
        return UploadQueueError(kind, "\(call) failed: \(reason)", job: job, path: path, cause: reason)
    }

    /// An error from the database: a full disk (`SQLITE_FULL`, or an I/O error on a file system without room;
    /// see `QueueDatabase.isDiskFull`) is `diskLow`, anything else `database`.
    static func database(_ message: String, _ error: any Error, job: JobID? = nil, path: String? = nil,
                         databasePath: String? = nil) -> UploadQueueError {
        let kind: Code = QueueDatabase.isDiskFull(error, at: databasePath) ? .diskLow : .database
        return UploadQueueError(kind, "\(message): \(error)", job: job, path: path)
    }

    public var description: String {
        var text = message
        if let path { text += " (\(path))" }
        if let job { text += " [job \(job)]" }
        return text
    }
}
