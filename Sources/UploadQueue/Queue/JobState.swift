/// The four states of an upload job, spelled as in the CLI, the JSON and the database.
public enum JobState: String, Sendable, Codable, CaseIterable {
    case pending
    case uploading
    case uploaded
    case failed
}

extension Job {
    /// Why a `pending` job is not moving yet; shown by `status`, `list` and `show`.
    public enum WaitingReason: String, Sendable, Codable, CaseIterable {
        case meteredLink = "metered-link"
        case offline
        /// A captive portal stands between the device and the destination (the connectivity check, NetworkManager):
        /// nothing goes until it is gone.
        case portal
        case backoff
        case circuitOpen = "circuit-open"
        /// The destination's storage is full (HTTP 507): one job at a time tries again, on a doubling interval.
        case quotaFull = "quota-full"
        /// What answered for the destination proved nothing: a captive portal, a proxy, a server whose answer does not
        /// show it holds the bytes. Nothing fails for good; one job at a time tries again, on a doubling interval.
        case unverifiedAnswer = "unverified-answer"
        case concurrency
        /// Every slot is busy, and other owners' jobs take their turn before this one (`FairShare`: within a
        /// priority, owners take turns job by job).
        case fairShare = "fair-share"
        case sourceUnstable = "source-unstable"
        /// The device's power does not meet the destination's `power` requirement (on battery, battery low).
        case power
        /// Outside the destination's upload windows, and the job's priority is below `urgent_priority`.
        case outsideWindow = "outside-window"
        /// The link is metered and `[link] metered_budget` is spent for this period.
        case budgetSpent = "budget-spent"
        /// An earlier job of its lane is not uploaded yet (the detail names it): the lane goes one job at a time.
        case lane
        /// A job it was enqueued `after` is not uploaded yet (the detail names it).
        case prerequisite
    }
}

extension Job {
    /// How a file enters the queue.
    public enum IntakeMode: String, Sendable, Codable, CaseIterable {
        /// The queue takes the file over (renamed into `state_dir/blobs/`); the spool's default.
        case move
        /// The queue keeps its own copy under `state_dir/blobs/`; the original is left alone.
        case copy
        /// The queue uploads the file where it is and refuses it if it changes before or during the upload.
        case reference
    }
}

extension Job {
    /// The state of a job's metadata patch, kept apart from the four upload states.
    public enum PatchState: String, Sendable, Codable, CaseIterable {
        case none
        case pending
        case done
        case failed
    }
}
