import Foundation

/// Everything the queue needs to run: where its state lives, the spool, limits, retry schedule and destinations.
///
/// Built by `ConfigurationLoader` from TOML (paths already resolved against the config file's directory) or in
/// code by a library host.
public struct Configuration: Sendable, Equatable {
    /// The config file this came from, or nil for the embedded default or a configuration built in code.
    public var file: String?
    /// `state_dir`: `queue.sqlite`, `blobs/`, `daemon.lock`, `intake.lock`.
    public var stateDirectory: String
    /// The watched spool, if any.
    public var spool: Spool?
    /// `[limits]`.
    public var limits: Limits
    /// `[retry]`: when failed transfers are tried again.
    public var retry: RetryPolicy
    /// `[link]`.
    public var link: Link
    /// `[bandwidth]`.
    public var bandwidth: Bandwidth
    /// Destinations by name.
    public var destinations: [String: Destination]
    /// How metadata patches are sent by default.
    public var patch = PatchSettings()
    /// `[mint]`: how the app's minting backend (`mint_url` of a destination) is reached.
    public var mint = Destination.MintSettings()
    /// Where Prometheus metrics are written for node_exporter's textfile collector, if anywhere.
    public var metrics = Metrics()
    /// `[retention]`: what happens to uploaded copies, and how long history is kept.
    public var retention = RetentionPolicy()
    /// `[power]`: what transfers need from the device's power.
    public var power = PowerSettings()
    /// `[schedule]`: when uploads may run.
    public var schedule = Schedule()
    /// `[hooks]`: programs run when a job is uploaded or fails for good.
    public var hooks = HookSettings()
    /// `[lanes]`: what a lane does when a job in it fails for good.
    public var lanes = Lanes()
    /// `[events]`: the daemon's event stream for other processes.
    public var events = EventSettings()
    /// `[api]`: the daemon's control API for other processes.
    public var api = ControlSettings()

    /// `[schedule]`: upload windows in local time, and the priority that ignores them.
    public struct Schedule: Sendable, Equatable {
        /// `windows`: every destination's windows unless it names its own; none: always open.
        public var windows: UploadWindows
        /// `urgent_priority`: jobs of at least this priority ignore the windows; nil: none do.
        public var urgentPriority: Int?
        /// `time_zone`: the zone windows, timetables and budget periods are read in; the system's by default.
        public var timeZone: TimeZone

        /// Windows (none: always open), the priority that ignores them, and the zone they are read in.
        public init(windows: UploadWindows = UploadWindows.always, urgentPriority: Int? = nil,
                    timeZone: TimeZone = .current) {
            self.windows = windows
            self.urgentPriority = urgentPriority
            self.timeZone = timeZone
        }
    }

    /// `[metrics]`: a Prometheus text file rewritten atomically every `interval`.
    public struct Metrics: Sendable, Equatable {
        /// The file (node_exporter reads `*.prom` in its textfile directory); nil: no metrics file.
        public var textfile: String?
        public var interval: Duration

        public init(textfile: String? = nil, interval: Duration = .seconds(5)) {
            self.textfile = textfile
            self.interval = interval
        }
    }

    /// A configuration built in code; the defaults are those of an empty config file.
    public init(file: String? = nil, stateDirectory: String, spool: Spool? = nil, limits: Limits = Limits(),
                retry: RetryPolicy = RetryPolicy(), link: Link = Link(), bandwidth: Bandwidth = Bandwidth(),
                destinations: [String: Destination]) {
        self.file = file
        self.stateDirectory = stateDirectory
        self.spool = spool
        self.limits = limits
        self.retry = retry
        self.link = link
        self.bandwidth = bandwidth
        self.destinations = destinations
    }

