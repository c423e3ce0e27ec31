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
    public var limits: Limits
    public var retry: RetryPolicy
    public var link: Link
    public var bandwidth: Bandwidth
    /// Destinations by name.
    public var destinations: [String: Destination]

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
        public var directory: String
        /// Destination for files without a sidecar naming one.
        public var destination: String
        /// How long a file must stay unchanged (and closed) before it is taken.
        public var quietPeriod: Duration
        /// Full rescans on a timer, in case an event was missed (network file systems, lost events).
        public var rescanInterval: Duration

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

        public init(concurrency: Int = 4) {
            self.concurrency = concurrency
        }
    }

    /// `[link]`: how the network link is classified.
    public struct Link: Sendable, Equatable {
        /// `auto` detects; the other values force a class.
        public var mode: String
        public var meteredInterfaces: [String]

        public init(mode: String = "auto", meteredInterfaces: [String] = ["wwan*", "ppp*", "usb*", "rmnet*", "wwp*"]) {
            self.mode = mode
            self.meteredInterfaces = meteredInterfaces
        }
    }

    /// `[bandwidth]`: caps in bytes per second per link class, shared by all transfers; 0 = unlimited.
    public struct Bandwidth: Sendable, Equatable {
        public var metered: Int64
        public var unmetered: Int64

        public init(metered: Int64 = 0, unmetered: Int64 = 0) {
            self.metered = metered
            self.unmetered = unmetered
        }
    }

    /// The queue's database file.
    public var databasePath: String { (stateDirectory as NSString).appendingPathComponent("queue.sqlite") }
    /// Files the queue owns.
    public var blobDirectory: String { (stateDirectory as NSString).appendingPathComponent("blobs") }
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
        case file
    }

    public var name: String
    public var transferProtocol: TransferProtocol
    /// The `url` as written (`file://…` for local directories).
    public var url: String
    /// For `file`: the target directory, resolved.
    public var directory: String
    /// For `file`: the name under the directory; `{job_id}`, `{name}`, `{ext}`, `{date}`, `{sha256}`, `{meta.KEY}`.
    public var nameTemplate: PathTemplate
    /// How much is written between two durable, confirmed offsets.
    public var chunkSize: Int64

    public init(name: String, transferProtocol: TransferProtocol = .file, url: String, directory: String,
                nameTemplate: PathTemplate = .defaultFileName, chunkSize: Int64 = 8 << 20) {
        self.name = name
        self.transferProtocol = transferProtocol
        self.url = url
        self.directory = directory
        self.nameTemplate = nameTemplate
        self.chunkSize = chunkSize
    }

    /// A local directory destination.
    public static func localDirectory(name: String, directory: String,
                                      nameTemplate: PathTemplate = .defaultFileName) -> Destination {
        Destination(name: name, url: "file://" + directory, directory: directory, nameTemplate: nameTemplate)
    }
}
