import CUploadQueueSystem
import Foundation
import Testing
@testable import UploadQueue

/// The spool is untrusted input: sidecars are read without trusting what they are, and carry only the authority
/// the config gives (destinations, `on_metered`, patch targets).
@Suite(.serialized)
struct SpoolTrustTests {
    // MARK: reading a sidecar

    @Test("a sidecar that is a FIFO, a link to /dev/zero, a directory or 10 MiB is refused at once, without reading it")
    func hostileSidecarFiles() throws {
        let sandbox = try Sandbox()
        let root = sandbox.root
        #expect(mkfifo(root + "/fifo.jpg.uploadq.json", 0o600) == 0)
        #expect(symlink("/dev/zero", root + "/zero.jpg.uploadq.json") == 0)
        try FileManager.default.createDirectory(atPath: root + "/dir.jpg.uploadq.json", withIntermediateDirectories: false)
        try sandbox.makeFile(root + "/big.jpg.uploadq.json", size: 10 << 20, seed: 1)

        let started = ContinuousClock.now
        func refusal(_ name: String) -> String {
            do {
                _ = try Sidecar.read(at: root + "/" + name)
                return "read"
            } catch {
                return error.message
            }
        }
        #expect(refusal("fifo.jpg.uploadq.json").contains("is a FIFO"))
        #expect(refusal("zero.jpg.uploadq.json").contains("symbolic link"))
        #expect(refusal("dir.jpg.uploadq.json").contains("is a directory"))
        #expect(refusal("big.jpg.uploadq.json").contains("larger than 64 KiB"))
        #expect(ContinuousClock.now - started < .seconds(2), "nothing blocked")
    }

    @Test("a regular sidecar up to 64 KiB is read; none at all is no sidecar")
    func ordinarySidecar() throws {
        let sandbox = try Sandbox()
        let path = sandbox.root + "/a.jpg.uploadq.json"
        #expect(try Sidecar.read(at: path) == nil)
        // Padded with spaces to exactly the limit: still a sidecar.
        let json = #"{"priority": 3}"#
        try Data((json + String(repeating: " ", count: Sidecar.maximumSize - json.utf8.count)).utf8)
            .write(to: URL(fileURLWithPath: path))
        #expect(try Sidecar.read(at: path)?.priority == 3)
        try Data((json + String(repeating: " ", count: Sidecar.maximumSize + 1 - json.utf8.count)).utf8)
            .write(to: URL(fileURLWithPath: path))
        #expect(throws: SidecarError.self) { try Sidecar.read(at: path) }
    }

    // MARK: what a sidecar may choose

