import CUploadQueueSystem
import Foundation
import Testing
@testable import UploadQueue

/// A captive portal, a proxy or a lying server never makes a job `uploaded`: against the real servers behind the
/// fault proxy's portal mode (a `200` login page, a redirect to another origin, a `511`), every protocol and every
/// intake mode wait without failing and without releasing anything, say why, and go once the portal is gone, each
/// file stored once and byte-identical.
@Suite struct PortalTests {
    /// One destination of each protocol, each behind a fault proxy of its own, and how to read back what its
    /// server stored.
    struct Destinations {
        let proxies: [String: FaultProxy]
        let bucket: S3TestBucket
        let rufh: RUFHTestServer
        let recorder: RecorderSession
        let davPrefix: String
        let config: String

        static func make() async throws -> Destinations {
            let bucket = try await S3TestBucket.make()
            let rufh = try await RUFHTestServer.make(interop: 8)
            let recorder = try RecorderSession()
            let davPrefix = "/portal-" + UUID().uuidString.prefix(8).lowercased()
            let proxies = [
                "tus": try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint())),
                "s3": try await FaultProxy.start(upstream: try TestServers.authority(bucket.endpoint)),
                "rufh": try await FaultProxy.start(upstream: try TestServers.authority(rufh.endpoint)),
                "put": try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL())),
                "post": try await FaultProxy.start(upstream: try TestServers.authority(recorder.url())),
            ]
            let recorderPath = String(recorder.url().drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" })
            let config = """
                [destinations.tus]
                protocol = "tus"
                url = "\(proxies["tus"]!.url("/files/"))"
                chunk_size = "256KiB"
                circuit_probe_interval = "1s"
                [destinations.s3]
                \(bucket.destination(endpoint: proxies["s3"]!.url(""), "circuit_probe_interval = \"1s\""))
                [destinations.rufh]
                protocol = "rufh"
                url = "\(proxies["rufh"]!.url(rufh.path))"
                interop_version = 8
                chunk_size = "256KiB"
                circuit_probe_interval = "1s"
                [destinations.put]
                protocol = "http-put"
                url = "\(proxies["put"]!.url(davPrefix + "/{job_id}-{name}"))"
                circuit_probe_interval = "1s"
                [destinations.post]
                protocol = "http-post"
                url = "\(proxies["post"]!.url(recorderPath))"
                remote_url_from = "json:/url"
                circuit_probe_interval = "1s"
                """
            return Destinations(proxies: proxies, bucket: bucket, rufh: rufh, recorder: recorder, davPrefix: davPrefix,
                                config: config)
        }

        /// Every proxy answers as a portal of `style` until `clear()`.
        func portal(_ style: String) async throws {
            for proxy in proxies.values { try await proxy.add(["action": "portal", "style": style, "times": -1]) }
        }

        func clear() async throws {
            for proxy in proxies.values { try await proxy.clearRules() }
        }

        /// The SHA-256 of what the destination's server stored for `job`.
        func stored(_ job: Job, in sandbox: Sandbox) async throws -> String? {
            switch job.destination {
            case "tus":
                return try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: try #require(job.remoteURL)))
            case "s3":
                return try sha256(ofFile: try await bucket.download("\(job.id)-\(job.originalName)",
                                                                    to: sandbox.root + "/s3-\(job.id)"))
            case "rufh":
                let uploads = try await rufh.uploads()
                return uploads.values.first { ($0["complete"] as? Bool) == true && $0["length"] as? Int == Int(job.size)
                    && $0["sha256"] as? String == job.sha256 }?["sha256"] as? String
            case "put":
                return try sha256(ofFile: try TestServers.davRoot() + davPrefix + "/\(job.id)-\(job.originalName)")
            default:
                let files = try await recorder.requests().compactMap { ($0["form"] as? [String: Any])?["files"] as? [[String: Any]] }
                return files.joined().first { $0["sha256"] as? String == job.sha256 }?["sha256"] as? String
            }
        }

        /// How many times the destination's server itself took the file (not the portal): uploads created (tus,
        /// RUFH), objects written (S3, PUT), records made (POST), counted from what each proxy passed on.
        func deliveries(_ job: Job) async throws -> Int {
            let passed = try await proxies[job.destination]!.requests().filter { ($0["action"] as? String) != "portal" }
            switch job.destination {
            case "tus", "rufh":
                // One creation per upload; its Location names the upload the job's remote URL is.
                return passed.filter { $0["method"] as? String == "POST" && ($0["upstream_status"] as? Int) == 201 }
                    .filter { entry in
                        let location = (entry["response_headers"] as? [String: String])?["location"] ?? ""
                        return !location.isEmpty && (job.remoteURL ?? "").hasSuffix(String(location.split(separator: "/").last ?? ""))
                    }.count
            case "s3":
                return passed.filter { $0["method"] as? String == "PUT" && ($0["path"] as? String ?? "").contains(job.id.rawValue)
                    && ($0["upstream_status"] as? Int) == 200 }.count
            case "put":
                return passed.filter { $0["method"] as? String == "PUT" && ($0["path"] as? String ?? "").contains(job.id.rawValue)
                    && (200..<300).contains(($0["upstream_status"] as? Int) ?? 0) }.count
            default:
                return try await recorder.requests().filter { entry in
                    (((entry["form"] as? [String: Any])?["files"] as? [[String: Any]]) ?? []).contains {
                        $0["sha256"] as? String == job.sha256
                    }
                }.count
            }
        }
    }

    @Test("behind a portal (200 page, redirect, 511) for 30 s: nothing uploaded, released or failed, the reason shown; once it is gone every file arrives once, byte-identical",
          arguments: ["html", "redirect", "511"])
    func portalThenClear(style: String) async throws {
        let destinations = try await Destinations.make()
        let sandbox = try Sandbox(config: destinations.config)
        try await destinations.portal(style)
        let running = try RunningQueue(sandbox)
        var jobs: [(id: JobID, mode: IntakeMode, path: String)] = []
        for (index, name) in ["tus", "s3", "rufh", "put", "post"].enumerated() {
            for (offset, mode) in [IntakeMode.copy, .move, .reference].enumerated() {
                let seed = UInt64(9100 + index * 10 + offset)
                let path = try sandbox.makeFile(sandbox.root + "/in/\(name)-\(mode.rawValue).jpg",
                                                size: 300_000 + index * 1000 + offset, seed: seed)
                jobs.append((try await running.enqueue(path, to: name, mode: mode), mode, path))
            }
        }
        let held = try await eventually(timeout: .seconds(20)) {
            try jobs.allSatisfy { try running.queue.store.job($0.id)?.waitingReason == .unverifiedAnswer }
        }
        let seen = { () throws -> String in
            try jobs.map { try running.queue.store.job($0.id).map { job in
                "\(job.destination): \(job.state) \(job.waitingReason?.rawValue ?? "-") \(job.lastError ?? "")"
            } ?? "-" }.joined(separator: "; ")
        }
        let whenHeld = try seen()
        #expect(held, "\(whenHeld)")
        // Thirty seconds behind the portal, its trials included.
        try await Task.sleep(for: .seconds(30))
        for job in jobs {
            let now = try #require(try running.queue.store.job(job.id))
            // Pending, or a trial on its way into the portal: never uploaded, never failed.
            #expect((now.state == .pending || now.state == .uploading) && !now.permanent && now.failures == 0,
                    "\(now.destination) \(job.mode): \(now)")
            if now.state == .pending {
                #expect(now.waitingHolds.first?.text().contains("unverified answer") == true, "\(now.waitingHolds)")
            }
            let attempts = try running.attempts(job.id)
            #expect(attempts.allSatisfy { $0.outcome == "unverified" || $0.outcome == nil }, "\(attempts)")
            // Nothing is released: the queue's copy is there, a reference file where it was.
            if job.mode == .reference {
                #expect(FileManager.default.fileExists(atPath: job.path))
            } else {
                #expect(FileManager.default.fileExists(atPath: now.file), "\(job.mode): the queue's copy is kept")
            }
        }
        let status = try await BinaryRunner.run(["status", "--config", sandbox.configPath])
        #expect(status.stdout.contains("unproven: tus: a captive portal or a proxy answered"), "\(status.stdout)")
        let shown = try await BinaryRunner.run(["show", jobs[0].id.rawValue, "--config", sandbox.configPath]).stdout
        #expect(shown.contains("log in on the network, or wait"), "\(shown)")
        let metrics = try await BinaryRunner.run(["status", "--prometheus", "--config", sandbox.configPath]).stdout
        #expect(metrics.contains("uploadq_unverified_answer{destination=\"s3\"} 1"), "\(metrics)")

        try await destinations.clear()
        let done = try await eventually(timeout: .seconds(90)) {
            try jobs.allSatisfy { try running.queue.store.job($0.id)?.state == .uploaded }
        }
        let whenDone = try seen()
        #expect(done, "\(whenDone)")
        for job in jobs {
            let uploaded = try #require(try running.queue.store.job(job.id))
            guard uploaded.state == .uploaded else { continue }
            #expect(try await destinations.stored(uploaded, in: sandbox) == uploaded.sha256, "\(uploaded.destination) \(job.mode)")
            #expect(try await destinations.deliveries(uploaded) == 1, "\(uploaded.destination) \(job.mode): stored once")
        }
        await running.stop()
    }

    @Test("a tus upload cut off by a portal mid-file waits, then resumes from the server's offset once it is gone")
    func resumeAfterPortal() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(proxy.url("/files/"))"
            chunk_size = "1MiB"
            circuit_probe_interval = "1s"
            """, bandwidth: 4 << 20)
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeRandomFile(sandbox.root + "/clip.mov", size: 16 << 20), to: "tus")
        let part = try await running.wait(id, timeout: .seconds(20)) { $0.bytesConfirmed >= 4 << 20 }
        try await proxy.add(["action": "portal", "style": "html", "times": -1])
        let held = try await running.wait(id, timeout: .seconds(20)) { $0.waitingReason == .unverifiedAnswer }
        #expect(held.state == .pending && held.bytesConfirmed >= part.bytesConfirmed, "kept its offset: \(held)")
        try await Task.sleep(for: .seconds(3))
        try await proxy.clearRules()
        let done = try await running.settled(id, timeout: .seconds(60))
        await running.stop()
        #expect(done.state == .uploaded, "\(done.lastError ?? "")")
        #expect(try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: try #require(done.remoteURL))) == done.sha256)
        let created = try await proxy.requests().filter { $0["method"] as? String == "POST" && $0["action"] as? String != "portal" }
        #expect(created.count == 1, "one upload, resumed, not a second one")
        let resumedFrom = try running.attempts(id).last?.startOffset ?? 0
        #expect(resumedFrom >= held.bytesConfirmed, "resumed from the server's offset \(resumedFrom)")
    }

    @Test("a server that answers 201 to a PUT but keeps a truncated body: the HEAD shows it, nothing is released, the file is sent again")
    func lyingServer() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL()))
        let prefix = "/liar-" + UUID().uuidString.prefix(8).lowercased()
        let sandbox = try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(proxy.url(prefix + "/{job_id}-{name}"))"
            circuit_probe_interval = "1s"
            """)
        try await proxy.add(["method": "PUT", "action": "truncate", "after_bytes": 1000, "times": 2])
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 200_000, seed: 9301), to: "dav")
        let held = try await running.wait(id, timeout: .seconds(20)) { $0.waitingReason == .unverifiedAnswer }
        #expect(held.state == .pending && FileManager.default.fileExists(atPath: held.file), "nothing released")
        let first = try #require(try running.attempts(id).first)
        #expect(first.outcome == "unverified" && first.error?.contains("shows 1000 bytes, not the 200000 bytes sent") == true,
                "\(first)")
        let done = try await running.settled(id, timeout: .seconds(30))
        await running.stop()
        #expect(done.state == .uploaded, "\(done.lastError ?? "")")
        #expect(try sha256(ofFile: try TestServers.davRoot() + prefix + "/\(id)-a.jpg") == done.sha256)
        let heads = try await proxy.requests().filter { $0["method"] as? String == "HEAD" }
        #expect(heads.count == 3, "each PUT was checked: \(heads.count)")
    }

    @Test("a PUT answered with the digest of what was stored (RFC 9530, asked for) needs no HEAD; one naming another digest is unverified")
    func digestInTheAnswer() async throws {
        let recorder = try RecorderSession()
        let sandbox = try Sandbox(destination: "api", """
            protocol = "http-put"
            url = "\(recorder.url("/files/{job_id}-{name}"))"
            circuit_probe_interval = "1s"
            """)
        let wrong = "sha-256=:\(Data(repeating: 7, count: 32).base64EncodedString()):"
        try await recorder.script([["status": 201, "headers": ["Repr-Digest": wrong]]])
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 30_000, seed: 9501), to: "api")
        let done = try await running.settled(id, timeout: .seconds(30))
        let attempts = try running.attempts(id)
        await running.stop()
        #expect(done.state == .uploaded, "\(done.lastError ?? "")")
        #expect(attempts.first?.outcome == "unverified" && attempts.first?.error?.contains("naming Repr-Digest sha-256") == true,
                "\(attempts)")
        let requests = try await recorder.requests(includingHEAD: true)
        #expect(requests.filter { $0["method"] as? String == "PUT" }.count == 2)
        #expect(requests.allSatisfy { ($0["headers"] as? [String: String])?["want-repr-digest"] == "sha-256=10" })
        #expect(!requests.contains { $0["method"] as? String == "HEAD" }, "the digest in the answer was the proof")
    }

    @Test("a connectivity check that meets a portal makes the link portal: nothing is sent, not even a trial; when it answers 204 again, everything goes at once")
    func connectivityCheck() async throws {
        let check = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL()))
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL()))
        let prefix = "/checked-" + UUID().uuidString.prefix(8).lowercased()
        try await check.add(["action": "portal", "style": "redirect", "times": -1])
        let sandbox = try Sandbox(config: """
            [link]
            connectivity_check = "\(check.url("/generate_204"))"
            [destinations.dav]
            protocol = "http-put"
            url = "\(proxy.url(prefix + "/{job_id}-{name}"))"
            """)
        let running = try RunningQueue(sandbox)
        var ids: [JobID] = []
        for index in 0..<3 {
            ids.append(try await running.enqueue(try sandbox.makeFile(sandbox.root + "/p\(index).jpg", size: 50_000,
                                                                       seed: UInt64(9400 + index)), to: "dav"))
        }
        let held = try await eventually(timeout: .seconds(20)) {
            try ids.allSatisfy { try running.queue.store.job($0)?.waitingReason == .portal }
        }
        #expect(held)
        let shown = try await BinaryRunner.run(["show", ids[0].rawValue, "--config", sandbox.configPath]).stdout
        #expect(shown.contains("captive portal on the link"), "\(shown)")
        try await Task.sleep(for: .seconds(3))
        #expect(try await proxy.requests().isEmpty, "nothing goes through a link behind a portal")
        let doctor = try await BinaryRunner.run(["doctor", "--config", sandbox.configPath])
        #expect(doctor.stdout.contains("a redirect to http://portal.invalid:8080 instead of 204: a captive portal is in the way"),
                "\(doctor.stdout)")
        #expect(doctor.stdout.contains("log in on the network's portal"), "\(doctor.stdout)")
        let cleared = ContinuousClock.now
        try await check.clearRules()
        let done = try await eventually(timeout: .seconds(30)) {
            try ids.allSatisfy { try running.queue.store.job($0)?.state == .uploaded }
        }
        await running.stop()
        #expect(done)
        #expect(ContinuousClock.now - cleared < .seconds(20), "the uploads follow the check, which looks every 5 s")
    }
}

