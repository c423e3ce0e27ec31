import Foundation

/// What `uploadq status` shows: who runs the queue, the link, the counts, and what went over which link.
public struct QueueStatus: Sendable, Equatable {
    /// The pid of the process running the queue (daemon or library host), or nil.
    public var runnerPID: Int32?
    /// The link as a whole and who classified it.
    public var link: LinkStatus
    public var summary: Summary
    /// Request-body bytes sent: destination → link class (`metered`, `unmetered`) → bytes, so a user can show
    /// what went over a metered link.
    public var traffic: [String: [String: Int64]]
    /// The queue's disk: room, `min_free_space`, and whether the intake is paused (nil when it cannot be measured).
    public var disk: DiskStatus?
    /// What destinations' servers taught with 413s (request body sizes), by destination.
    public var requestLimits: [String: Destination.RequestLimit] = [:]
    /// The device's power and what destinations require of it (nil when none requires anything).
    public var power: PowerReport?
    /// Destinations with upload windows: open or not now, and until when.
    public var windows: [String: WindowReport] = [:]
    /// The metered budget and its use this period (nil without `[link] metered_budget`).
    public var meteredBudget: BudgetReport?
    /// Hook runs by event and state (owed, done, failed for good), when there are any.
    public var hooks: [Configuration.HookEvent: [Job.OutboxState: Int]] = [:]
    /// The lanes: how many have work, how many a failed job holds, and how long the oldest head has been at its
    /// lane's front.
    public var lanes = LaneReport()
    /// Spool files left where they are for a reason of their owner's (over its quota, another user's sidecar beside
    /// it), oldest first: the first few of `spoolHeldFiles`.
    public var spoolHolds: [SpoolHold] = []
    /// How many spool files are held (recorded up to 1,000).
    public var spoolHeldFiles = 0

    /// The lanes at a glance (from at most 1,000 lanes with work).
    public struct LaneReport: Sendable, Equatable {
        /// Lanes with jobs pending, uploading, or failed and holding them.
        public var active = 0
        /// Lanes a failed job holds (`uploadq lanes` says which, and why).
        public var blocked = 0
        /// Seconds the oldest head of a lane with work has been at its front; 0 when no lane has work.
        public var oldestHeadAge: Double = 0
    }

    /// The power as read now, and each destination's requirement.
    public struct PowerReport: Sendable, Equatable {
        /// The power as read now.
        public var state: PowerState
        /// Destination → `ac`, `battery-not-low (20%)` or `any`.
        public var requirements: [String: String]
    }

    /// A destination's upload windows now.
    public struct WindowReport: Sendable, Equatable {
        /// Whether a window is open now.
        public var open: Bool
        /// When that changes (nil: not within a week).
        public var until: Date?
        /// The windows as written.
        public var windows: [String]
    }

    /// The metered budget's use in the current period (what the daemon booked; it books once a second).
    public struct BudgetReport: Sendable, Equatable {
        /// `200.0 MiB/day`.
        public var budget: String
        /// The budget in bytes per period.
        public var bytes: Int64
        /// Bytes counted this period.
        public var used: Int64
        /// Bytes left this period.
        public var left: Int64 { max(0, bytes - used) }
        /// When the period ends and the count starts again.
        public var resetsAt: Date
    }

    /// Bytes sent per link class, all destinations together.
    public var trafficByClass: [String: Int64] {
        traffic.values.reduce(into: [:]) { total, classes in
            for (linkClass, bytes) in classes { total[linkClass, default: 0] += bytes }
        }
    }

    public init(runnerPID: Int32?, link: LinkStatus, summary: Summary, traffic: [String: [String: Int64]] = [:],
                disk: DiskStatus? = nil) {
        self.runnerPID = runnerPID
        self.link = link
        self.summary = summary
        self.traffic = traffic
        self.disk = disk
    }
}
