import Foundation

/// A place files go: `[destinations.NAME]`.
///
/// What every destination has (its name, how it is reached, when it is probed, what it does on a metered link)
/// sits beside `settings`, which holds what its protocol alone has: a directory cannot carry a form field, and
/// an S3 destination always has its bucket.
public struct Destination: Sendable, Equatable {
    /// The wire protocol, as `protocol = "…"` names it.
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
        /// IETF Resumable Uploads for HTTP (the successor of tus), in `chunk_size` appends.
        case rufh
    }

    /// The name after `destinations.`, which jobs refer to.
    public var name: String
    /// The `url` as written (shown in status): `file://…` for local directories, the creation endpoint for tus, a
    /// URL template for `http-put`/`http-post`, the bucket's address for S3. Its origin is where the
    /// destination's credentials go.
    public var url: String
    /// The protocol and what only it has.
    public var settings: ProtocolSettings
    /// Headers, credentials, TLS and timeouts of network destinations (unused by a local directory).
    public var http: HTTPSettings
    /// The job's `remote_url` when set: `{url}` (what the server answered), `{upload_id}` (tus, http), `{key}`
    /// (s3) and the job's placeholders; otherwise the server's URL is used.
    public var publicURLTemplate: URLTemplate?
    /// When the destination counts as down and is probed instead of hammered.
    public var circuitBreaker: CircuitBreakerPolicy
    /// What this destination's jobs do on a metered link unless a job says otherwise: wait by default.
    public var onMetered: MeteredPolicy = .defer
    /// What becomes of a `reference` job's own file once uploaded, unless the job says: kept by default.
    public var sourceAfterUpload: SourceAfterUpload = .keep
    /// When a job's SHA-256 (its content identity) is computed: at intake by default, or while the file is sent.
    public var hashTiming: HashTiming = .atIntake
    /// `power`: what this destination's transfers need from the device's power; nil follows `[power] require`.
    public var power: Configuration.PowerRequirement?
    /// `windows`: when this destination's uploads may run; nil follows `[schedule] windows`.
    public var windows: Configuration.UploadWindows?
    /// `trusted_origins`: origins besides the URL's own that get the destination's token and headers (an upload
    /// URL a tus server hands out on another host). Any other origin gets neither.
    public var trustedOrigins: [URLOrigin] = []
    /// `allow_private_targets`: a URL the server chose (a tus `Location`, a minted URL) may lead to a loopback,
    /// private or link-local address. Off by default, unless the configured URL is itself such an address or
    /// `localhost` (`allowsPrivateTargets`).
    public var allowPrivateTargets = false

    /// Whether a server-chosen URL may lead to a loopback, private or link-local address (`PrivateAddress`): set,
    /// or the destination is itself there.
    var allowsPrivateTargets: Bool {
        allowPrivateTargets || URLOrigin(url: url).map { PrivateAddress.isPrivateHost($0.host) } ?? false
    }

    /// The wire protocol.
    public var transferProtocol: TransferProtocol { settings.transferProtocol }

    /// Whether a file goes in one request that cannot stop half-way (`http-put`, `http-post`): the metered budget
    /// lets such a file start only when it fits in what is left.
    var sendsWholeFiles: Bool { transferProtocol == .httpPut || transferProtocol == .httpPost }

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

    /// A destination of any protocol; see `localDirectory`, `tus`, `httpPut`, `httpPost` and `s3` for the usual
    /// ways to make one.
    public init(name: String, url: String, settings: ProtocolSettings, http: HTTPSettings = HTTPSettings(),
                publicURLTemplate: URLTemplate? = nil, circuitBreaker: CircuitBreakerPolicy = CircuitBreakerPolicy()) {
        self.name = name
        self.url = url
        self.settings = settings
        self.http = http
        self.publicURLTemplate = publicURLTemplate
        self.circuitBreaker = circuitBreaker
    }

    /// Whether files go over the network (every protocol but a local directory): such a destination has a link
    /// class, a circuit breaker and credentials.
    public var isNetwork: Bool {
        if case .localDirectory = settings { return false }
        return true
    }

    /// The URL whose host the destination's requests go to (for the link's class and the circuit breaker's
    /// probe); nil for a local directory.
    var serverURL: String? {
        switch settings {
        case .localDirectory: nil
        case .s3(let s3): s3.endpoint
        case .tus(let tus): tus.endpoint
        case .rufh(let rufh): rufh.endpoint
        case .mintedS3(let minted): minted.base
        case .httpPut(let put): Self.serverURL(of: put.target)
        case .httpPost(let post): Self.serverURL(of: post.target)
        }
    }

    private static func serverURL(of target: WholeFileTarget) -> String? {
        switch target {
        case .template(let url): url.staticPrefix
        case .minted(.url(let url)): url
        case .minted(.command): nil
        }
    }

    /// Whether a name this destination makes for a job (`url`, `name_template`, `key_template`,
    /// `public_url_template`) uses its SHA-256, which a job hashed while sending does not have before it is sent.
    var namesUseSHA256: Bool {
        settings.namesUseSHA256 || publicURLTemplate?.usesSHA256 == true
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
        Destination(name: name, url: "file://" + directory,
                    settings: .localDirectory(LocalDirectorySettings(directory: directory, nameTemplate: nameTemplate)))
    }

    /// An S3 destination; its `url` (shown in status) is the bucket's address.
    public static func s3(name: String, settings: S3Settings, http: HTTPSettings = HTTPSettings(),
                          publicURLTemplate: URLTemplate? = nil) -> Destination {
        Destination(name: name, url: settings.bucketURL, settings: .s3(settings), http: http,
                    publicURLTemplate: publicURLTemplate)
    }

    /// A tus 1.0 destination at `endpoint` (the creation URL, e.g. `https://host/files/`).
    public static func tus(name: String, endpoint: String, chunkSize: Int64 = 8 << 20,
                           http: HTTPSettings = HTTPSettings()) throws(PathTemplateError) -> Destination {
        let template = try URLTemplate(endpoint)
        guard template.isConstant else {
            throw PathTemplateError(message: "a tus endpoint is one URL for all uploads; placeholders are not allowed here")
        }
        return Destination(name: name, url: endpoint, settings: .tus(TusSettings(endpoint: endpoint, chunkSize: chunkSize)),
                           http: http)
    }

    /// An IETF resumable-upload destination at `endpoint` (where uploads are created), speaking draft interop
    /// version `interopVersion` (6, 7 or 8).
    public static func rufh(name: String, endpoint: String, interopVersion: Int = 6, chunkSize: Int64 = 8 << 20,
                            http: HTTPSettings = HTTPSettings()) throws(PathTemplateError) -> Destination {
        guard try URLTemplate(endpoint).isConstant else {
            throw PathTemplateError(message: "a resumable-upload endpoint is one URL for all uploads; placeholders "
                + "are not allowed here")
        }
        guard RUFHSettings.interopVersions.contains(interopVersion) else {
            throw PathTemplateError(message: "interop version \(interopVersion) is not one of 6, 7, 8")
        }
        return Destination(name: name, url: endpoint,
                           settings: .rufh(RUFHSettings(endpoint: endpoint, interopVersion: interopVersion,
                                                        chunkSize: chunkSize)), http: http)
    }

    /// A destination that PUTs each file whole to `url`, a template such as `https://dav.example.com/{date}/{name}`.
    public static func httpPut(name: String, url: String, http: HTTPSettings = HTTPSettings())
        throws(PathTemplateError) -> Destination
    {
        Destination(name: name, url: url, settings: .httpPut(HTTPPutSettings(url: try URLTemplate(url))), http: http)
    }

    /// A destination that POSTs each file as `multipart/form-data` to `url`, the file in `formField`.
    public static func httpPost(name: String, url: String, formField: String = "file", http: HTTPSettings = HTTPSettings())
        throws(PathTemplateError) -> Destination
    {
        Destination(name: name, url: url,
                    settings: .httpPost(HTTPPostSettings(url: try URLTemplate(url), formField: formField)), http: http)
    }
}