/// The protocols' own proofs against real servers, each broken once by the fault proxy: what fails the proof
/// waits as `unverified-answer` (no failure counted), and the next trial, answered truly, uploads.
@Suite struct ProofOfReceiptTests {
    func s3Sandbox(_ bucket: S3TestBucket, proxy: FaultProxy, extra: String = "") throws -> Sandbox {
        try Sandbox(destination: "s3", bucket.destination(endpoint: proxy.url(""), """
            part_size = "5MiB"
            multipart_threshold = "6MiB"
            circuit_probe_interval = "1s"
            \(extra)
            """))
    }

    /// Uploads one file while `rule` is armed once; returns the job and its attempts.
    func once(_ sandbox: Sandbox, _ proxy: FaultProxy, rule: [String: Any], size: Int, seed: UInt64,
              to destination: String) async throws -> (Job, [JobAttempt]) {
        try await proxy.add(rule)
        return try await sandbox.uploadOne("f.bin", size: size, seed: seed, to: destination)
    }

    @Test("S3: a PutObject answered with an ETag that is not the MD5 sent proves nothing; the trial stores it")
    func s3WrongETag() async throws {
        let bucket = try await S3TestBucket.make()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(bucket.endpoint))
        let sandbox = try s3Sandbox(bucket, proxy: proxy)
        let (job, attempts) = try await once(sandbox, proxy, rule: [
            "method": "PUT", "action": "rewrite", "set_headers": ["ETag": "\"0123456789abcdef0123456789abcdef\""],
        ], size: 100_000, seed: 9601, to: "s3")
        #expect(job.state == .uploaded && job.failures == 0, "\(job.lastError ?? "")")
        #expect(attempts.first?.outcome == "unverified"
                && attempts.first?.error?.contains("not the MD5 of the bytes sent") == true, "\(attempts)")
        let puts = try await proxy.requests().filter { $0["method"] as? String == "PUT" }
        #expect(puts.allSatisfy { ($0["headers"] as? [String: String])?["content-md5"] != nil }, "Content-MD5 sent")
    }

    @Test("S3: a CompleteMultipartUpload result naming another key proves nothing; the parts stay, the trial completes")
    func s3CompleteOtherKey() async throws {
        let bucket = try await S3TestBucket.make()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(bucket.endpoint))
        let sandbox = try s3Sandbox(bucket, proxy: proxy)
        let lie = "<?xml version=\"1.0\"?><CompleteMultipartUploadResult><Bucket>\(bucket.name)</Bucket>"
            + "<Key>someone-else.bin</Key><ETag>\"x-2\"</ETag></CompleteMultipartUploadResult>"
        let (job, attempts) = try await once(sandbox, proxy, rule: [
            "method": "POST", "target": "uploadId=", "action": "respond", "status": 200,
            "headers": ["Content-Type": "application/xml"], "body": lie,
        ], size: 8 << 20, seed: 9602, to: "s3")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(attempts.first?.outcome == "unverified" && attempts.first?.error?.contains("someone-else.bin") == true,
                "\(attempts)")
        let parts = try await proxy.requests().filter { ($0["path"] as? String ?? "").contains("partNumber=") }
        #expect(parts.count == 2, "the parts were kept, not sent again: \(parts.count)")
        #expect(try sha256(ofFile: try await bucket.download("\(job.id)-f.bin", to: sandbox.root + "/copy")) == job.sha256)
    }

    @Test("S3 etag = opaque: a HEAD of each object proves it, by its size and the checksum a PutObject sent")
    func s3Opaque() async throws {
        let bucket = try await S3TestBucket.make()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(bucket.endpoint))
        let sandbox = try s3Sandbox(bucket, proxy: proxy, extra: "etag = \"opaque\"")
        let running = try RunningQueue(sandbox)
        let small = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/s.bin", size: 70_000, seed: 9603), to: "s3")
        let large = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/l.bin", size: 7 << 20, seed: 9604), to: "s3")
        for id in [small, large] {
            let job = try await running.settled(id)
            #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        }
        await running.stop()
        let requests = try await proxy.requests()
        let heads = requests.filter { $0["method"] as? String == "HEAD" }
        #expect(heads.count == 2, "one HEAD per object: \(heads.count)")
        let put = try #require(requests.first { $0["method"] as? String == "PUT" && !($0["path"] as? String ?? "").contains("partNumber") })
        #expect((put["headers"] as? [String: String])?["x-amz-checksum-sha256"] != nil)
    }

    @Test("POST: an empty 200 proves nothing (no Location, no body); verify = status takes an HTML page for a success")
    func postAnswers() async throws {
        let recorder = try RecorderSession()
        let sandbox = try Sandbox(destination: "api", """
            protocol = "http-post"
            url = "\(recorder.url("/photos"))"
            circuit_probe_interval = "1s"
            """)
        try await recorder.script([["status": 200]])
        let (job, attempts) = try await sandbox.uploadOne("a.jpg", size: 20_000, seed: 9605, to: "api")
        #expect(job.state == .uploaded && attempts.first?.outcome == "unverified"
                && attempts.first?.error?.contains("with nothing in it") == true, "\(attempts)")
        #expect(job.remoteURL?.contains("/objects/") == true, "the Location on its origin: \(job.remoteURL ?? "")")

        let pages = try RecorderSession()
        let lenient = try Sandbox(destination: "form", """
            protocol = "http-post"
            url = "\(pages.url("/form"))"
            verify = "status"
            """)
        try await pages.script([["status": 200, "headers": ["Content-Type": "text/html"],
                                 "body": "<html><body>Thank you for your upload</body></html>"]])
        let (accepted, tries) = try await lenient.uploadOne("b.jpg", size: 20_000, seed: 9606, to: "form")
        #expect(accepted.state == .uploaded && tries.count == 1, "\(tries)")
    }
}
