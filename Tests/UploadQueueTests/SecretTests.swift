import Foundation
import Testing
@testable import UploadQueue

/// Secrets stay secret: credentials in URLs are redacted wherever they are shown, token programs run with a
/// scrubbed environment and bounded output, and the daemon cannot be dumped.
@Suite(.serialized)
struct SecretTests {
    @Test("query values that carry credentials are redacted: AWS, Google, CloudFront and the usual names")
    func redaction() {
        let url = "https://b.s3.amazonaws.com/k.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAX%2F20261124"
            + "&X-Amz-Signature=deadbeef&X-Amz-Security-Token=tok&x-goog-signature=g00g&Key-Pair-Id=K1&Policy=p0l"
            + "&token=t0k&sig=s1g&size=7"
        let redacted = URLRedaction.redact(url)
        for secret in ["AKIAX", "deadbeef", "=tok", "g00g", "K1", "p0l", "t0k", "s1g"] {
            #expect(!redacted.contains(secret), "\(secret) in \(redacted)")
        }
        #expect(redacted.contains("X-Amz-Algorithm=AWS4-HMAC-SHA256") && redacted.contains("size=7"))
        #expect(URLRedaction.redact("https://u:pw@h/p") == "https://h/p")
    }

    @Test("a presigned-looking remote_url is redacted in the log, list, show and their JSON")
    func presignedRemoteURL() async throws {
        let folder = "presigned-\(UInt32.random(in: 0...UInt32.max))"
        let sandbox = try Sandbox(config: """
            [destinations.dav]
            protocol = "http-put"
            url = "\(try TestServers.davURL())/\(folder)/{name}"
            public_url_template = "https://cdn.example.com/{name}?X-Amz-Credential=AKIASECRET&X-Amz-Signature=5ec2e7"
            """)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let path = try sandbox.makeFile(sandbox.root + "/p.jpg", size: 2000, seed: 1)
        let id = try await BinaryRunner.enqueue(["--config", sandbox.configPath, "--destination", "dav", path])
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let uploaded = try await eventually(timeout: .seconds(30)) { try store.jobs().first?.state == .uploaded }
        #expect(uploaded, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(try store.jobs().first?.remoteURL?.contains("5ec2e7") == true, "the library keeps the real URL")
        #expect(await daemon.terminate() < .seconds(5))
        #expect(daemon.log.contains("remote_url=https://cdn.example.com/p.jpg?"), "\(daemon.log.suffix(2000))")
        var shown = daemon.log
        for arguments in [["list"], ["list", "--json"], ["show", id.rawValue], ["show", id.rawValue, "--json"]] {
            let output = try await BinaryRunner.run(arguments + ["--config", sandbox.configPath])
            #expect(output.status == 0, "\(arguments): \(output.stderr)")
            #expect(output.stdout.contains("cdn.example.com"), "\(arguments): \(output.stdout)")
            shown += output.stdout
        }
        #expect(!shown.contains("5ec2e7") && !shown.contains("AKIASECRET"))
    }

