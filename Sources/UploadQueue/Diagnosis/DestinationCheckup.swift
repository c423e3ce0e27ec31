import Foundation

/// The doctor's check of one destination: one harmless request, as the circuit breaker's probe sends it, with the
/// destination's own credentials, CA and headers. It tells which step failed (DNS, TCP, TLS, the credentials, the
/// server), and compares the server's clock with ours.
///
/// The requests write nothing: tus and RUFH `OPTIONS`, S3 `HeadBucket` (and, when that is refused, a
/// `GetBucketLocation` for S3's error code), a `HEAD` on an http-put/post server or a minting backend, and
/// Companion's `GET /s3/params`. A `mint_command` is not run (it could mint); only its program is looked at.
struct DestinationCheckup: Sendable {
    let configuration: Configuration
    /// The longest wait to connect, or for an answer that stopped coming.
    let timeout: Duration
    let engine = TransferEngine()

    /// Beyond this gap between our clock and a server's, SigV4 signatures are refused (S3 allows 15 minutes) and
    /// presigned URLs expire early or start late: five minutes, as Kerberos and most S3-compatible stores allow.
    static let clockSkewLimit: TimeInterval = 300

    func examine(_ configured: Destination) async -> [DoctorFinding] {
        var destination = configured
        destination.http = bounded(destination.http)
        var mint = configuration.mint
        mint.http = bounded(mint.http)
        let check = "destination \(destination.name)"
        let section = "[destinations.\(destination.name)]"
        switch destination.settings {
        case .localDirectory(let local):
            return [localDirectory(local.directory, check: check)]
        case .tus(let tus):
            let client = DestinationClient(destination: destination, engine: engine)
            return await probe(check, "OPTIONS", tus.endpoint, http: destination.http, section: section) {
                () throws(TransferFailure) in
                try await client.send("OPTIONS", tus.endpoint, headers: [HTTPHeader("Tus-Resumable", "1.0.0")])
            } judge: { response in
                guard response.isSuccess else { return nil }
                guard let versions = response.header("Tus-Version"), versions.contains("1.0.0") else {
                    return DoctorFinding(check, .warning, "OPTIONS \(URLRedaction.redact(tus.endpoint)) answered "
                        + "\(response.status) without Tus-Version 1.0.0: is this a tus endpoint?",
                        fix: "check url of [destinations.\(destination.name)] (a tus server's creation URL, such as /files/)")
                }
                return nil
            }
        case .rufh(let rufh):
            let client = DestinationClient(destination: destination, engine: engine)
            return await probe(check, "OPTIONS", rufh.endpoint, http: destination.http, section: section) {
                () throws(TransferFailure) in
                try await client.send("OPTIONS", rufh.endpoint)
            }
        case .httpPut(let put):
            return await wholeFile(put.target, destination: destination, mint: mint, check: check)
        case .httpPost(let post):
            return await wholeFile(post.target, destination: destination, mint: mint, check: check)
        case .s3(let settings):
            return await s3(settings, destination: destination, check: check)
        case .mintedS3(let minted):
            let companion = CompanionClient(base: minted.base, destination: destination.name, settings: mint, engine: engine)
            let url = companion.base + "/s3/params"
            return await probe(check, "GET", url, http: mint.http, section: "[mint]") {
                () throws(TransferFailure) in
                try await companion.client.send("GET", url, headers: [HTTPHeader("Accept", "application/json")])
            }
        }
    }

    // MARK: Kinds of destination

    private func localDirectory(_ directory: String, check: String) -> DoctorFinding {
        var info = stat()
        guard stat(directory, &info) == 0 else {
            let parent = (directory as NSString).deletingLastPathComponent
            if access(parent, W_OK | X_OK) == 0 || errno == ENOENT {
                return DoctorFinding(check, .info, "\(directory) does not exist yet: it is made with the first upload")
            }
            return DoctorFinding(check, .failure, "\(directory) does not exist and \(parent) is not writable",
                                 fix: "install -d -o DAEMON_USER \(directory)")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            return DoctorFinding(check, .failure, "\(directory) is not a directory", fix: "set url = \"file:///a/directory\"")
        }
        guard access(directory, W_OK | X_OK) == 0 else {
            return DoctorFinding(check, .failure, "\(directory) is not writable by \(LocalCheckup.userName(geteuid())) "
                + "(owner \(LocalCheckup.userName(info.st_uid)), mode \(LocalCheckup.octal(info.st_mode & 0o7777)))",
                fix: "chown DAEMON_USER \(directory), or run uploadq doctor as the daemon's user")
        }
        let free = DiskSpace.of(path: directory).map { ", \(ByteCountText.text($0.available)) free" } ?? ""
        return DoctorFinding(check, .ok, "\(directory) is writable\(free)")
    }

