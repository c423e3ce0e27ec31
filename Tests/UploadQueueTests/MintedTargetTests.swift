import Foundation
import Testing
@testable import UploadQueue

/// Upload targets minted per file by the app's backend (`mint_url`, `mint_command`), presigned with botocore
/// against moto behind our fault proxy, which enforces presigned expiry as S3 does.
@Suite(.serialized)
struct MintedTargetTests {
    static let token = "mint-token-7f3a"

    /// A bucket, a proxy in front of moto that refuses expired presigned URLs, and a backend minting into both.
    func setUp(method: String = "PUT", expires: Int = 60) async throws -> (S3TestBucket, FaultProxy, MintBackend) {
        let bucket = try await S3TestBucket.make()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(bucket.endpoint), enforceExpiry: true)
        let backend = try await MintBackend.make(s3Endpoint: proxy.url(""), bucket: bucket.name, method: method,
                                                 expires: expires, token: Self.token)
        setenv("UPLOADQ_TEST_MINT_TOKEN", Self.token, 1)
        return (bucket, proxy, backend)
    }

    func sandbox(_ backend: MintBackend, protocolName: String = "http-put", extra: String = "") throws -> Sandbox {
        try Sandbox(destination: "minted", """
            protocol = "\(protocolName)"
            mint_url = "\(backend.base)/sign"
            \(extra)
            [mint]
            token_env = "UPLOADQ_TEST_MINT_TOKEN"
            """)
    }

    func stored(_ bucket: S3TestBucket, _ job: Job) async throws -> String {
        let key = "\(job.id)-\(job.originalName)"
        let path = try await bucket.download(key, to: NSTemporaryDirectory() + "/minted-\(job.id)")
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try sha256(ofFile: path)
    }

    @Test("presigned PUT: each file minted by the backend with [mint]'s token, stored once; no secret anywhere")
    func presignedPut() async throws {
        let (bucket, proxy, backend) = try await setUp()
        let sandbox = try sandbox(backend)
        let daemon = try DaemonProcess(sandbox: sandbox, environment: ["UPLOADQ_TEST_MINT_TOKEN": Self.token])
        var ids: [JobID] = []
        for index in 0..<3 {
            let path = try sandbox.makeFile(sandbox.root + "/shot \(index).jpg", size: 300_000 + index, seed: UInt64(90 + index))
            ids.append(try await BinaryRunner.enqueue([path, "--destination", "minted", "--config", sandbox.configPath]))
        }
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let done = try await eventually(timeout: .seconds(30)) {
            try ids.allSatisfy { try store.job($0)?.state == .uploaded }
        }
        #expect(done, "daemon log:\n\(daemon.log.suffix(3000))")
        for id in ids {
            let job = try #require(try store.job(id))
            #expect(try await stored(bucket, job) == job.sha256)
            #expect(job.remoteURL?.hasSuffix(SigV4Signer.encodePath("\(job.id)-\(job.originalName)")) == true)
            #expect(job.remoteURL?.contains("?") == false, "the minted URL's query is never kept")
        }
        let signs = try await backend.requests()
        #expect(signs.count == 3)
        #expect(signs.allSatisfy { ($0["headers"] as? [String: String])?["authorization"] == "Bearer \(Self.token)" })
        let job = try #require(signs.first?["json"] as? [String: Any])
        #expect(Set(job.keys) == ["id", "name", "size", "sha256", "content_type", "meta"])
        let uploads = try await proxy.requests().filter { $0["method"] as? String == "PUT" }
        #expect(uploads.count == 3)
        #expect(uploads.allSatisfy { ($0["headers"] as? [String: String])?["authorization"] == nil },
                "the backend's token never goes to the storage")
        // No signature in the log or in what the CLI prints.
        let show = try await BinaryRunner.run(["show", "--json", ids[0].rawValue, "--config", sandbox.configPath]).stdout
        let list = try await BinaryRunner.run(["list", "--config", sandbox.configPath]).stdout
        #expect(await daemon.terminate() < .seconds(5))
        for text in [daemon.log, show, list] {
            #expect(!text.contains("X-Amz-Signature") && !text.contains("X-Amz-Credential") && !text.contains(Self.token))
        }
    }

    @Test("presigned POST: the backend's form fields, then the file; stored with its content type; an answer without the ETag S3 sends proves nothing")
    func presignedPost() async throws {
        let (bucket, _, backend) = try await setUp(method: "POST")
        // moto answers a form POST 204 without the ETag S3 sends: by default that is no proof, and the job waits.
        let strict = try sandbox(backend, protocolName: "http-post")
        let running = try RunningQueue(strict)
        let waiting = try await running.enqueue(try strict.makeFile(strict.root + "/strict.jpg", size: 50_000, seed: 96),
                                                to: "minted")
        let held = try await running.wait(waiting, timeout: .seconds(20)) { $0.waitingReason == .unverifiedAnswer }
        await running.stop()
        #expect(held.state == .pending && !held.permanent)
        #expect(held.waitingHolds.first?.detail?.contains("without an ETag or a digest") == true, "\(held.waitingHolds)")
        // With the status alone taken for proof (what moto can give), it goes.
        let sandbox = try sandbox(backend, protocolName: "http-post", extra: "verify = \"status\"")
        let (job, _) = try await sandbox.uploadOne("form.jpg", size: 200_000, seed: 95, to: "minted")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try await stored(bucket, job) == job.sha256)
        let (status, headers) = try await bucket.head("\(job.id)-form.jpg")
        #expect(status == 200 && headers["content-type"] == job.contentType)
    }

    @Test("a URL that expires before its request arrives is minted again and the file stored once")
    func expiredURL() async throws {
        // X-Amz-Date has whole seconds, so a URL lives 3 to 4 s: long enough for the fresh one under CI load.
        let (bucket, proxy, backend) = try await setUp(expires: 4)
        // The first PUT is held until its URL has expired: S3 (here the proxy) refuses it as expired.
        try await proxy.add(["method": "PUT", "action": "delay", "seconds": 5.5, "times": 1])
        let sandbox = try sandbox(backend)
        let (job, attempts) = try await sandbox.uploadOne("late.jpg", size: 150_000, seed: 96, to: "minted")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(attempts.count == 1, "minting again is not a retry")
        #expect(try await stored(bucket, job) == job.sha256)
        #expect(try await bucket.keys() == ["\(job.id)-late.jpg"])
        #expect(try await backend.requests().count == 2)
        let puts = try await proxy.requests().filter { $0["method"] as? String == "PUT" }
        #expect(puts.map { $0["action"] as? String } == ["expired", nil])
    }

    @Test("a backend that answers 500 is retried; 403 fails for good with its words; garbage is a clear error")
    func backendErrors() async throws {
        let (_, _, backend) = try await setUp()
        try await backend.script([["status": 500], ["garbage": true]])
        let sandbox = try sandbox(backend)
        let running = try RunningQueue(sandbox)
        let first = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 50_000, seed: 97),
                                              to: "minted")
        let firstJob = try await running.settled(first)
        #expect(firstJob.state == .uploaded, "\(firstJob.lastError ?? "")")
        let errors = try running.attempts(first).compactMap(\.error)
        #expect(errors.count == 2, "\(errors)")
        #expect(errors.first?.contains("HTTP 500") == true)
        #expect(errors.last?.contains("is not an upload target: not a JSON object") == true, "\(errors)")

        try await backend.script([["status": 403, "body": ["error": "user 42 may not upload more today"]]])
        let second = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/b.jpg", size: 50_000, seed: 98),
                                               to: "minted")
        let secondJob = try await running.settled(second)
        await running.stop()
        #expect(secondJob.state == .failed && secondJob.permanent)
        #expect(secondJob.lastError?.contains("may not upload more today") == true, "\(secondJob.lastError ?? "")")
        #expect(secondJob.lastError?.contains("minting backend") == true)
    }

    @Test("mint_command: the job as JSON on standard input, a scrubbed environment, the target on standard output")
    func mintCommand() async throws {
        let (bucket, _, backend) = try await setUp()
        let script = NSTemporaryDirectory() + "/mint-\(UUID().uuidString).py"
        defer { try? FileManager.default.removeItem(atPath: script) }
        let sandbox = try Sandbox(destination: "minted", """
            protocol = "http-put"
            mint_command = ["\(venvPython())", "\(script)"]
            pass_env = ["MINT_BACKEND"]
            allow_private_targets = true  # the storage is on loopback, and a command has no address of its own
            """)
        // The command asks the backend itself: what an app's CLI tool would do.
        try """
            import json, os, sys, urllib.request
            assert "UPLOADQ_TEST_MINT_TOKEN" not in os.environ, "the environment is scrubbed"
            job = json.load(sys.stdin)
            request = urllib.request.Request(os.environ["MINT_BACKEND"], data=json.dumps(job).encode(),
                headers={"Authorization": "Bearer \(Self.token)", "Content-Type": "application/json"})
            print(urllib.request.urlopen(request).read().decode())
            """.write(toFile: script, atomically: true, encoding: .utf8)
        setenv("MINT_BACKEND", backend.base + "/sign", 1)
        defer { unsetenv("MINT_BACKEND") }
        let (job, _) = try await sandbox.uploadOne("cmd.jpg", size: 120_000, seed: 99, to: "minted")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try await stored(bucket, job) == job.sha256)
        let asked = try await backend.requests()
        #expect((asked.first?["json"] as? [String: Any])?["id"] as? String == job.id.rawValue)
    }

    @Test("a minted URL never shows: queries cut from what a storage says, the URL hidden in transport errors")
    func secretURLs() throws {
        let url = "https://b.example/k?q-signature=s3cr3t&x-oss-signature=t0p"
        let said = URLRedaction.withoutQueries("refused \(url) for \"\(url)\" <\(url)>")
        #expect(!said.contains("s3cr3t") && !said.contains("t0p") && said.contains("https://b.example/k?…"), "\(said)")
        let failure = TransferFailure(.transient(retryAfter: nil), code: "connect", "PUT \(url): connection refused")
            .hiding(url, as: "https://b.example/k")
        #expect(failure.message == "PUT https://b.example/k: connection refused")
        let target = try MintedTarget(json: Array(#"{"method": "put", "url": "\#(url)", "headers": {"x-upsert": "false"}}"#.utf8))
        #expect(target.method == "PUT" && target.publicURL == "https://b.example/k")
        for bad in [#"{"method": "GET", "url": "https://a/"}"#, #"{"method": "PUT", "url": "ftp://a/"}"#,
                    #"{"method": "PUT", "url": "https://a/", "headers": {"Host": "evil"}}"#,
                    #"{"method": "PUT", "url": "https://a/", "fields": {"k": "v"}}"#, "[]", "garbage"] {
            #expect(throws: MintedTarget.Invalid.self, "\(bad)") { _ = try MintedTarget(json: Array(bad.utf8)) }
        }
    }

    @Test("config: mint_url or url, not both; no credentials of its own; [mint] takes the backend's")
    func configuration() throws {
        func load(_ lines: String) throws -> Configuration {
            try ConfigurationLoader.parse("""
                [destinations.m]
                protocol = "http-put"
                \(lines)
                """, file: "/etc/uploadq.toml", baseDirectory: "/etc")
        }
        let good = try load("mint_url = \"https://api.example.com/uploads/sign\"\n[mint]\ntoken_env = \"APP\"\n")
        #expect(good.destinations["m"]?.settings
                == .httpPut(HTTPPutSettings(target: .minted(.url("https://api.example.com/uploads/sign")))))
        #expect(good.mint.http.credentials == .environment("APP"))
        for (lines, key) in [("mint_url = \"https://a.example/s\"\nurl = \"https://b.example/{name}\"", "url"),
                             ("mint_url = \"https://a.example/s\"\ntoken_env = \"X\"", "token_env"),
                             ("mint_url = \"https://a.example/s\"\nmint_command = [\"/bin/true\"]", "mint_command"),
                             ("mint_url = \"https://u:p@a.example/s\"", "mint_url")] {
            do {
                _ = try load(lines)
                Issue.record("accepted: \(lines)")
            } catch let error as ConfigurationError {
                #expect(error.key == "destinations.m.\(key)", "\(error)")
                #expect(!error.message.contains("u:p@"))
            }
        }
    }
}

