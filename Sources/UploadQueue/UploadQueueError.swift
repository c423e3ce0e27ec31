import Foundation

/// An error from the queue, with what went wrong, where (job, path) and what to do next.
///
/// `code` is stable and safe to use as a metric label or to branch on; `message` is for people.
public struct UploadQueueError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Stable error categories.
    public enum Code: String, Sendable, Equatable {
        case jobNotFound = "job-not-found"
        case invalidTransition = "invalid-transition"
        case fileNotFound = "file-not-found"
        case notRegularFile = "not-regular-file"
        case symbolicLink = "symbolic-link"
        case sourceChanged = "source-changed"
        case sourceUnstable = "source-unstable"
        case unknownDestination = "unknown-destination"
        case io = "io"
        case configuration = "configuration"
        case daemonAlreadyRunning = "daemon-already-running"
        case database = "database"
        case invalidArgument = "invalid-argument"
        /// The queue's disk is below `[limits] min_free_space`, or full: nothing was taken; try again once there
        /// is room (the CLI exits 5).
        case diskLow = "disk-low"
        /// The intake was stopped (the daemon is shutting down) before the file was read whole: nothing was
        /// taken, and the file is where it was.
        case interrupted = "interrupted"
        /// The caller may not do this: a control API client that is not the queue's own user reached for another
        /// user's job or file, or for a choice the admin did not allow droppers.
        case forbidden = "forbidden"
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