    func policy(spool spoolKeys: String = "", patch: String = "") throws -> SidecarPolicy {
        let configuration = try ConfigurationLoader.parse("""
            [spool]
            dir = "/tmp/spool"
            destination = "open"
            \(spoolKeys)
            [destinations.open]
            protocol = "http-put"
            url = "http://127.0.0.1:9/open/{name}"
            on_metered = "allow"
            [destinations.careful]
            protocol = "http-put"
            url = "http://127.0.0.1:9/careful/{name}"
            on_metered = "allow-below:1MiB"
            [destinations.frugal]
            protocol = "http-put"
            url = "http://127.0.0.1:9/frugal/{name}"
            on_metered = "defer"
            [destinations.local]
            protocol = "file"
            url = "file:///tmp/local"
            [patch]
            token_env = "UPLOADQ_TEST_TOKEN"
            \(patch)
            """, file: "/etc/uploadq/test.toml", baseDirectory: "/tmp")
        return SidecarPolicy(configuration: configuration, spool: try #require(configuration.spool))
    }

    func sidecar(_ json: String) throws -> Sidecar {
        try Sidecar(json: Data(json.utf8))
    }

    /// Every destination listed for sidecars.
    static let allListed = #"sidecar_destinations = ["open", "careful", "frugal", "local"]"#

    @Test("sidecar_destinations: a sidecar picks only among those listed; by default the spool's own alone")
    func destinations() throws {
        let plain = try policy()
        #expect(plain.refusal(of: try sidecar(#"{"destination": "open"}"#)) == nil, "the spool's own")
        let refused = try #require(plain.refusal(of: try sidecar(#"{"destination": "frugal"}"#)),
                                   "a destination the admin added for the CLI is no dropper's")
        #expect(refused.contains("\"frugal\"") && refused.contains("by default only the spool's own"), "\(refused)")
        let open = try policy(spool: Self.allListed)
        #expect(open.refusal(of: try sidecar(#"{"destination": "frugal"}"#)) == nil)
        let narrow = try policy(spool: #"sidecar_destinations = ["careful"]"#)
        #expect(narrow.refusal(of: try sidecar(#"{"destination": "careful"}"#)) == nil)
        let why = try #require(narrow.refusal(of: try sidecar(#"{"destination": "open"}"#)))
        #expect(why.contains("\"open\"") && why.contains("sidecar_destinations") && why.contains("\"careful\""))
        #expect(narrow.refusal(of: try sidecar(#"{"priority": -1}"#)) == nil, "the spool's own destination needs no listing")
    }

    @Test("lanes and groups: a sidecar names only those under a prefix of sidecar_lanes and sidecar_groups (none by default)")
    func lanesAndGroups() throws {
        let none = try policy()
        let lane = try #require(none.refusal(of: try sidecar(#"{"lane": "events-1"}"#)))
        #expect(lane.contains("sidecar_lanes") && lane.contains("it lists none"), "\(lane)")
        let group = try #require(none.refusal(of: try sidecar(#"{"group": "survey-1"}"#)))
        #expect(group.contains("sidecar_groups") && group.contains("it lists none"), "\(group)")
        let listed = try policy(spool: #"sidecar_lanes = ["events-"]"# + "\n" + #"sidecar_groups = ["survey-"]"#)
        #expect(listed.refusal(of: try sidecar(#"{"lane": "events-1", "group": "survey-9", "after": []}"#)) == nil)
        #expect(listed.refusal(of: try sidecar(#"{"group": "other"}"#))?.contains("\"survey-\"") == true)
        #expect(throws: SidecarError.self) { try sidecar(#"{"group": ""}"#) }
        #expect(throws: SidecarError.self) { try sidecar(#"{"group": 42}"#) }
    }

    @Test("meta: a sidecar sets only the keys sidecar_meta_keys lists (none by default)")
    func metaKeys() throws {
        let why = try #require(try policy().refusal(of: try sidecar(#"{"meta": {"album": "x"}}"#)))
        #expect(why.contains("\"album\"") && why.contains("sidecar_meta_keys") && why.contains("it lists none"))
        let listed = try policy(spool: #"sidecar_meta_keys = ["album", "survey"]"#)
        #expect(listed.refusal(of: try sidecar(#"{"meta": {"album": "x", "survey": "42"}}"#)) == nil)
        let extra = try #require(listed.refusal(of: try sidecar(#"{"meta": {"album": "x", "token": "y"}}"#)))
        #expect(extra.contains("\"token\"") && extra.contains("\"album\", \"survey\""), "\(extra)")
    }

    @Test("priority: capped at 0 by default and below urgent_priority; sidecar_max_priority sets the cap")
    func priorityCap() throws {
        let plain = try policy()
        #expect(plain.refusal(of: try sidecar(#"{"priority": 0}"#)) == nil)
        #expect(plain.refusal(of: try sidecar(#"{"priority": -5}"#)) == nil, "lowering its own files is allowed")
        let why = try #require(plain.refusal(of: try sidecar(#"{"priority": 1}"#)))
        #expect(why.contains("above 0") && why.contains("sidecar_max_priority"), "\(why)")
        let spool = Configuration.Spool(directory: "/tmp/spool")
        #expect(SidecarPolicy.priorityCap(spool: spool, urgentPriority: 100) == 0)
        #expect(SidecarPolicy.priorityCap(spool: spool, urgentPriority: -3) == -4, "always below urgent")
        var raised = spool
        raised.sidecarMaxPriority = 50
        #expect(SidecarPolicy.priorityCap(spool: raised, urgentPriority: 10) == 50, "the admin's own choice")
        let capped = try policy(spool: "sidecar_max_priority = 5")
        #expect(capped.refusal(of: try sidecar(#"{"priority": 5}"#)) == nil)
        #expect(capped.refusal(of: try sidecar(#"{"priority": 1000000}"#))?.contains("above 5") == true)
    }

    @Test("on_metered: a sidecar may make it stricter, never looser, unless sidecar_may_allow_metered")
    func meteredOnlyStricter() throws {
        let strict = try policy(spool: Self.allListed)
        // careful allows below 1 MiB: defer and smaller limits are stricter; allow and larger limits are looser.
        for (chosen, allowed) in [("defer", true), ("allow-below:512KiB", true), ("allow-below:1MiB", true),
                                  ("allow-below:2MiB", false), ("allow", false)] {
            let verdict = strict.refusal(of: try sidecar(#"{"destination": "careful", "on_metered": "\#(chosen)"}"#))
            #expect((verdict == nil) == allowed, "\(chosen): \(verdict ?? "allowed")")
        }
        let why = try #require(strict.refusal(of: try sidecar(#"{"destination": "frugal", "on_metered": "allow"}"#)))
        #expect(why.contains("looser") && why.contains("sidecar_may_allow_metered"))
        // The spool's default destination is the baseline when the sidecar names none.
        #expect(strict.refusal(of: try sidecar(#"{"on_metered": "allow"}"#)) == nil, "open allows everything already")
        #expect(strict.refusal(of: try sidecar(#"{"destination": "local", "on_metered": "allow"}"#)) == nil,
                "a local directory takes no link")
        let trusting = try policy(spool: "sidecar_may_allow_metered = true\n" + Self.allListed)
        #expect(trusting.refusal(of: try sidecar(#"{"destination": "frugal", "on_metered": "allow"}"#)) == nil)
    }

    @Test("on_metered = always: a sidecar cannot exempt its file from the metered budget where the config does not")
    func alwaysIsLooserThanAllow() throws {
        let strict = try policy()
        let why = try #require(strict.refusal(of: try sidecar(#"{"on_metered": "always"}"#)), "open only allows")
        #expect(why.contains("looser") && why.contains("\"always\""))
        #expect(MeteredPolicy.always.isLooser(than: .allow) && !MeteredPolicy.allow.isLooser(than: .always))
        let trusting = try policy(spool: "sidecar_may_allow_metered = true")
        #expect(trusting.refusal(of: try sidecar(#"{"on_metered": "always"}"#)) == nil)
    }

    @Test("patch targets: none unless allowed_urls lists their prefix; no query, no body; only headers sidecar_headers lists")
    func patchTargets() throws {
        func patch(_ url: String, method: String? = nil, headers: [String: String] = [:]) throws -> Sidecar {
            var fields: [String: Any] = ["url": url]
            if let method { fields["method"] = method }
            if !headers.isEmpty { fields["headers"] = headers }
            return try Sidecar(json: JSONSerialization.data(withJSONObject: ["patch": fields]))
        }
        let none = try policy()
        let refused = try #require(none.refusal(of: try patch("https://api.example.com/photos/1")))
        #expect(refused.contains("allowed_urls") && refused.contains("none is listed"))

        let allowed = try policy(patch: #"allowed_urls = ["https://api.example.com/photos/", "http://127.0.0.1:8080/r"]"#)
        #expect(allowed.refusal(of: try patch("https://api.example.com/photos/1")) == nil)
        #expect(allowed.refusal(of: try patch("https://API.example.com:443/photos/1", method: "PUT")) == nil)
        for url in ["https://api.example.com/photos/1?_method=DELETE", "https://api.example.com/photos/1#x",
                    "https://api.example.com/photos/1?"] {
            let why = allowed.refusal(of: try patch(url))
            #expect(why?.contains("query or fragment") == true, "\(url): \(why ?? "allowed")")
        }
        #expect(throws: SidecarError.self, "the body goes out with the token: the config's template alone") {
            try Sidecar(json: Data(#"{"patch": {"url": "https://api.example.com/photos/1", "body": "{\"_method\": \"DELETE\"}"}}"#.utf8))
        }
        #expect(allowed.refusal(of: try patch("http://127.0.0.1:8080/r/7", method: "POST")) == nil)
        for url in ["https://api.example.com/admin/1", "http://api.example.com/photos/1", "https://api.example.com:8443/photos/1",
                    "https://evil.example.com/photos/1", "https://api.example.com/photos/../admin",
                    "https://api.example.com/photos/%2e%2e/admin", "https://api.example.com/photos/..%2Fadmin",
                    "https://user@api.example.com/photos/1", "http://127.0.0.1:8080/records/7"] {
            let why = allowed.refusal(of: try patch(url))
            #expect(why?.contains("not under any of [patch] allowed_urls") == true, "\(url): \(why ?? "allowed")")
        }
        #expect(allowed.refusal(of: try patch("https://api.example.com/photos/1", method: "DELETE"))?.contains("DELETE") == true)
        for header in ["Authorization", "cookie", "Host", "Proxy-Authorization", "Content-Length", "Transfer-Encoding"] {
            let why = allowed.refusal(of: try patch("https://api.example.com/photos/1", headers: [header: "x"]))
            #expect(why?.contains(header) == true, "\(header): \(why ?? "allowed")")
        }
        let unlisted = allowed.refusal(of: try patch("https://api.example.com/photos/1", headers: ["X-Record": "r-1"]))
        #expect(unlisted?.contains("sidecar_headers does not list") == true, "by allowlist: \(unlisted ?? "allowed")")
        let listing = try policy(patch: #"allowed_urls = ["https://api.example.com/photos/"]"# + "\n"
            + #"sidecar_headers = ["X-Record", "If-Match"]"#)
        #expect(listing.refusal(of: try patch("https://api.example.com/photos/1", headers: ["x-record": "r-1", "If-Match": "\"e1\""])) == nil)
        #expect(listing.refusal(of: try patch("https://api.example.com/photos/1", headers: ["X-Other": "1"])) != nil)
        for header in ["X-Forwarded-Host", "Forwarded", "X-HTTP-Method-Override", "X-Original-URL"] {
            let why = allowed.refusal(of: try patch("https://api.example.com/photos/1", headers: [header: "x"]))
            #expect(why?.contains(header) == true, "\(header): \(why ?? "allowed")")
        }
        for url in ["https://api.example.com/photos/..;/admin", "https://api.example.com/photos/%252e%252e%252fadmin"] {
            #expect(allowed.refusal(of: try patch(url))?.contains("allowed_urls") == true, "\(url)")
        }
    }

    @Test("allowed_urls prefixes: segment boundaries, default ports, and no way out by normalisation")
    func prefixes() throws {
        let prefix = try #require(PatchURLPrefix("https://api.example.com/photos"))
        #expect(prefix.description == "https://api.example.com/photos")
        #expect(prefix.admits("https://api.example.com/photos"))
        #expect(prefix.admits("https://api.example.com/photos/1"))
        #expect(!prefix.admits("https://api.example.com/photos-old/1"))
        #expect(!prefix.admits("https://api.example.com/photos/./1"))
        #expect(!prefix.admits("https://api.example.com/photos\\..\\admin"))
        #expect(try #require(PatchURLPrefix("http://h:80")).admits("http://h/anything"))
        #expect(try #require(PatchURLPrefix("http://[::1]:8080/r/")).admits("http://[::1]:8080/r/7"), "IPv6")
        // A port too large for Foundation is not the default port (found by the templates fuzzer).
        #expect(!(try #require(PatchURLPrefix("https://as."))).admits("https://as.:" + String(repeating: "5", count: 70) + "3?"))
        #expect(try #require(PatchURLPrefix("http://h:8080/")).description == "http://h:8080/")
        for bad in ["ftp://h/", "https:///x", "https://u:p@h/", "https://h/x?y=1", "https://h/a/../b", "h/x", ""] {
            #expect(PatchURLPrefix(bad) == nil, "\(bad)")
        }
    }

    @Test("config: sidecar_destinations must name configured destinations; allowed_urls must be URL prefixes")
    func configuration() throws {
        #expect(throws: ConfigurationError.self) { try policy(spool: #"sidecar_destinations = ["nowhere"]"#) }
        for header in ["Authorization", "Host", "X-Forwarded-For", "Proxy-Authorization", "bad header"] {
            do {
                _ = try policy(patch: "sidecar_headers = [\"\(header)\"]")
                Issue.record("sidecar_headers took \(header)")
            } catch let error as ConfigurationError {
                #expect(error.key == "patch.sidecar_headers", "\(error)")
            }
        }
        do {
            _ = try policy(patch: #"allowed_urls = ["https://h/a?q=1"]"#)
            Issue.record("a prefix with a query was accepted")
        } catch let error as ConfigurationError {
            #expect(error.key == "patch.allowed_urls" && error.message.contains("URL prefix"))
        }
    }

    // MARK: files still being written

    @Test("the writer check: a lease's answer decides; without one, /proc; where /proc cannot see all, the events")
    func writerDecision() {
        var scanned = 0
        func scan(_ answer: Int32) -> () -> Int32 { { scanned += 1; return answer } }
        #expect(WriterCheck.decide(lease: 1, scan: scan(0), eventsSayOpen: false))
        #expect(!WriterCheck.decide(lease: 0, scan: scan(1), eventsSayOpen: true), "a lease granted: nobody writes")
        #expect(scanned == 0, "no scan while leases answer")
        #expect(WriterCheck.decide(lease: -1, scan: scan(1), eventsSayOpen: false))
        #expect(!WriterCheck.decide(lease: -1, scan: scan(0), eventsSayOpen: true), "every process seen, none writes")
        #expect(WriterCheck.decide(lease: -1, scan: scan(2), eventsSayOpen: true), "some unseen: the events decide")
        #expect(!WriterCheck.decide(lease: -1, scan: scan(2), eventsSayOpen: false))
        #expect(WriterCheck.decide(lease: -1, scan: scan(-1), eventsSayOpen: true))
        // Network file systems: only a file renamed in is taken after the ordinary quiet period.
        let quiet = Duration.milliseconds(300), network = Duration.seconds(30)
        #expect(WriterCheck.requiredQuiet(quietPeriod: quiet, networkQuietPeriod: network, onNetworkFileSystem: true,
                                          renamedIn: false) == network)
        #expect(WriterCheck.requiredQuiet(quietPeriod: quiet, networkQuietPeriod: network, onNetworkFileSystem: true,
                                          renamedIn: true) == quiet)
        #expect(WriterCheck.requiredQuiet(quietPeriod: quiet, networkQuietPeriod: network, onNetworkFileSystem: false,
                                          renamedIn: false) == quiet)
    }

    @Test("/proc finds a process holding a file open for writing, and not one holding it open to read")
    func writerScan() throws {
        let sandbox = try Sandbox()
        let path = try sandbox.makeFile(sandbox.root + "/w.jpg", size: 10, seed: 1)
        #expect(uploadq_writer_scan(path) != 1)
        let reader = open(path, O_RDONLY)
        #expect(uploadq_writer_scan(path) != 1, "a reader is no writer")
        let writer = open(path, O_WRONLY | O_APPEND)
        #expect(uploadq_writer_scan(path) == 1)
        close(writer)
        close(reader)
        #expect(uploadq_writer_scan(path) != 1)
        #expect(uploadq_writer_scan(sandbox.root + "/missing") == -1)
        // Root sees every process: "nobody writes" is a complete answer.
        if getuid() == 0 { #expect(uploadq_writer_scan(path) == 0) }
    }

    @Test("a writer that pauses 90 s mid-file keeps it out; once it closes, the whole file is uploaded, once")
    func pausingWriter() async throws {
        let sandbox = try Sandbox()
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        try FileManager.default.createDirectory(atPath: sandbox.spool, withIntermediateDirectories: true)
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let path = sandbox.spool + "/slow.jpg"
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        let writer = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        let first = Data(repeating: 0x41, count: 100_000), second = Data(repeating: 0x42, count: 100_000)
        writer.write(first)
        // Longer than the 60 s after which a quiet writer's file used to be taken anyway.
        for _ in 0..<18 {
            try await Task.sleep(for: .seconds(5))
            #expect(try store.jobs().isEmpty, "slow.jpg was taken while its writer held it open")
        }
        writer.write(second)
        try writer.close()
        let taken = try await eventually(timeout: .seconds(30)) { try store.jobs().first?.state == .uploaded }
        #expect(taken, "daemon log:\n\(daemon.log.suffix(4000))")
        let jobs = try store.jobs()
        #expect(jobs.count == 1 && jobs.first?.size == Int64(first.count + second.count))
        let remote = try #require(jobs.first?.remoteURL.flatMap(URL.init(string:)))
        #expect(try Data(contentsOf: remote) == first + second)
        #expect(await daemon.terminate() < .seconds(5))
    }

    // MARK: names are data

    @Test("control characters, C1 controls and bidi overrides are escaped; other text is kept")
    func escaping() {
        #expect(SafeText.escaped("evil\n<0>\u{1B}[2Jname.jpg") == "evil\\n<0>\\x1b[2Jname.jpg")
        #expect(SafeText.escaped("a\tb\rc\u{7F}\u{9B}d") == "a\\tb\\rc\\x7f\\u{9b}d")
        #expect(SafeText.escaped("photo\u{202E}gpj.exe") == "photo\\u{202e}gpj.exe")
        #expect(SafeText.escaped("Été 🌅 фото.jpg") == "Été 🌅 фото.jpg")
        #expect(SafeText.escaped(bytes: [0x66, 0xFF, 0x5C, 0x2E, 0x0A]) == "f\\xff\\x5c.\\x0a")
    }

    /// A daemon (logging as under systemd: each line starts with its <N> priority, which a name must not forge)
    /// that took a file named with a newline, a forged `<0>`, an escape sequence and a bidi override, uploaded it
    /// and stopped.
    func uploadHostileName(_ sandbox: Sandbox, arguments: [String] = []) async throws -> (DaemonProcess, QueueStore, String) {
        let daemon = try DaemonProcess(sandbox: sandbox, environment: ["JOURNAL_STREAM": "8:1234"], arguments: arguments)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let name = "evil\n<0>forged\u{1B}[2J\u{202E}gpj.jpg"
        try sandbox.makeFile(sandbox.root + "/x", size: 500, seed: 1)
        #expect(rename(sandbox.root + "/x", sandbox.spool + "/" + name) == 0)
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let uploaded = try await eventually(timeout: .seconds(30)) { try store.jobs().first?.state == .uploaded }
        #expect(uploaded, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(5))
        return (daemon, store, name)
    }

    @Test("a name with a newline, a forged <0> and an escape sequence: escaped in the log, list, show and JSON")
    func hostileName() async throws {
        let sandbox = try Sandbox()
        let (daemon, store, name) = try await uploadHostileName(sandbox)
        let log = daemon.log
        #expect(log.contains("evil\\n<0>forged\\x1b[2J\\u{202e}gpj.jpg"), "\(log.suffix(2000))")
        #expect(!log.split(separator: "\n").contains { $0.hasPrefix("<0>") || $0.hasPrefix("forged") })
        #expect(!log.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\u{202E}" })

        let config = ["--config", sandbox.configPath]
        let id = try #require(try store.jobs().first?.id)
        for arguments in [["list"], ["show", id.rawValue], ["list", "--json"], ["show", id.rawValue, "--json"]] {
            let output = try await BinaryRunner.run(arguments + config)
            #expect(output.status == 0, "\(arguments): \(output.stderr)")
            #expect(!output.stdout.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\u{202E}" }, "\(arguments)")
            #expect(!output.stdout.split(separator: "\n").contains { $0.hasPrefix("<0>") || $0.hasPrefix("forged") },
                    "\(arguments): \(output.stdout)")
        }
        // JSON keeps the name itself, escaped the JSON way.
        let listed = try #require(try await BinaryRunner.run(["list", "--json"] + config).json() as? [[String: Any]])
        #expect(listed.first?["original_name"] as? String == name)
    }

    @Test("--log-format json: one object per line with job and destination; a hostile name stays in its string")
    func jsonLog() async throws {
        let sandbox = try Sandbox()
        let (daemon, store, name) = try await uploadHostileName(sandbox, arguments: ["--log-format", "json"])
        let id = try #require(try store.jobs().first?.id)
        var objects: [[String: Any]] = []
        for line in daemon.log.split(separator: "\n") {
            // Under journald the priority stays in front, so `journalctl -p` still filters.
            #expect(line.hasPrefix("<") && line.dropFirst(3).hasPrefix("{"), "\(line)")
            let object = try JSONSerialization.jsonObject(with: Data(line.dropFirst(3).utf8)) as? [String: Any]
            #expect(object?["time"] is String && object?["level"] is String && object?["message"] is String, "\(line)")
            if let object { objects.append(object) }
        }
        #expect(!daemon.log.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\u{202E}" })
        let aboutJob = objects.filter { $0["job"] as? String == id.rawValue }
        #expect(!aboutJob.isEmpty, "no line names the job: \(daemon.log.suffix(2000))")
        #expect(aboutJob.contains { $0["destination"] as? String == "default" })
        #expect(objects.contains { ($0["message"] as? String ?? "").contains(name)
            || (($0["fields"] as? [String: String])?.values.contains { $0.contains(name) } ?? false) },
                "the name is not kept whole inside a string")
    }

