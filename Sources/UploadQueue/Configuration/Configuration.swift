import Foundation

/// Everything the queue needs to run: where its state lives, the spool, limits, retry schedule and destinations.
///
/// Built by `ConfigurationLoader` from TOML (paths already resolved against the config file's directory) or in
/// code by a library host.
public struct Configuration: Sendable, Equatable {
    /// The config file this came from, or nil for the embedded default or a configuration built in code.
    public var file: String?
    /// `state_dir`: `queue.sqlite`, `blobs/`, `daemon.lock`.
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
    /// Where Prometheus metrics are written for node_exporter's textfile collector, if anywhere.
    public var metrics = Metrics()
    /// `[retention]`: what happens to uploaded copies, and how long history is kept.
    public var retention = RetentionPolicy()

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
        /// `sidecar_destinations`: the destinations a sidecar may pick; nil lets it pick any configured one.
        public var sidecarDestinations: Set<String>?
        /// `sidecar_may_allow_metered`: whether a sidecar may let its file go on a metered link where its
        /// destination would not (by default a sidecar may only make `on_metered` stricter).
        public var sidecarMayAllowMetered = false

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

        /// Limits with `concurrency` transfers at once and `minFreeSpace` left free.
        public init(concurrency: Int = 4, minFreeSpace: FreeSpaceThreshold = .standard) {
            self.concurrency = concurrency
            self.minFreeSpace = minFreeSpace
        }
    }

    /// `[link]`: how the network link is classified.
    public struct Link: Sendable, Equatable {
        /// `auto` detects; the other values force a class.
        public var mode: String
        /// Interface-name globs that count as metered.
        public var meteredInterfaces: [String]

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

        /// Caps in bytes per second; 0 is unlimited.
        public init(metered: Int64 = 0, unmetered: Int64 = 0) {
            self.metered = metered
            self.unmetered = unmetered
        }
    }

    /// The queue's database file.
    public var databasePath: String { (stateDirectory as NSString).appendingPathComponent("queue.sqlite") }
    /// Files the queue owns.
    public var blobDirectory: String { (stateDirectory as NSString).appendingPathComponent("blobs") }

    /// The free-space guard on the state directory's and `blobs/`'s file systems (`[limits] min_free_space`).
    public var freeSpaceGuard: FreeSpaceGuard {
        FreeSpaceGuard(threshold: limits.minFreeSpace, paths: [stateDirectory, blobDirectory])
    }
    /// The daemon's exclusive lock.
    public var lockPath: String { (stateDirectory as NSString).appendingPathComponent("daemon.lock") }
    /// Where the CLI pokes a running daemon.
    public var wakeSocketPath: String { (stateDirectory as NSString).appendingPathComponent("daemon.sock") }
    /// Files of cancelled jobs, kept rather than deleted.
    public var cancelledDirectory: String { (stateDirectory as NSString).appendingPathComponent("cancelled") }
}

/// A place files go: `[destinations.NAME]`.
public struct Destination: Sendable, Equatable {
    /// The wire protocol.
    public enum TransferProtocol: String, Sendable, Equatable, CaseIterable {
        /// A local directory: temporary name, fsync, rename.
        case file
        /// tus 1.0 resumable uploads, in `chunk_size` PATCH requests.
        case tus
        /// An S3 bucket: PutObject for small files, a resumable multipart upload for large ones.
        case s3
        /// One whole-file PUT to a URL made from the template.
        case httpPut = "http-put"
        /// One whole-file POST as `multipart/form-data`, the job's meta as form fields.
        case httpPost = "http-post"
    }

    /// The name after `destinations.`, which jobs refer to.
    public var name: String
    /// The wire protocol.
    public var transferProtocol: TransferProtocol
    /// The `url` as written: `file://…` for local directories, the creation endpoint for tus, a URL template
    /// for `http-put`/`http-post`.
    public var url: String
    /// For `file`: the target directory, resolved.
    public var directory: String
    /// For `file`: the name under the directory; `{job_id}`, `{name}`, `{ext}`, `{date}`, `{sha256}`, `{meta.KEY}`.
    public var nameTemplate: PathTemplate
    /// For `http-put`/`http-post`: the URL with its placeholders filled per job (for tus: the endpoint).
    public var urlTemplate: URLTemplate?
    /// How much is sent between two durable, confirmed offsets (a tus PATCH, an S3 part, a file-copy checkpoint).
    public var chunkSize: Int64
    /// Headers, credentials, TLS and timeouts of network destinations.
    public var http: HTTPSettings
    /// The job's `remote_url` when set: `{url}` (what the server answered), `{upload_id}` (tus, http), `{key}`
    /// (s3) and the job's placeholders; otherwise the server's URL is used.
    public var publicURLTemplate: URLTemplate?
    /// For `http-post`: the form field that carries the file.
    public var formField: String
    /// When the destination counts as down and is probed instead of hammered.
    public var circuitBreaker: CircuitBreakerPolicy
    /// For `s3`: endpoint, bucket, region, keys, part sizes and credentials.
    public var s3: S3Settings?
    /// What this destination's jobs do on a metered link unless a job says otherwise: wait by default.
    public var onMetered: MeteredPolicy = .defer
    /// What becomes of a `reference` job's own file once uploaded, unless the job says: kept by default.
    public var sourceAfterUpload: SourceAfterUpload = .keep
    /// For `tus`: send a file of one chunk or less in the creation request itself (one round trip less). Off by
    /// default: if that request is cut off after the server stored the file, its upload URL is never learnt and
    /// the file is sent again as a second upload.
    public var tusCreationWithUpload = false
    /// When a job's SHA-256 (its content identity) is computed: at intake by default, or while the file is sent.
    public var hashTiming: HashTiming = .atIntake
    /// `trusted_origins`: origins besides the URL's own that get the destination's token and headers (an upload
    /// URL a tus server hands out on another host). Any other origin gets neither.
    public var trustedOrigins: [URLOrigin] = []