    private func wholeFile(_ target: WholeFileTarget, destination: Destination, mint: MintSettings, check: String)
        async -> [DoctorFinding]
    {
        switch target {
        case .template:
            let client = DestinationClient(destination: destination, engine: engine)
            let url = destination.serverURL ?? destination.url
            return await probe(check, "HEAD", url, http: destination.http, section: "[destinations.\(destination.name)]") {
                () throws(TransferFailure) in
                try await client.send("HEAD", url)
            }
        case .minted(.url(let url)):
            let minter = Minter(source: .url(url), destination: destination.name, settings: mint, engine: engine)
            return await probe(check, "HEAD", url, http: mint.http, section: "[mint]") { () throws(TransferFailure) in
                try await minter.client.send("HEAD", url)
            }
        case .minted(.command(let arguments, _, _)):
            let program = arguments.first ?? ""
            let path = program.contains("/") ? program : Self.onPath(program)
            guard let path, access(path, X_OK) == 0 else {
                return [DoctorFinding(check, .failure, "mint_command's program \(program) is not an executable file",
                                      fix: "install it, or fix mint_command of [destinations.\(destination.name)]")]
            }
            return [DoctorFinding(check, .ok, "mint_command's program \(path) is executable (not run: it would mint)")]
        }
    }

    private func s3(_ settings: S3Settings, destination: Destination, check: String) async -> [DoctorFinding] {
        let client = S3Client(destination: destination, settings: settings, engine: engine)
        return await probe(check, "HEAD", settings.bucketURL, http: destination.http,
                           section: "[destinations.\(destination.name)]") { () throws(TransferFailure) in
            try await client.send("HEAD", key: nil)
        } judge: { response in
            guard !response.isSuccess else { return nil }
            // A HEAD answer has no body: S3's error code comes from GetBucketLocation.
            let located = try? await client.send("GET", key: nil, query: [("location", "")])
            return s3Verdict(located ?? response, settings: settings, destination: destination, check: check)
        }
    }

    private func s3Verdict(_ response: HTTPResponse, settings: S3Settings, destination: Destination, check: String)
        -> DoctorFinding
    {
        let place = "[destinations.\(destination.name)]"
        guard let reply = S3ErrorReply(response) else {
            if response.isSuccess {
                return DoctorFinding(check, .warning, "HeadBucket was refused, but GetBucketLocation answered "
                    + "\(response.status): the key may lack s3:ListBucket on \(settings.bucket); uploads need only "
                    + "s3:PutObject and the multipart actions")
            }
            return DoctorFinding(check, .failure, "bucket \(settings.bucket) answered HTTP \(response.status)",
                                 fix: "check endpoint, bucket and region of \(place)")
        }
        let said = "HTTP \(response.status) \(reply.summary)"
        let keys: String
        switch settings.credentials {
        case .environment(let access, let secret, _): keys = "the keys in $\(access) and $\(secret)"
        case .sharedFile(let path, let profile): keys = "profile \(profile) of \(path)"
        case .standard(let profile): keys = "the AWS credentials (profile \(profile ?? "default"), or $AWS_ACCESS_KEY_ID)"
        }
        switch reply.code {
        case "SignatureDoesNotMatch":
            return DoctorFinding(check, .failure, "\(said): the secret key does not belong to the access key",
                                 fix: "set the right secret key in \(keys) (\(place))")
        case "InvalidAccessKeyId", "InvalidToken", "ExpiredToken":
            return DoctorFinding(check, .failure, "\(said): the store does not accept the access key or session token",
                                 fix: "fix \(keys) (\(place))")
        case "AccessDenied", "AllAccessDisabled":
            return DoctorFinding(check, .warning, "\(said): the key is accepted but may not list bucket "
                + "\(settings.bucket); uploads need only s3:PutObject and the multipart actions",
                fix: "grant s3:ListBucket on \(settings.bucket) to see this check pass, or ignore it")
        case "NoSuchBucket":
            return DoctorFinding(check, .failure, "\(said)", fix: "create bucket \(settings.bucket), or fix bucket of \(place)")
        case "AuthorizationHeaderMalformed", "PermanentRedirect", "IllegalLocationConstraintException", "InvalidRegion":
            return DoctorFinding(check, .failure, "\(said): the bucket lives in another region",
                                 fix: "set region (now \(settings.region)) and endpoint of \(place)")
        case "RequestTimeTooSkewed":
            return DoctorFinding(check, .failure, "\(said)", fix: Self.clockFix)
        default:
            return DoctorFinding(check, .failure, said, fix: "check endpoint, bucket, region and credentials of \(place)")
        }
    }

    // MARK: The request