    @Test("a name that is not valid UTF-8 is rejected with a reason, not skipped for ever")
    func undecodableName() async throws {
        let sandbox = try Sandbox()
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let raw: [UInt8] = Array("caf".utf8) + [0xE9] + Array(".jpg".utf8)  // Latin-1 "café.jpg"
        let path = Array(sandbox.spool.utf8) + [UInt8(ascii: "/")] + raw + [0]
        let descriptor = path.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_WRONLY | O_CREAT | O_EXCL, 0o644) }
        }
        #expect(descriptor >= 0)
        #expect(write(descriptor, "bytes", 5) == 5)
        close(descriptor)
        let reasonPath = Array((sandbox.spool + "/.rejected/").utf8) + raw + Array(".reason.txt".utf8) + [0]
        let reasonExists = {
            reasonPath.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { access($0.baseAddress!, F_OK) == 0 }
            }
        }
        let rejected = await eventually(timeout: .seconds(20)) { reasonExists() }
        #expect(rejected, "daemon log:\n\(daemon.log.suffix(2000))")
        // Read through its byte path: Foundation would decode it, and look for another name.
        let reason = reasonPath.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { name -> String in
                let file = open(name.baseAddress!, O_RDONLY)
                guard file >= 0 else { return "" }
                defer { close(file) }
                var bytes = [UInt8](repeating: 0, count: 4096)
                let count = read(file, &bytes, bytes.count)
                return String(decoding: bytes.prefix(max(count, 0)), as: UTF8.self)
            }
        }
        #expect(reason.contains("caf\\xe9.jpg") && reason.contains("not valid UTF-8"), "\(reason)")
        // The reason is written before the log line: the line may come a moment later.
        #expect(await eventually(timeout: .seconds(5)) { daemon.log.contains("caf\\xe9.jpg") }, "\(daemon.log.suffix(2000))")
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("a spool on a file system of its own: the file and its sidecar are copied in, as examined")
    func crossDeviceSpool() async throws {
        let sandbox = try Sandbox(spool: "sidecar_meta_keys = [\"record\"]")
        let disk = try await TmpfsMount(at: sandbox.spool, size: "8m")
        #expect(mkdir(disk.path + "/.rejected", 0o700) == 0)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        try Data(#"{"meta": {"record": "r-7"}}"#.utf8).write(to: URL(fileURLWithPath: disk.path + "/a.jpg" + Sidecar.suffix))
        let source = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 300_000, seed: 9)
        let digest = try sha256(ofFile: source)
        #expect(FileManager.default.createFile(atPath: disk.path + "/.a.jpg.tmp", contents: try Data(contentsOf: URL(fileURLWithPath: source))))
        #expect(rename(disk.path + "/.a.jpg.tmp", disk.path + "/a.jpg") == 0)
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let uploaded = try await eventually(timeout: .seconds(30)) { try store.jobs().first?.state == .uploaded }
        #expect(uploaded, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(5))
        let job = try #require(try store.jobs().first)
        #expect(job.meta == ["record": "r-7"] && job.sha256 == digest)
        #expect(!FileManager.default.fileExists(atPath: disk.path + "/a.jpg"), "moved out of the spool")
        #expect(!FileManager.default.fileExists(atPath: disk.path + "/a.jpg" + Sidecar.suffix), "its sidecar too")
    }

    // MARK: end to end, with the real daemon

    @Test("hostile sidecars and a patch target outside allowed_urls are rejected with a reason; intake goes on, RSS flat")
    func daemonRejects() async throws {
        let allowedRecorder = try RecorderSession()
        let otherRecorder = try RecorderSession()
        let sandbox = try Sandbox(config: """
            [patch]
            allowed_urls = ["\(allowedRecorder.url("/records/"))"]
            """)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let spool = sandbox.spool
        let rejected = spool + "/.rejected"
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        try FileManager.default.createDirectory(atPath: spool, withIntermediateDirectories: true)

        func drop(_ name: String, sidecar: (String) throws -> Void, seed: UInt64) throws {
            try sidecar(spool + "/" + name + Sidecar.suffix)
            try sandbox.makeFile(sandbox.root + "/" + name, size: 1000, seed: seed)
            #expect(rename(sandbox.root + "/" + name, spool + "/" + name) == 0)
        }
        // A first file and its patch warm the daemon up (libcurl, SQLite's cache): the RSS is measured after.
        let inside: [String: Any] = ["patch": ["url": allowedRecorder.url("/records/r-2"), "method": "PUT"]]
        try drop("inside.jpg", sidecar: { try JSONSerialization.data(withJSONObject: inside).write(to: URL(fileURLWithPath: $0)) },
                 seed: 5)
        let warm = try await eventually(timeout: .seconds(30)) { try store.jobs().first?.patchState == .done }
        #expect(warm, "daemon log:\n\(daemon.log.suffix(4000))")
        let rssBefore = try Self.residentKiB(daemon.pid)
        try drop("fifo.jpg", sidecar: { #expect(mkfifo($0, 0o600) == 0) }, seed: 1)
        try drop("zero.jpg", sidecar: { #expect(symlink("/dev/zero", $0) == 0) }, seed: 2)
        try drop("big.jpg", sidecar: { try sandbox.makeFile($0, size: 32 << 20, seed: 3) }, seed: 3)
        let outside: [String: Any] = ["patch": ["url": otherRecorder.url("/records/r-1")]]
        try drop("outside.jpg", sidecar: { try JSONSerialization.data(withJSONObject: outside).write(to: URL(fileURLWithPath: $0)) },
                 seed: 4)
        try drop("plain.jpg", sidecar: { _ in }, seed: 6)
        // A hard link to a file of another user (and group), readable by that group alone: it could be one its
        // dropper cannot read.
        let foreign = try sandbox.makeFile(sandbox.root + "/foreign.jpg", size: 1000, seed: 7)
        #expect(chown(foreign, 65_534, 65_534) == 0 && chmod(foreign, 0o640) == 0)
        #expect(link(foreign, spool + "/foreign.jpg") == 0)
        // And to a private file of the spool's owner (the daemon's user: its token file, say).
        let secret = try sandbox.makeFile(sandbox.root + "/token.txt", size: 100, seed: 8)
        #expect(chmod(secret, 0o600) == 0)
        #expect(link(secret, spool + "/private.jpg") == 0)

        let settled = try await eventually(timeout: .seconds(30)) {
            let jobs = try store.jobs()
            return Set(jobs.map(\.originalName)) == ["inside.jpg", "plain.jpg"]
                && jobs.first { $0.originalName == "inside.jpg" }?.patchState == .done
                && ["fifo.jpg", "zero.jpg", "big.jpg", "outside.jpg", "foreign.jpg", "private.jpg"].allSatisfy {
                    FileManager.default.fileExists(atPath: rejected + "/\($0).reason.txt")
                }
        }
        #expect(settled, "daemon log:\n\(daemon.log.suffix(4000))")
        #expect(daemon.isRunning)
        func reason(_ name: String) throws -> String {
            try String(contentsOfFile: rejected + "/\(name).reason.txt", encoding: .utf8)
        }
        #expect(try reason("fifo.jpg").contains("FIFO"))
        #expect(try reason("zero.jpg").contains("symbolic link"))
        #expect(try reason("big.jpg").contains("larger than 64 KiB"))
        #expect(try reason("outside.jpg").contains("allowed_urls"))
        #expect(try reason("foreign.jpg").contains("hard links") && (try reason("foreign.jpg")).contains("65534"))
        #expect(FileManager.default.fileExists(atPath: foreign), "the other link keeps the file")
        #expect(try reason("private.jpg").contains("mode 600"))
        // Each sidecar went along with its file, as it was (the FIFO is still a FIFO, the link still a link).
        var info = stat()
        #expect(lstat(rejected + "/fifo.jpg" + Sidecar.suffix, &info) == 0 && info.st_mode & S_IFMT == S_IFIFO)
        #expect(lstat(rejected + "/zero.jpg" + Sidecar.suffix, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK)
        #expect(try await otherRecorder.requests().isEmpty, "nothing went to the target outside allowed_urls")
        #expect(try await allowedRecorder.requests().count == 1)
        let rssAfter = try Self.residentKiB(daemon.pid)
        #expect(rssAfter - rssBefore < 8 * 1024, "RSS grew from \(rssBefore) to \(rssAfter) KiB")
        #expect(await daemon.terminate() < .seconds(5))
    }

    // MARK: intake turns

    @Test("intake turns: a few files at once, one owner never holds every slot, the owner served longest ago goes first")
    func intakeTurns() {
        var turns = IntakeTurns(slots: 3)
        let alice = (0..<5).map { IntakeTurns.Ready(name: "a\($0)", owner: 1) }
        #expect(turns.pick(alice) == ["a0", "a1"], "alice alone still leaves a slot free")
        #expect(turns.pick(alice).isEmpty, "nothing more for her while both run")
        let bob = IntakeTurns.Ready(name: "b0", owner: 2)
        #expect(turns.pick(alice + [bob]) == ["b0"], "bob's file takes the free slot at once")
        turns.finished("a0")
        let carol = IntakeTurns.Ready(name: "c0", owner: 3)
        #expect(turns.pick(alice + [carol, bob]) == ["c0"], "the newcomer goes before alice's next")
        turns.finished("b0")
        turns.finished("c0")
        let left = Array(alice[1...])  // a0 was taken
        #expect(turns.pick(left + [IntakeTurns.Ready(name: "b1", owner: 2)]) == ["a2", "b1"],
                "alice was served longest ago (before bob and carol); then bob's turn")
        #expect(Set(turns.inFlight.keys) == ["a1", "a2", "b1"])
        turns.finished("a2")
        #expect(turns.pick([alice[1], alice[3]]) == ["a3"], "a1 is in flight already: not started twice")
        #expect(IntakeTurns(slots: 1).slots == 2, "at least two slots, so no owner has them all")
    }

    @Test("a sparse file: at least 1 MiB with under 1/32 of it on disk; a small or a whole file is not")
    func sparseFiles() throws {
        let directory = FileManager.default.temporaryDirectory.path + "/uploadq-sparse-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(FileManager.default.createFile(atPath: directory + "/h", contents: nil))
        #expect(truncate(directory + "/h", 64 << 20) == 0)
        #expect(try FileFingerprint.of(path: directory + "/h").isSparse)
        #expect(FileManager.default.createFile(atPath: directory + "/w", contents: Data(count: 2 << 20)))
        #expect(!(try FileFingerprint.of(path: directory + "/w").isSparse))
        #expect(FileManager.default.createFile(atPath: directory + "/s", contents: nil))
        #expect(truncate(directory + "/s", 512 << 10) == 0)
        #expect(!(try FileFingerprint.of(path: directory + "/s").isSparse), "below 1 MiB: not worth refusing")
    }

    /// The resident set size of process `pid`, in KiB (`VmRSS` of `/proc/PID/status`).
    static func residentKiB(_ pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }
}