    /// `[spool]`: the directory the daemon watches and where its files go.
    public struct Spool: Sendable, Equatable {
        /// The watched directory.
        public var directory: String
        /// Destination for files without a sidecar naming one.
        public var destination: String
        /// How long a file must stay unchanged (and closed) before it is taken.
        public var quietPeriod: Duration
        /// Full rescans on a timer, in case an event was missed (network file systems, lost events).
        public var rescanInterval: Duration
        /// `network_quiet_period`: on a network file system, how long a file not renamed in must stay unchanged
        /// (writers on other machines are seen by no event, lease or process list).
        public var networkQuietPeriod: Duration = .seconds(30)
        /// `sidecar_destinations`: the destinations a sidecar may pick; nil: the spool's own `destination` alone.
        public var sidecarDestinations: Set<String>?
        /// `sidecar_meta_keys`: the `meta` keys a sidecar may set (none by default); only these reach templates
        /// and a POST's form fields.
        public var sidecarMetaKeys: Set<String> = []
        /// `sidecar_lanes`: the prefixes of the lanes a sidecar (or a dropper through the control API) may use.
        public var sidecarLanes: [String] = []
        /// `sidecar_groups`: the prefixes of the groups a sidecar (or a dropper through the control API) may join.
        public var sidecarGroups: [String] = []
        /// `sidecar_max_priority`: the highest priority a sidecar may give its file; nil: 0, or one below
        /// `[schedule] urgent_priority` when that is lower (see `SidecarPolicy.priorityCap`).
        public var sidecarMaxPriority: Int?
        /// `max_file_size`: the largest file the spool takes; larger ones are rejected with a reason.
        public var maxFileSize: Int64 = Self.defaultMaxFileSize
        /// `sidecar_may_allow_metered`: whether a sidecar may let its file go on a metered link where its
        /// destination would not (by default a sidecar may only make `on_metered` stricter).
        public var sidecarMayAllowMetered = false

        /// The default `max_file_size`, 64 GiB: above the longest recording a phone or camera writes as one file,
        /// far below what a mistake (or `truncate -s 1T`) puts in a drop folder.
        public static let defaultMaxFileSize: Int64 = 64 << 30

        /// The destinations a sidecar may choose among: `sidecar_destinations`, else the spool's own.
        public var destinationsForSidecars: Set<String> { sidecarDestinations ?? [destination] }

        /// A spool with the default quiet period (1 s) and rescan interval (30 s).
        public init(directory: String, destination: String = "default", quietPeriod: Duration = .seconds(1),
                    rescanInterval: Duration = .seconds(30)) {
            self.directory = directory
            self.destination = destination
            self.quietPeriod = quietPeriod
            self.rescanInterval = rescanInterval
        }
    }

    /// `[limits]`.
    public struct Limits: Sendable, Equatable {
        /// Transfers at once, all destinations together.
        public var concurrency: Int
        /// `min_free_space`: below it the intake pauses (see `FreeSpaceGuard`).
        public var minFreeSpace: FreeSpaceThreshold
        /// `owner_pending_jobs`: the jobs one dropper may have in the queue, not uploaded yet (0: no limit).
        public var ownerPendingJobs: Int
        /// `owner_pending_bytes`: the bytes of those jobs, or a share of the state directory's disk (0: no limit).
        public var ownerPendingBytes: FreeSpaceThreshold

        /// The default of `owner_pending_jobs`.
        public static let standardOwnerPendingJobs = 10_000
        /// The default of `owner_pending_bytes`: a quarter of the state disk.
        public static let standardOwnerPendingBytes = FreeSpaceThreshold.percent(25)

        /// Limits with `concurrency` transfers at once and `minFreeSpace` left free.
        public init(concurrency: Int = 4, minFreeSpace: FreeSpaceThreshold = .standard,
                    ownerPendingJobs: Int = Limits.standardOwnerPendingJobs,
                    ownerPendingBytes: FreeSpaceThreshold = Limits.standardOwnerPendingBytes) {
            self.concurrency = concurrency
            self.minFreeSpace = minFreeSpace
            self.ownerPendingJobs = ownerPendingJobs
            self.ownerPendingBytes = ownerPendingBytes
        }
    }

    /// `[link]`: how the network link is classified.
    public struct Link: Sendable, Equatable {
        /// `auto` detects; the other values force a class.
        public var mode: String
        /// Interface-name globs that count as metered.
        public var meteredInterfaces: [String]
        /// `metered_budget` (with `budget_reset`): the bytes metered links may carry per period; nil: no budget.
        public var meteredBudget: MeteredBudget?
        /// `connectivity_check`: an http(s) URL that answers `204` with an empty body (the `generate_204`
        /// convention), asked now and then; any other answer means a captive portal stands in the way, and the
        /// link is `portal` for the destinations that take the same way. nil: not asked.
        public var connectivityCheck: String?

        /// Link settings; the default detects the link.
        public init(mode: String = "auto", meteredInterfaces: [String] = ["wwan*", "ppp*", "usb*", "rmnet*", "wwp*"]) {
            self.mode = mode
            self.meteredInterfaces = meteredInterfaces
        }
    }

    /// `[bandwidth]`: caps in bytes per second per link class, shared by all transfers; 0 = unlimited.
    public struct Bandwidth: Sendable, Equatable {
        /// The cap on a metered link.
        public var metered: Int64
        /// The cap on an unmetered link.
        public var unmetered: Int64
        /// `timetable`: a cap by time of day, combined with the link class's (the lower one wins).
        public var timetable = BandwidthTimetable.none

