import GRDB

/// `[limits] owner_pending_jobs` and `owner_pending_bytes`: how much of the queue one dropper may hold (jobs not
/// uploaded yet, failed ones included), so that no dropper can fill the disk or the database others share. The queue's
/// own user and root are held to none.
struct OwnerQuota: Sendable, Equatable {
    /// At most this many jobs (nil: no limit).
    var jobs: Int?
    /// At most this many bytes (nil: no limit).
    var bytes: Int64?
    /// The bytes are a share of a disk whose size could not be read: nothing is taken (a quota fails closed).
    var unmeasured = false

    /// What one dropper holds now.
    struct Holding: Sendable, Equatable {
        var jobs: Int
        var bytes: Int64
    }

    /// The quota of `limits` on a state disk of `diskBytes` (a percentage is of it).
    init(_ limits: Configuration.Limits, diskBytes: Int64?) {
        jobs = limits.ownerPendingJobs > 0 ? limits.ownerPendingJobs : nil
        switch limits.ownerPendingBytes {
        case .bytes(let bytes):
            self.bytes = bytes > 0 ? bytes : nil
        case .percent(let share):
            guard share > 0 else { break }
            guard let diskBytes else {
                unmeasured = true
                break
            }
            self.bytes = limits.ownerPendingBytes.bytes(ofTotal: diskBytes)
        }
    }

    init(jobs: Int?, bytes: Int64?) {
        self.jobs = jobs
        self.bytes = bytes
    }

    /// Why a dropper holding `holding` may not add a file of `size` bytes, or nil when it may.
    func refusal(holding: Holding, adding size: Int64) -> String? {
        if unmeasured {
            return "the state disk's size cannot be read, so your share of it ([limits] owner_pending_bytes) is not "
                + "known; send the file again in a while"
        }
        if let jobs, holding.jobs + 1 > jobs {
            return "you have \(holding.jobs) jobs in the queue not uploaded yet, the most [limits] owner_pending_jobs "
                + "lets one user have (\(jobs)); more are taken as yours are uploaded, or cancelled"
        }
        if let bytes, holding.bytes + size > bytes {
            return "your jobs not uploaded yet hold \(ByteCountText.text(holding.bytes)), and this file "
                + "(\(ByteCountText.text(size))) would take them past [limits] owner_pending_bytes "
                + "(\(ByteCountText.text(bytes))); it is taken as yours are uploaded, or cancelled"
        }
        return nil
    }
}

extension QueueStore {
    /// What dropper `owner` holds of the queue (`owner_tally`).
    static func holding(of owner: UInt32, in db: Database) throws -> OwnerQuota.Holding {
        let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT jobs, bytes FROM owner_tally WHERE owner_uid = ?"),
                                   arguments: [Int64(owner)])
        return OwnerQuota.Holding(jobs: row?["jobs"] ?? 0, bytes: row?["bytes"] ?? 0)
    }

    /// Inserts a new job: within its owner's quota (nil: none; checked again here, in the insert's transaction,
    /// so that two enqueues at once cannot both take the last place), with its turn.
    static func insertJob(_ job: Job, quota: OwnerQuota? = nil, in db: Database) throws {
        if let quota, let owner = job.ownerUID {
            if let why = quota.refusal(holding: try holding(of: owner, in: db), adding: job.size) {
                throw UploadQueueError(.ownerQuota, why, path: job.sourcePath)
            }
        }
        var job = job
        try takeTurn(&job, in: db)
        try job.insert(db)
    }

    /// `holding(of:in:)` in a read of its own.
    func holding(of owner: UInt32) throws -> OwnerQuota.Holding {
        try writer.read { db in try Self.holding(of: owner, in: db) }
    }
}
