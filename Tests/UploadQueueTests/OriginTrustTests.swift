import Foundation
import Testing
@testable import UploadQueue

/// A destination's token and headers go only to its own origin and to those the admin trusts; an https destination
/// is never taken to plain http.
@Suite(.serialized)
struct OriginTrustTests {
    @Test("origins: scheme, lowercased host and port (the scheme's default when none), from URLs and templates")
    func origins() throws {
        let origin = try #require(URLOrigin(url: "https://Files.Example.com/up/{name}?x={meta.y}"))
        #expect(origin == URLOrigin(url: "https://files.example.com:443"))
        #expect(origin.description == "https://files.example.com")
        #expect(URLOrigin(url: "http://h:8080/x")?.port == 8080)
        #expect(URLOrigin(url: "http://h:8080/x")?.description == "http://h:8080")
        #expect(URLOrigin(url: "http://user:pw@h/x") == URLOrigin(url: "http://h/"), "user info is not the origin")
        #expect(URLOrigin(url: "http://[::1]:9000/x")?.host == "[::1]")
        #expect(URLOrigin(url: "http://h/x") != URLOrigin(url: "https://h/x"))
        #expect(URLOrigin(url: "HTTPS://H:0443/x") == URLOrigin(url: "https://h/"), "scheme and host in any case")
        #expect(URLOrigin(url: "http://a@b@h:81/x?u=http://c/")?.description == "http://h:81",
                "the last @ ends user info")
        #expect(URLOrigin(url: "https://h?x=1")?.host == "h")
        #expect(URLOrigin(url: "https://Ünï.example/")?.host == "ünï.example",
                "a Unicode host lowercased as Unicode")
        // A combining mark after the path's slash made one Character of the two: the origin was the user info's
        // host, where curl connects to the one before the slash.
        #expect(URLOrigin(url: "https://evil.example/\u{301}@trusted.example/")?.host == "evil.example")
        for bad in ["ftp://h/", "h/x", "https://", "http://h:0/", "http://h:99999/", "http://h:8o/", "file:///tmp",
                    "http://h:+80/", "http://h:000000080/", "http://[::1/", "http://[::1]x/", "http://@/",
                    "ht tp://h/"] {
            #expect(URLOrigin(url: bad) == nil, "\(bad)")
        }
    }

    @Test("credentials go to the configured origin and the trusted ones; elsewhere without; never https → http")
    func verdicts() throws {
        var destination = try Destination.tus(name: "t", endpoint: "https://tus.example.com/files/")
        destination.trustedOrigins = [try #require(URLOrigin(url: "https://store.example.com"))]
        let scope = CredentialScope(destination: destination)
        #expect(scope.verdict(for: "https://tus.example.com/files/abc") == .withCredentials)
        #expect(scope.verdict(for: "https://TUS.example.com:443/files/abc") == .withCredentials)
        #expect(scope.verdict(for: "https://store.example.com/u/1") == .withCredentials)
        #expect(scope.verdict(for: "https://tus.example.com:8443/files/abc") == .withoutCredentials)
        #expect(scope.verdict(for: "https://elsewhere.example.net/files/abc") == .withoutCredentials)
        guard case .refused(let why) = scope.verdict(for: "http://tus.example.com/files/abc?token=s3cret") else {
            Issue.record("an https destination was taken to http")
            return
        }
        #expect(why.contains("does not downgrade") && why.contains("trusted_origins") && !why.contains("s3cret"))
        // Listed by the admin, even plain http is trusted.
        destination.trustedOrigins.append(try #require(URLOrigin(url: "http://tus.example.com")))
        #expect(CredentialScope(destination: destination).verdict(for: "http://tus.example.com/x") == .withCredentials)
        // A plain-http destination may be sent anywhere plain, without credentials off its origin.
        let plain = CredentialScope(destination: try Destination.httpPut(name: "p", url: "http://a.example.com/{name}"))
        #expect(plain.verdict(for: "http://b.example.com/x") == .withoutCredentials)
        #expect(CredentialScope.everyURL.verdict(for: "http://anywhere.example.com/") == .withCredentials)
    }

    @Test("trusted_origins: each an origin alone; a path, user info or another scheme is refused naming the key")
    func configuration() throws {
        func load(_ origins: String) throws -> Destination {
            let configuration = try ConfigurationLoader.parse("""
                [destinations.t]
                protocol = "tus"
                url = "https://tus.example.com/files/"
                trusted_origins = [\(origins)]
                """, file: "/etc/uploadq/test.toml", baseDirectory: "/tmp")
            return try #require(configuration.destinations["t"])
        }
        #expect(try load(#""https://a.example.com", "http://b.example.com:8080/""#).trustedOrigins
                    == [URLOrigin(url: "https://a.example.com"), URLOrigin(url: "http://b.example.com:8080")])
        // Credentials are bound to one origin: a placeholder may not stand in the host.
        do {
            _ = try ConfigurationLoader.parse("""
                [destinations.t]
                protocol = "http-put"
                url = "https://{meta.tenant}.example.com/up/{name}"
                """, file: "/etc/uploadq/test.toml", baseDirectory: "/tmp")
            Issue.record("a placeholder in the host was accepted")
        } catch let error as ConfigurationError {
            #expect(error.key == "destinations.t.url" && error.message.contains("host"), "\(error)")
        }
        for bad in [#""https://a.example.com/files""#, #""https://u@a.example.com""#, #""ftp://a""#, #""a.example.com""#] {
            do {
                _ = try load(bad)
                Issue.record("\(bad) was taken as an origin")
            } catch let error as ConfigurationError {
                #expect(error.key == "destinations.t.trusted_origins", "\(error)")
            }
        }
    }

    /// A tus destination through fault proxy A, whose creation answers point at proxy B (another port, another
    /// origin) in front of the same tuspyserver: B records what reaches it.
    func crossOrigin(trusting: Bool) async throws -> (job: Job, a: [[String: Any]], b: [[String: Any]]) {
        let tus = try TestServers.authority(try TestServers.tusEndpoint())
        let a = try await FaultProxy.start(upstream: tus)
        let b = try await FaultProxy.start(upstream: tus)
        let bAuthority = try TestServers.authority(b.url("/"))
        try await a.add(["method": "POST", "action": "rewrite", "location": "authority:\(bAuthority)"])
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(a.url("/files/"))"
            chunk_size = 262144
            token_env = "UPLOADQ_TEST_ORIGIN_TOKEN"
            headers = { "X-Api-Key" = "k-secret" }
            \(trusting ? "trusted_origins = [\"http://\(bAuthority)\"]" : "")
            """)
        setenv("UPLOADQ_TEST_ORIGIN_TOKEN", "t-secret", 1)
        let (job, _) = try await sandbox.uploadOne("c.bin", size: 600_000, seed: 90, to: "tus")
        return (job, try await a.requests(), try await b.requests())
    }

    @Test("a tus Location on another origin is used without the token and headers; with trusted_origins, with them")
    func foreignLocation() async throws {
        func credentials(_ request: [String: Any]) -> [String?] {
            let headers = request["headers"] as? [String: String] ?? [:]
            return [headers["authorization"], headers["x-api-key"]]
        }
        let untrusted = try await crossOrigin(trusting: false)
        #expect(untrusted.job.state == .uploaded, "\(untrusted.job.lastError ?? "")")
        #expect(try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: try #require(untrusted.job.remoteURL)))
                == untrusted.job.sha256)
        let post = try #require(untrusted.a.first { $0["method"] as? String == "POST" })
        #expect(credentials(post) == ["Bearer t-secret", "k-secret"], "the configured origin gets them")
        let patches = untrusted.b.filter { $0["method"] as? String == "PATCH" }
        #expect(patches.count == 3)
        #expect(patches.allSatisfy { credentials($0) == [nil, nil] }, "\(patches.map(credentials))")

        let trusted = try await crossOrigin(trusting: true)
        #expect(trusted.job.state == .uploaded, "\(trusted.job.lastError ?? "")")
        let trustedPatches = trusted.b.filter { $0["method"] as? String == "PATCH" }
        #expect(!trustedPatches.isEmpty && trustedPatches.allSatisfy { credentials($0) == ["Bearer t-secret", "k-secret"] })
    }

    @Test("an https tus endpoint whose Location is plain http fails for good, before anything is sent there")
    func downgradeRefused() async throws {
        let tls = try TestServers.address("UPLOADQ_TEST_DAV_TLS_URL")
        let caFile = try TestServers.address("UPLOADQ_TEST_CA_FILE")
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(tls)/tus-behind-tls/"
            ca_file = "\(caFile)"
            token_env = "UPLOADQ_TEST_ORIGIN_TOKEN"
            """)
        setenv("UPLOADQ_TEST_ORIGIN_TOKEN", "t-secret", 1)
        let (job, attempts) = try await sandbox.uploadOne("d.bin", size: 300_000, seed: 91, to: "tus")
        #expect(job.state == .failed && job.permanent, "\(job.state) \(job.lastError ?? "")")
        #expect(job.lastError?.contains("does not downgrade") == true, "\(job.lastError ?? "")")
        #expect(attempts.count == 1, "not retried")
        #expect(job.resumeState == nil || !(job.resumeState ?? "").contains("http://"), "the http upload URL was not kept")
        #expect(job.bytesConfirmed == 0)
    }

    @Test("private addresses: loopback, RFC 1918, link-local, unique local, CGNAT, mapped; not the internet's")
    func privateAddresses() {
        for address in ["127.0.0.1", "127.255.0.9", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
                        "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "::", "fe80::1", "fd00::5", "fc12::1",
                        "::ffff:10.0.0.1", "[::1]", "fe80::1%eth0"] {
            #expect(PrivateAddress.contains(address), "\(address)")
        }
        for address in ["8.8.8.8", "172.32.0.1", "192.169.0.1", "100.128.0.1", "2001:db8::1", "::ffff:8.8.8.8",
                        "example.com", ""] {
            #expect(!PrivateAddress.contains(address), "\(address)")
        }
        #expect(PrivateAddress.isPrivateHost("localhost") && PrivateAddress.isPrivateHost("cam.localhost"))
        #expect(!PrivateAddress.isPrivateHost("127.1"), "a name the resolver reads, not a literal")
    }

    @Test("a server-chosen URL to a private address is refused for a destination not there itself; allow_private_targets lets it")
    func privateTargets() async throws {
        let tus = try TestServers.authority(try TestServers.tusEndpoint())
        for allowed in [false, true] {
            let a = try await FaultProxy.start(upstream: tus)
            let b = try await FaultProxy.start(upstream: tus)
            try await a.add(["method": "POST", "action": "rewrite",
                             "location": "authority:\(try TestServers.authority(b.url("/")))"])
            // `127.1` is a name the resolver turns into 127.0.0.1: the destination as a public name would be.
            let configured = a.url("/files/").replacingOccurrences(of: "127.0.0.1", with: "127.1")
            let sandbox = try Sandbox(destination: "tus", """
                protocol = "tus"
                url = "\(configured)"
                chunk_size = 262144
                \(allowed ? "allow_private_targets = true" : "")
                """)
            let (job, _) = try await sandbox.uploadOne("p.bin", size: 300_000, seed: 91, to: "tus")
            let reached = try await b.requests()
            if allowed {
                #expect(job.state == .uploaded, "\(job.lastError ?? "")")
            } else {
                #expect(job.state == .failed && job.lastError?.contains("allow_private_targets") == true,
                        "\(job.state): \(job.lastError ?? "")")
                #expect(reached.isEmpty, "nothing went to the private address: \(reached)")
            }
        }
    }
}
