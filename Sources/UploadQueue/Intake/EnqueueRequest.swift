/// A file to accept into the queue, with where it goes and what travels with it.
public struct EnqueueRequest: Sendable, Equatable {
    public var path: String
    /// Destination name; nil means the spool's destination, else `default`.
    public var destination: String?
    public var meta: [String: String]
    public var patch: PatchTarget?
    /// Higher runs sooner.
    public var priority: Int
    public var mode: Job.IntakeMode
    /// The job's own metered-link policy: `defer`, `allow` or `allow-below:SIZE`.
    public var onMetered: String?
    /// For `mode: .reference` only: what becomes of the file once uploaded (nil: its destination's
    /// `source_after_upload`, which keeps it by default).
    public var sourceAfterUpload: Destination.SourceAfterUpload?
    /// The lane the job goes in: after the lane's earlier jobs, one at a time (nil: no lane).
    public var lane: String?
    /// The jobs it waits for, by id (or, through the control API, by the caller's `Idempotency-Key`): jobs of
    /// the same owner, in the queue or gone from it in the history kept.
    public var after: [String] = []
    /// What those jobs must come to (nil: `.uploaded`).
    public var afterMode: Job.AfterMode?
    /// The group the job joins (nil: none): once the group is closed and every member uploaded, one completion
    /// carries them all. An open group of the same owner, or a new one.
    public var group: String?
    /// The spool sidecar that came with the file: taken into `blobs/` beside the file before the job can run,
    /// so it is released with the file and never left behind.
    var sidecar: String?
    /// The sidecar as it was read: only that inode is taken (one swapped in since, a directory or a link, is not).
    var sidecarFile: FileFingerprint?
    /// The file the caller examined (the spool: its type, links and owner): a file found under the path with
    /// another inode was swapped in meanwhile, and is not taken.
    var examined: FileFingerprint?
    /// Who hands the file over when it is not the queue's own user (a spool file's owner, a control API client):
    /// recorded as the job's owner.
    var owner: UInt32?
    /// Take the file only if `owner` owns it: a client of the control API that is not the queue's own user can
    /// hand over its own files alone, never one it could not read itself.
    var ownedFileOnly = false
    /// For a dropper through the control API: the file is opened as it would open it (`uploadq_open_as_user`, the
    /// descriptor the intake then reads), and held to the spool's rules (`DropperRules`).
    var dropper: DropperAccess?
    /// The control API client's `Idempotency-Key` with its uid: remembered in the transaction that makes the job
    /// (or finds its duplicate), so a crash between the two can never leave a job its key does not name.
    var idempotencyKey: IdempotencyKey?
    /// Whose idempotency keys `after` may name (the control API client's uid); nil: the process's own user.
    var keyOwner: UInt32?

    /// An `Idempotency-Key` and whose it is (the client's uid, as the kernel named it).
    struct IdempotencyKey: Sendable, Equatable {
        var owner: UInt32
        var key: String
    }

    public init(path: String, destination: String? = nil, meta: [String: String] = [:], patch: PatchTarget? = nil,
                priority: Int = 0, mode: Job.IntakeMode = .copy, onMetered: String? = nil,
                sourceAfterUpload: Destination.SourceAfterUpload? = nil, lane: String? = nil, after: [String] = [],
                afterMode: Job.AfterMode? = nil, group: String? = nil) {
        self.lane = lane
        self.group = group
        self.after = after
        self.afterMode = afterMode
        self.onMetered = onMetered
        self.sourceAfterUpload = sourceAfterUpload
        self.path = path
        self.destination = destination
        self.meta = meta
        self.patch = patch
        self.priority = priority
        self.mode = mode
    }
}

/// The job that now carries an enqueued file.
public struct EnqueueResult: Sendable, Equatable {
    public var id: JobID
    /// True when the same content was already live or uploaded to the same destination: `id` is that job's.
    public var deduplicated: Bool
}