    /// Sends one request and turns what happened into findings: which step failed, or what the answer says,
    /// then the clock. `judge` may speak first about an answer (nil: the usual reading of its status).
    /// `section` is where the request's settings are written (`[destinations.NAME]` or `[mint]`), for the fixes.
    private func probe(_ check: String, _ method: String, _ url: String, http: HTTPSettings, section: String,
                       send: () async throws(TransferFailure) -> HTTPResponse,
                       judge: (HTTPResponse) async -> DoctorFinding? = { _ in nil }) async -> [DoctorFinding] {
        let shown = URLRedaction.redact(url)
        let origin = URLOrigin(url: url)
        let host = origin.map { "\($0.host):\($0.port)" } ?? shown
        let tls = origin?.scheme == "https"
        let response: HTTPResponse
        do {
            response = try await send()
        } catch {
            return [failure(error, check: check, host: host, http: http, section: section)]
        }
        var findings: [DoctorFinding] = []
        if let verdict = await judge(response) {
            findings.append(verdict)
        } else if response.status == 401 || response.status == 403 {
            let configured = Self.credentialsText(http)
            findings.append(DoctorFinding(check, .failure, "\(method) \(shown) answered \(response.status): the server "
                + "refuses " + (configured.map { "the credentials (\($0))" } ?? "requests without credentials"),
                fix: configured == nil ? "set token_env, token_file or token_command in \(section)"
                    : "check the token \(configured ?? "") gives, in \(section)"))
        } else if response.status >= 500 || response.status == 408 || response.status == 429 {
            findings.append(DoctorFinding(check, .failure, "\(method) \(shown) answered \(response.status): the server "
                + "is reachable but not well", fix: "look at the server's own logs; uploads retry on their schedule"))
        }
        if let date = response.date {
            let skew = date.timeIntervalSinceNow
            if abs(skew) > Self.clockSkewLimit {
                let minutes = Int((abs(skew) / 60).rounded())
                findings.append(DoctorFinding(check, .failure, "this machine's clock is \(minutes) minutes "
                    + "\(skew < 0 ? "ahead of" : "behind") \(host)'s (its Date: header): SigV4 signatures and presigned "
                    + "URLs fail beyond 5 minutes", fix: Self.clockFix))
            }
        }
        if findings.isEmpty {
            let steps = "DNS, TCP" + (tls ? ", TLS (\(http.caFile.map { "ca_file \($0)" } ?? "system CAs"))" : "")
            let skew = response.date.map { " clock within \(Int(abs($0.timeIntervalSinceNow).rounded())) s of the server's;" } ?? ""
            let credentials = Self.credentialsText(http).map { " with \($0)" } ?? ""
            findings.append(DoctorFinding(check, .ok, "\(host): \(steps);\(skew) \(method) \(shown)\(credentials) "
                + "answered \(response.status)"))
        }
        return findings
    }

    /// The step a failed request stopped at, and what fixes it.
    private func failure(_ failure: TransferFailure, check: String, host: String, http: HTTPSettings,
                         section: String) -> DoctorFinding {
        switch failure.code {
        case "dns":
            return DoctorFinding(check, .failure, "DNS: cannot resolve \(host): \(failure.message)",
                                 fix: "check the host name in \(section), and /etc/resolv.conf (resolvectl status)")
        case "connect":
            return DoctorFinding(check, .failure, "TCP: \(host) does not accept connections: \(failure.message)",
                                 fix: "is the server running, and reachable from here (port, firewall, proxy)?")
        case "tls-verification":
            let fix = http.caFile.map { "\($0) does not hold the CA that signed \(host)'s certificate: set ca_file in \(section) to the one that does" }
                ?? "set ca_file = \"/path/to/ca.pem\" (the CA that signed \(host)'s certificate) in \(section)"
            return DoctorFinding(check, .failure, "TLS: \(host)'s certificate is not trusted by "
                + (http.caFile.map { "ca_file \($0)" } ?? "the system CAs") + ": \(failure.message)", fix: fix)
        case "tls":
            return DoctorFinding(check, .failure, "TLS: the handshake with \(host) failed: \(failure.message)",
                                 fix: "check that \(host) speaks TLS on that port (https:// vs http://)")
        case "timeout", "stall":
            return DoctorFinding(check, .failure, "\(host) gave no answer within \(ConfigurationValues.durationText(timeout)): "
                + failure.message, fix: "is the server overloaded, or something between dropping packets?")
        default:
            return DoctorFinding(check, .failure, failure.message,
                                 fix: failure.code == "credentials" || failure.code == "token"
                                    ? "check the credentials of \(section)" : "check \(section)")
        }
    }

    // MARK: Pieces

    static let clockFix = "set the clock: timedatectl set-ntp true (systemd-timesyncd or chrony), then check "
        + "timedatectl status"

    /// Which credentials a request carried, named, never shown.
    private static func credentialsText(_ http: HTTPSettings) -> String? {
        switch http.credentials {
        case nil: nil
        case .environment(let variable): "token_env \(variable)"
        case .file(let path): "token_file \(path)"
        case .command(let arguments, _, _): "token_command \(arguments.first ?? "")"
        }
    }

    /// A doctor waits `timeout` at most, to connect and for an answer that stopped coming.
    private func bounded(_ http: HTTPSettings) -> HTTPSettings {
        var copy = http
        copy.connectTimeout = min(copy.connectTimeout, timeout)
        copy.stall.window = min(copy.stall.window, timeout)
        copy.stall.averageWindow = min(copy.stall.averageWindow, timeout)
        return copy
    }

    private static func onPath(_ program: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(program)" }.first { access($0, X_OK) == 0 }
    }
}