    @Test("a token command gets PATH, HOME, LANG and pass_env only; its standard error never reaches an error")
    func tokenCommandEnvironment() async throws {
        setenv("UPLOADQ_TEST_PASSED", "passed-value", 1)
        setenv("UPLOADQ_TEST_WITHHELD", "withheld-value", 1)
        let script = #"echo "t-${UPLOADQ_TEST_PASSED:-none}-${UPLOADQ_TEST_WITHHELD:-none}-${PATH:+path}""#
        for (passEnvironment, expected) in [("", "Bearer t-none-none-path"),
                                            (#"pass_env = ["UPLOADQ_TEST_PASSED"]"#, "Bearer t-passed-value-none-path")] {
            let recorder = try RecorderSession()
            let sandbox = try Sandbox(destination: "api", """
                protocol = "http-post"
                url = "\(recorder.url())"
                token_command = ["/bin/sh", "-c", \(Self.toml(script))]
                \(passEnvironment)
                """)
            let (job, _) = try await sandbox.uploadOne("a.jpg", size: 1000, seed: 2, to: "api")
            #expect(job.state == .uploaded, "\(job.lastError ?? "")")
            let sent = try await recorder.requests().map { ($0["headers"] as? [String: String])?["authorization"] }
            #expect(sent == [expected])
        }

        let (failed, requests) = try await Self.failedUpload(tokenCommand: "echo secret-from-stderr >&2; exit 3")
        let error = failed.lastError ?? ""
        #expect(error.contains("status 3") && !error.contains("secret-from-stderr"), "\(error)")
        #expect(requests.isEmpty)
    }

    /// Uploads one file with `tokenCommand` (a shell line) as the token program, until the job fails; returns the
    /// job and what reached the server.
    static func failedUpload(tokenCommand: String) async throws -> (Job, [[String: Any]]) {
        let recorder = try RecorderSession()
        let sandbox = try Sandbox(destination: "api", """
            protocol = "http-post"
            url = "\(recorder.url())"
            token_command = ["/bin/sh", "-c", \(toml(tokenCommand))]
            """, retry: "10s")
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/b.jpg", size: 1000, seed: 3), to: "api")
        let failed = try await running.wait(id, timeout: .seconds(20)) { $0.state == .failed }
        await running.stop()
        return (failed, try await recorder.requests())
    }

    @Test("a token command that prints 100 MiB is killed at 64 KiB: a clear transient failure, memory bounded")
    func tokenCommandFlood() async throws {
        let started = ContinuousClock.now
        let outcome = BoundedCommand.run(["/bin/sh", "-c", "head -c 104857600 /dev/zero"], timeout: .seconds(30),
                                         environment: ["PATH": "/usr/bin:/bin"], maximumOutput: TokenProvider.maximumOutput)
        #expect(outcome == .tooMuchOutput)
        #expect(ContinuousClock.now - started < .seconds(5))

        let (failed, requests) = try await Self.failedUpload(tokenCommand: "head -c 104857600 /dev/zero")
        #expect(failed.lastError?.contains("more than 64 KiB") == true, "\(failed.lastError ?? "")")
        #expect(!failed.permanent, "retried: the program may do better next time")
        #expect(requests.isEmpty)
    }

    @Test("a helper program inherits no descriptor of the daemon beyond its standard three")
    func noInheritedDescriptors() throws {
        let sandbox = try Sandbox()
        let open = Foundation.open(sandbox.root + "/held", O_WRONLY | O_CREAT, 0o600)  // no O_CLOEXEC
        defer { close(open) }
        #expect(open > 2)
        guard case .exited(0, let listed, _) = BoundedCommand.run(["/bin/sh", "-c", "ls /proc/$$/fd"], timeout: .seconds(5))
        else {
            Issue.record("the helper did not run")
            return
        }
        let descriptors = Set(listed.split(whereSeparator: \.isNewline).compactMap { Int32($0) })
        #expect(!descriptors.contains(open), "\(descriptors)")
        #expect(descriptors.isSubset(of: [0, 1, 2]), "\(descriptors)")
    }

    @Test("the daemon cannot be dumped: not dumpable, and a core file size limit of zero")
    func undumpable() async throws {
        let sandbox = try Sandbox()
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let limits = try String(contentsOfFile: "/proc/\(daemon.pid)/limits", encoding: .utf8)
        let core = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") })
        #expect(core.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).prefix(2) == ["0", "0"], "\(core)")
        #expect(await daemon.terminate() < .seconds(5))
        // In this process: the same call makes it undumpable.
        #expect(ProcessHardening.isDumpable)
        #expect(ProcessHardening.apply().isEmpty)
        #expect(!ProcessHardening.isDumpable)
    }

    /// `text` as a TOML basic string.
    static func toml(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    @Test("a server's error body: read no further than 16 KiB, no pattern over it, echoed credentials redacted")
    func errorBodies() {
        func response(_ body: [UInt8], status: Int = 400) -> HTTPResponse {
            HTTPResponse(status: status, headers: [], body: body, bytesSent: 0)
        }
        // A proxy that echoes the request's headers back.
        let echoed = response(Array("""
            <html><body><pre>PUT /f HTTP/1.1\r\nAuthorization: Bearer tok-live-0123456789\r\nX-Api-Key: k-9876543210
            X-Tenant: tenant-secret-value\r\nCookie: session=abc123456</pre></body></html>
            """.utf8))
        let failure = FailureClassifier.failure(for: echoed, request: "PUT https://h/f", destination: "d",
                                                secrets: ["tenant-secret-value"])
        for secret in ["tok-live-0123456789", "k-9876543210", "tenant-secret-value"] {
            #expect(!failure.message.contains(secret), "\(secret) in: \(failure.message)")
        }
        #expect(failure.message.contains("HTTP 400 from PUT https://h/f") && failure.message.contains("<redacted>"))
        // A JSON echo (httpbin's): the quote before Bearer does not hide the token after it.
        let json = response(Array(#"{"headers": {"Authorization": "Bearer tok-json-0123456789", "X-Other": "1"}}"#.utf8))
        #expect(!json.bodySummary.contains("tok-json-0123456789"), "\(json.bodySummary)")
        // A megabyte of unclosed <script>: one pass over 16 KiB (the patterns it replaced took quadratic time).
        let hostile = response(Array(String(repeating: "<script>", count: 131_072).utf8))
        #expect(hostile.bodySummary.isEmpty)
        // Nothing past 16 KiB is read.
        let long = response(Array((String(repeating: "a ", count: 9000) + "TAIL-MARK").utf8))
        #expect(!long.bodySummary.contains("TAIL-MARK") && long.bodySummary.count <= 201)
        // Pages keep their words, in order, without markup.
        let page = response(Array("<html><head><style>p{x:1}</style><script>var t='s'</script><title>Login</title></head><body><p>Please  sign\nin</p></body></html>".utf8))
        #expect(page.bodySummary == "Login Please sign in", "\(page.bodySummary)")
        #expect(response(Array("<SCRIPT>x</SCRIPT>ok".utf8)).bodySummary == "ok")
    }

    @Test("LoadCredential=: token_file and credentials_file as %d/NAME are read from $CREDENTIALS_DIRECTORY, and say how when it is not set")
    func systemdCredentials() async throws {
        let directory = FileManager.default.temporaryDirectory.path + "/uploadq-credentials-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "cred-token-1\n".write(toFile: directory + "/api-token", atomically: true, encoding: .utf8)
        try "[default]\naws_access_key_id = AKIDCRED\naws_secret_access_key = secretcred\n"
            .write(toFile: directory + "/aws", atomically: true, encoding: .utf8)
        let configuration = try ConfigurationLoader.parse("""
            [destinations.api]
            protocol = "http-put"
            url = "https://h/{name}"
            token_file = "%d/api-token"
            [destinations.s3]
            protocol = "s3"
            endpoint = "https://s3.example.com"
            bucket = "photos"
            credentials_file = "%d/aws"
            """, file: "/etc/uploadq/uploadq.toml", baseDirectory: "/etc/uploadq")
        let source = try #require(configuration.destinations["api"]?.http.credentials)
        #expect(source == .file("%d/api-token"), "kept as it is until it is read")
        // Not under a unit with LoadCredential=: the message says how to give it one.
        unsetenv("CREDENTIALS_DIRECTORY")
        do {
            _ = try await TokenProvider(source: source, destination: "api").token()
            Issue.record("a credential was read without a credentials directory")
        } catch {
            #expect(error.message.contains("LoadCredential=api-token:") && error.kind == .permanent, "\(error.message)")
        }
        setenv("CREDENTIALS_DIRECTORY", directory, 1)
        defer { unsetenv("CREDENTIALS_DIRECTORY") }
        #expect(try await TokenProvider(source: source, destination: "api").token() == "cred-token-1")
        guard case .s3(let s3) = try #require(configuration.destinations["s3"]).settings else {
            Issue.record("not an s3 destination")
            return
        }
        let keys = try S3Credentials.load(s3.credentials, destination: "s3",
                                          environment: ["CREDENTIALS_DIRECTORY": directory])
        #expect(keys.accessKey == "AKIDCRED" && keys.secretKey == "secretcred")
        // A name with a slash is no credential's.
        #expect(throws: ConfigurationError.self) {
            try ConfigurationLoader.parse("""
                [destinations.api]
                protocol = "http-put"
                url = "https://h/{name}"
                token_file = "%d/../etc/shadow"
                """, file: "/etc/uploadq/uploadq.toml", baseDirectory: "/etc/uploadq")
        }
        // The advice for a missing token_env points to credentials, not Environment=.
        do {
            _ = try await TokenProvider(source: .environment("UPLOADQ_UNSET_TOKEN_VARIABLE"), destination: "api").token()
        } catch {
            #expect(error.message.contains("LoadCredential=") && error.message.contains("systemctl show"), "\(error.message)")
        }
    }
}