    /// When a destination's jobs get their SHA-256.
    ///
    /// `whileSending` reads the file once instead of twice: the digest is taken from the bytes as they go out
    /// and recorded with the upload, so a job's `sha256` is empty until then. Intake hashes anyway when a live job
    /// of the same size goes to the destination (de-duplication needs it then).
    public enum HashTiming: String, Sendable, Equatable, CaseIterable {
        /// `enqueue` reads the whole file to hash it before the job exists.
        case atIntake = "at-intake"
        /// The upload hashes the bytes it reads to send them (an S3 multipart upload: beside its parts; a
        /// `PutObject`: just before it, since its signature needs the digest).
        case whileSending = "while-sending"
    }

    /// A destination with every setting given; see `localDirectory` and `tus` for the common cases.
    public init(name: String, transferProtocol: TransferProtocol = .file, url: String, directory: String = "",
                nameTemplate: PathTemplate = .defaultFileName, urlTemplate: URLTemplate? = nil,
                chunkSize: Int64 = 8 << 20, http: HTTPSettings = HTTPSettings(), publicURLTemplate: URLTemplate? = nil,
                formField: String = "file", circuitBreaker: CircuitBreakerPolicy = CircuitBreakerPolicy(),
                s3: S3Settings? = nil) {
        self.name = name
        self.transferProtocol = transferProtocol
        self.url = url
        self.directory = directory
        self.nameTemplate = nameTemplate
        self.urlTemplate = urlTemplate
        self.chunkSize = chunkSize
        self.http = http
        self.publicURLTemplate = publicURLTemplate
        self.formField = formField
        self.circuitBreaker = circuitBreaker
        self.s3 = s3
    }

    /// Whether a name this destination makes for a job (`url`, `name_template`, `key_template`,
    /// `public_url_template`) uses its SHA-256, which a job hashed while sending does not have before it is sent.
    var namesUseSHA256: Bool {
        (transferProtocol == .file && nameTemplate.usesSHA256) || urlTemplate?.usesSHA256 == true
            || publicURLTemplate?.usesSHA256 == true || s3?.keyTemplate.usesSHA256 == true
    }

    /// The job's `remote_url` for an upload the server placed at `serverURL`: `public_url_template` filled with
    /// `{url}`, `{upload_id}` (the URL's last segment) and the job's placeholders, or `serverURL` itself.
    func remoteURL(for job: Job, serverURL: String) -> String {
        guard let template = publicURLTemplate else { return serverURL }
        let id = serverURL.split(separator: "/").last.map(String.init) ?? ""
        return template.expand(for: job, extra: ["url": serverURL, "upload_id": id.removingPercentEncoding ?? id])
    }

    /// A local directory destination.
    public static func localDirectory(name: String, directory: String,
                                      nameTemplate: PathTemplate = .defaultFileName) -> Destination {
        Destination(name: name, url: "file://" + directory, directory: directory, nameTemplate: nameTemplate)
    }

    /// An S3 destination; its `url` (shown in status) is the bucket's address.
    public static func s3(name: String, settings: S3Settings, http: HTTPSettings = HTTPSettings(),
                          publicURLTemplate: URLTemplate? = nil) -> Destination {
        var url = settings.endpoint
        while url.hasSuffix("/") { url.removeLast() }
        if settings.pathStyle {
            url += "/" + settings.bucket
        } else if let scheme = url.range(of: "://") {
            url.insert(contentsOf: settings.bucket + ".", at: scheme.upperBound)
        }
        return Destination(name: name, transferProtocol: .s3, url: url, chunkSize: settings.partSize, http: http,
                           publicURLTemplate: publicURLTemplate, s3: settings)
    }

    /// A tus 1.0 destination at `endpoint` (the creation URL, e.g. `https://host/files/`).
    public static func tus(name: String, endpoint: String, chunkSize: Int64 = 8 << 20,
                           http: HTTPSettings = HTTPSettings()) throws(PathTemplateError) -> Destination {
        Destination(name: name, transferProtocol: .tus, url: endpoint, urlTemplate: try URLTemplate(endpoint),
                    chunkSize: chunkSize, http: http)
    }
}

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

/// Where a destination's bearer token comes from (sent as `Authorization: Bearer TOKEN`).
public enum CredentialSource: Sendable, Equatable {
    /// An environment variable of the daemon.
    case environment(String)
    /// A file whose first line is the token; read again after a 401.
    case file(String)
    /// A program (no shell) whose standard output is the token; run again after a 401, killed after `timeout`.
    /// It gets `PATH`, `HOME`, `LANG` and the daemon's variables named in `passEnvironment` (`pass_env`), no others.
    case command([String], timeout: Duration, passEnvironment: [String] = [])
}

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