        /// Caps in bytes per second; 0 is unlimited.
        public init(metered: Int64 = 0, unmetered: Int64 = 0) {
            self.metered = metered
            self.unmetered = unmetered
        }
    }

    /// The destination a file goes to when none is named (nor the spool's): `default`, or the only destination
    /// there is; nil when there are several and none is `default`.
    public var implicitDestination: String? { Self.implicitDestination(among: Set(destinations.keys)) }

    /// `implicitDestination` among `names`.
    static func implicitDestination(among names: Set<String>) -> String? {
        names.contains("default") ? "default" : names.count == 1 ? names.first : nil
    }

    /// The queue's database file.
    public var databasePath: String { (stateDirectory as NSString).appendingPathComponent("queue.sqlite") }
    /// Files the queue owns.
    public var blobDirectory: String { (stateDirectory as NSString).appendingPathComponent("blobs") }

    /// The free-space guard on the state directory's and `blobs/`'s file systems (`[limits] min_free_space`).
    public var freeSpaceGuard: QueueStatus.FreeSpaceGuard {
        FreeSpaceGuard(threshold: limits.minFreeSpace, paths: [stateDirectory, blobDirectory])
    }
    /// The daemon's exclusive lock.
    public var lockPath: String { (stateDirectory as NSString).appendingPathComponent("daemon.lock") }
    /// Where the CLI pokes a running daemon.
    public var wakeSocketPath: String { (stateDirectory as NSString).appendingPathComponent("daemon.sock") }
    /// Where a running daemon serves its control API (`[api] socket`).
    public var apiSocketPath: String {
        api.socket ?? (stateDirectory as NSString).appendingPathComponent("api.sock")
    }
    /// Files of cancelled jobs, kept rather than deleted.
    public var cancelledDirectory: String { (stateDirectory as NSString).appendingPathComponent("cancelled") }
}

extension Destination {
    /// How a network destination is reached: extra headers, credentials, TLS trust and connection timeouts.
    public struct HTTPSettings: Sendable, Equatable {
        /// Sent with every request (values may be secret: they are never logged).
        public var headers: [String: String]
        /// Where the bearer token comes from, if the server wants one.
        public var credentials: CredentialSource?
        /// A PEM bundle of extra CAs to trust; TLS is always verified.
        public var caFile: String?
        /// Longest wait for the TCP and TLS handshake.
        public var connectTimeout: Duration
        /// A transfer below `stall.minimumRate` bytes/s for `stall.window` is aborted and resumed later.
        public var stall: StallDetection

        /// Settings with no headers, no credentials, the system CAs, 15 s to connect and a 30 s stall window.
        public init(headers: [String: String] = [:], credentials: CredentialSource? = nil, caFile: String? = nil,
                    connectTimeout: Duration = .seconds(15), stall: StallDetection = StallDetection()) {
            self.headers = headers
            self.credentials = credentials
            self.caFile = caFile
            self.connectTimeout = connectTimeout
            self.stall = stall
        }
    }
}

extension Destination {
    /// Where a destination's bearer token comes from (sent as `Authorization: Bearer TOKEN`).
    public enum CredentialSource: Sendable, Equatable {
        /// An environment variable of the daemon.
        case environment(String)
        /// A file whose first line is the token; read again after a 401.
        case file(String)
        /// A program (no shell) whose standard output is the token; run again after a 401, killed after `timeout`. It
        /// gets `PATH`, `HOME`, `LANG` and the daemon's variables named in `passEnvironment` (`pass_env`), no others.
        case command([String], timeout: Duration, passEnvironment: [String] = [])
    }
}

extension Destination {
    /// After `threshold` consecutive transient failures a destination is left alone and probed with a cheap request
    /// (every `probeInterval`, growing to `maximumProbeInterval`) until it answers; 0 turns the breaker off.
    public struct CircuitBreakerPolicy: Sendable, Equatable {
        /// Consecutive transient failures that open the circuit; 0 turns the breaker off.
        public var threshold: Int
        /// The wait before the first probe.
        public var probeInterval: Duration
        /// The longest wait between probes (the wait doubles while they fail).
        public var maximumProbeInterval: Duration

        /// Five failures, then probes every 30 s growing to 5 min.
        public init(threshold: Int = 5, probeInterval: Duration = .seconds(30), maximumProbeInterval: Duration = .seconds(300)) {
            self.threshold = threshold
            self.probeInterval = probeInterval
            self.maximumProbeInterval = maximumProbeInterval
        }
    }
}