/// The virtualenv's python, which the test set-up installs (botocore included).
func venvPython() -> String {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path
    return root + "/.build-venv/bin/python"
}

/// S3 through an app backend that serves Uppy Companion's routes: no S3 keys on the device, parts signed one by
/// one just before they are sent, a multipart upload resumed after kills from the parts the backend lists.
@Suite(.serialized)
struct CompanionTests {
    func setUp(expires: Int = 60) async throws -> (S3TestBucket, FaultProxy, MintBackend) {
        let bucket = try await S3TestBucket.make()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(bucket.endpoint), enforceExpiry: true)
        let backend = try await MintBackend.make(s3Endpoint: proxy.url(""), bucket: bucket.name, expires: expires,
                                                 token: MintedTargetTests.token)
        setenv("UPLOADQ_TEST_MINT_TOKEN", MintedTargetTests.token, 1)
        return (bucket, proxy, backend)
    }

    func lines(_ backend: MintBackend, _ extra: String = "") -> String {
        """
        protocol = "s3"
        mint_url = "\(backend.base)"
        part_size = "8MiB"
        multipart_threshold = "16MiB"
        \(extra)
        [mint]
        token_env = "UPLOADQ_TEST_MINT_TOKEN"
        """
    }

    func storedDigest(_ bucket: S3TestBucket) async throws -> String {
        let keys = try await bucket.keys()
        #expect(keys.count == 1, "\(keys)")
        let path = try await bucket.download(try #require(keys.first), to: NSTemporaryDirectory() + "/companion-\(UUID())")
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try sha256(ofFile: path)
    }

    @Test("a small file: one presigned PUT from /s3/params; the backend names the key")
    func smallFile() async throws {
        let (bucket, _, backend) = try await setUp()
        let sandbox = try Sandbox(destination: "companion", lines(backend))
        let (job, _) = try await sandbox.uploadOne("small.jpg", size: 400_000, seed: 101, to: "companion")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try await storedDigest(bucket) == job.sha256)
        let asked = try await backend.requests().map { String(($0["path"] as? String ?? "").prefix { $0 != "?" }) }
        #expect(asked.count == 1 && asked.first?.hasSuffix("/s3/params") == true, "\(asked)")
    }

    @Test("100 MiB in parts signed one by one, killed mid-part twice: resumed from the listed parts, stored once")
    func killedMultipart() async throws {
        let (bucket, proxy, backend) = try await setUp()
        let sandbox = try Sandbox(destination: "companion", lines(backend), bandwidth: 16 << 20)
        let size = 100 << 20
        let source = try sandbox.makeRandomFile(sandbox.root + "/take.mov", size: size)
        let expected = try sha256(ofFile: source)
        let id = try await BinaryRunner.enqueue([source, "--destination", "companion", "--config", sandbox.configPath])
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        func job() throws -> Job { try #require(try store.job(id)) }
        let environment = ["UPLOADQ_TEST_MINT_TOKEN": MintedTargetTests.token]
        for kill in 1...2 {
            // Counted from before the daemon starts: on a loaded machine it may be well on its way before the
            // test looks.
            let base = try await proxy.bodyBytes()
            let daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-\(kill)", environment: environment)
            let midway = try await eventually(timeout: .seconds(60)) {
                try await proxy.bodyBytes() - base >= 2 * (8 << 20) + (4 << 20)
            }
            #expect(midway, "daemon log:\n\(daemon.log.suffix(2000))")
            await daemon.kill9()
            #expect(S3ResumeState(json: try job().resumeState) != nil)
        }
        let daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-3", environment: environment)
        let finished = try await eventually(timeout: .seconds(120)) { try job().state == .uploaded }
        #expect(finished, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(5))
        #expect(try await storedDigest(bucket) == expected)
        let asked = try await backend.requests()
        let paths = asked.map { String(($0["path"] as? String ?? "").prefix { $0 != "?" }) }
        #expect(paths.filter { $0.hasSuffix("/s3/multipart") }.count == 1, "one upload, resumed")
        // `/b/ID/s3/multipart/UPLOAD` read with GET is a listing (a part's URL has the part number after it).
        let listings = zip(asked, paths).filter { request, path in
            request["method"] as? String == "GET" && path.contains("/s3/multipart/")
                && path.split(separator: "/").count == 5
        }
        #expect(listings.count == 2, "listed once per restart")
        let sent = try await proxy.bodyBytes()
        print("companion crash test: \(sent) bytes for a \(size)-byte file with 2 kills")
        // Two parts in flight at a kill are at most what goes again.
        #expect(sent <= size + 2 * 2 * (8 << 20), "sent \(sent)")
        let log = daemon.log
        #expect(!log.contains("X-Amz-Signature") && !log.contains(MintedTargetTests.token))
    }

    @Test("a part whose URL expired on the way is signed again and sent; the object is whole")
    func expiredPart() async throws {
        let (bucket, proxy, backend) = try await setUp(expires: 5)
        try await proxy.add(["method": "PUT", "action": "delay", "seconds": 6.5, "skip": 1, "times": 1])
        let sandbox = try Sandbox(destination: "companion", lines(backend, "part_concurrency = 1"))
        let (job, attempts) = try await sandbox.uploadOne("clip.mov", size: 20 << 20, seed: 102, to: "companion")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(attempts.count == 1)
        #expect(try await storedDigest(bucket) == job.sha256)
        let puts = try await proxy.requests().filter { $0["method"] as? String == "PUT" }
        #expect(puts.filter { $0["action"] as? String == "expired" }.count == 1, "\(puts.map { $0["action"] ?? "-" })")
        #expect(puts.count == 4, "three parts, one of them twice")
    }
}
