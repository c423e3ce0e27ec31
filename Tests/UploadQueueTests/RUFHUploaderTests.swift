import Foundation
import Testing
@testable import UploadQueue

/// IETF Resumable Uploads for HTTP against our strict server (contrib/test-servers/rufh_server.py), one server of
/// its own per test, for interop versions 6, 7 and 8: creation, limits, appends, resync, loss, expiry, cancel and
/// 413s.
struct RUFHUploaderTests {
    func sandbox(endpoint: String, interop: Int, chunk: Int = 256 << 10, extra: String = "") throws -> Sandbox {
        try Sandbox(destination: "rufh", """
            protocol = "rufh"
            url = "\(endpoint)"
            interop_version = \(interop)
            chunk_size = \(chunk)
            stall_timeout = "2s"
            \(extra)
            """, retry: "300ms")
    }

    static func header(_ request: [String: Any], _ name: String) -> String? {
        (request["headers"] as? [String: String])?[name.lowercased()]
    }

    static func uploadID(_ job: Job) throws -> String {
        String(try #require(job.remoteURL?.split(separator: "/").last))
    }

    /// Uploads `files` (name, size, seed) one after the other through a queue on `sandbox`: each settled job, with
    /// how many requests `server` had seen once it settled.
    func uploadInTurn(_ files: [(name: String, size: Int, seed: UInt64)], sandbox: Sandbox,
                      server: RUFHTestServer) async throws -> [(job: Job, requestsSeen: Int)] {
        let running = try RunningQueue(sandbox)
        var settled: [(job: Job, requestsSeen: Int)] = []
        for file in files {
            let path = try sandbox.makeFile(sandbox.root + "/" + file.name, size: file.size, seed: file.seed)
            let job = try await running.settled(try await running.enqueue(path, to: "rufh"))
            #expect(job.state == .uploaded, "\(file.name): \(job.lastError ?? "")")
            #expect(try running.attempts(job.id).map(\.outcome) == ["uploaded"], "\(file.name)")
            settled.append((job, try await server.requests().count))
        }
        await running.stop()
        return settled
    }

    @Test("careful creation, appends within Upload-Limit, Upload-Complete and Repr-Digest on the last, every request versioned",
          arguments: [6, 7, 8])
    func conformance(interop: Int) async throws {
        let server = try await RUFHTestServer.make(interop: interop, ["max_append_size": 300_000,
                                                                      "min_append_size": 100_000])
        // chunk_size above max-append-size: the server's limit wins.
        let sandbox = try sandbox(endpoint: server.endpoint, interop: interop, chunk: 512 << 10)
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 1_000_000, seed: 61)
        let id = try await running.enqueue(path, to: "rufh")
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let upload = try #require(try await server.uploads()[try Self.uploadID(job)])
        #expect(upload["complete"] as? Bool == true)
        #expect(upload["sha256"] as? String == job.sha256)
        let requests = try await server.requests()
        #expect(requests.allSatisfy { Self.header($0, "Upload-Draft-Interop-Version") == "\(interop)" })
        #expect(requests.allSatisfy { ($0["status"] as? Int ?? 0) < 400 }, "\(requests.map { $0["status"] ?? 0 })")
        let posts = requests.filter { $0["method"] as? String == "POST" }
        #expect(posts.count == 1)
        #expect(posts.first.map { Self.header($0, "Upload-Complete") } == "?0")
        #expect(posts.first?["body_bytes"] as? Int == 0, "careful creation sends no data")
        let patches = requests.filter { $0["method"] as? String == "PATCH" }
        var offset = 0
        for (index, patch) in patches.enumerated() {
            let last = index == patches.count - 1
            let size = patch["body_bytes"] as? Int ?? -1
            #expect(Self.header(patch, "Upload-Offset") == "\(offset)")
            #expect(Self.header(patch, "Content-Type") == "application/partial-upload")
            #expect(Self.header(patch, "Upload-Complete") == (last ? "?1" : "?0"))
            #expect(size <= 300_000 && (last || size >= 100_000), "append \(index): \(size) bytes")
            #expect((Self.header(patch, "Repr-Digest") != nil) == last)
            offset += size
        }
        #expect(offset == 1_000_000)
        #expect(patches.count == 4, "1,000,000 bytes in appends of at most 300,000")
    }

    @Test("creation_with_upload: a file of one append goes whole in its creation, proven by the answer, its URL from the 104; a larger one is created carefully",
          arguments: [6, 7, 8])
    func creationWithUpload(interop: Int) async throws {
        let server = try await RUFHTestServer.make(interop: interop)
        let sandbox = try sandbox(endpoint: server.endpoint, interop: interop, extra: "creation_with_upload = true")
        let settled = try await uploadInTurn([("small.jpg", 100_000, 71), ("large.raw", 600_000, 72)],
                                             sandbox: sandbox, server: server)
        let (smallJob, largeJob) = (settled[0].job, settled[1].job)
        let requests = try await server.requests()
        // The small file: one POST with the whole file, and nothing else but the OPTIONS that reads the limits.
        let sent = requests.prefix(settled[0].requestsSeen).filter { $0["method"] as? String != "OPTIONS" }
        #expect(sent.count == 1, "\(sent.map { $0["method"] ?? "" })")
        let creation = try #require(sent.first)
        #expect(creation["method"] as? String == "POST" && creation["body_bytes"] as? Int == 100_000)
        #expect(Self.header(creation, "Upload-Complete") == "?1" && Self.header(creation, "Upload-Length") == "100000")
        #expect(Self.header(creation, "Repr-Digest") != nil && Self.header(creation, "Content-Type") == smallJob.contentType)
        // Its upload, named by the 104 (the final answer names none), holds the file, complete.
        let upload = try #require(try await server.uploads()[try Self.uploadID(smallJob)], "\(smallJob.remoteURL ?? "")")
        #expect(upload["complete"] as? Bool == true && upload["sha256"] as? String == smallJob.sha256)
        // The large file: the careful creation, then appends.
        let later = requests.dropFirst(settled[0].requestsSeen)
        #expect(later.filter { $0["method"] as? String == "POST" }.map { Self.header($0, "Upload-Complete") } == ["?0"])
        #expect(later.filter { $0["method"] as? String == "PATCH" }.count == 3)
        #expect(try await server.uploads()[try Self.uploadID(largeJob)]?["sha256"] as? String == largeJob.sha256)
    }

    @Test("creation_with_upload: a 413 for the whole file falls back to the careful creation; without a 104 the answer still proves it")
    func creationWithUploadRefused() async throws {
        let server = try await RUFHTestServer.make(interop: 8, ["body_cap": 50_000, "send_104": false])
        let sandbox = try sandbox(endpoint: server.endpoint, interop: 8, extra: "creation_with_upload = true")
        let settled = try await uploadInTurn([("a.jpg", 100_000, 73), ("b.jpg", 40_000, 74)], sandbox: sandbox,
                                             server: server)
        let (refusedJob, fitsJob, afterRefused) = (settled[0].job, settled[1].job, settled[0].requestsSeen)
        let requests = try await server.requests()
        let first = requests.prefix(afterRefused).filter { $0["method"] as? String != "OPTIONS" }
        #expect(first.map { "\($0["method"] ?? "") \($0["status"] ?? "")" }
                == ["POST 413", "POST 201", "PATCH 204", "PATCH 200"], "\(first.map { $0["method"] ?? "" })")
        #expect(try await server.uploads()[try Self.uploadID(refusedJob)]?["sha256"] as? String == refusedJob.sha256)
        // 40,000 bytes fit the cap it learnt: one request, proven by `Upload-Complete: ?1` though nothing named it.
        let second = requests.dropFirst(afterRefused).filter { $0["method"] as? String != "OPTIONS" }
        #expect(second.map { "\($0["method"] ?? "") \($0["status"] ?? "")" } == ["POST 200"])
        #expect(fitsJob.remoteURL == server.endpoint)
        #expect(try await server.uploads().values.contains { $0["sha256"] as? String == fitsJob.sha256 && $0["complete"] as? Bool == true })
    }

    @Test("creation_with_upload at interop 6: a 2xx that names no upload and carries no field of the draft proves nothing")
    func creationWithUploadUnnamed() async throws {
        let server = try await RUFHTestServer.make(interop: 6, ["send_104": false])
        let sandbox = try sandbox(endpoint: server.endpoint, interop: 6, extra: "creation_with_upload = true")
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/c.jpg", size: 20_000, seed: 75),
                                           to: "rufh")
        let job = try await running.wait(id) { $0.attempts >= 1 && $0.state != .uploading }
        let attempts = try running.attempts(id)
        await running.stop()
        #expect(job.state != .uploaded, "a 200 with nothing of the draft in it is no proof")
        #expect(attempts.first?.outcome == "unverified", "\(attempts)")
        #expect(attempts.first?.error?.contains("creation_with_upload off") == true, "\(attempts)")
    }

    @Test("below min-append-size, chunk_size grows to the server's minimum; an empty file is created complete")
    func minimumAppendAndEmptyFile() async throws {
        let server = try await RUFHTestServer.make(interop: 8, ["min_append_size": 150_000])
        let sandbox = try sandbox(endpoint: server.endpoint, interop: 8, chunk: 64 << 10)
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/a.raw", size: 400_000, seed: 62)
        let empty = try sandbox.makeFile(sandbox.root + "/empty.txt", size: 0, seed: 0)
        let id = try await running.enqueue(path, to: "rufh")
        let emptyID = try await running.enqueue(empty, to: "rufh")
        let job = try await running.settled(id)
        let emptyJob = try await running.settled(emptyID)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(emptyJob.state == .uploaded, "\(emptyJob.lastError ?? "")")
        let requests = try await server.requests()
        let sizes = requests.filter { $0["method"] as? String == "PATCH" }.map { $0["body_bytes"] as? Int ?? -1 }
        #expect(sizes == [150_000, 150_000, 100_000])
        let creations = requests.filter { $0["method"] as? String == "POST" }
        #expect(creations.contains { Self.header($0, "Upload-Complete") == "?1" && Self.header($0, "Upload-Length") == "0" })
        let uploads = try await server.uploads()
        #expect(uploads.values.filter { $0["complete"] as? Bool == true }.count == 2)
    }

    @Test("a 409 resyncs to the offset it carries; a lost append is found by the next 409; bytes identical",
          arguments: [6, 8])
    func conflictAndLoss(interop: Int) async throws {
        let server = try await RUFHTestServer.make(interop: interop)
        let sandbox = try sandbox(endpoint: server.endpoint, interop: interop, chunk: 100_000)
        let running = try RunningQueue(sandbox)
        try await server.update(["conflict_appends": 1, "lose_appends": 1])
        let path = try sandbox.makeFile(sandbox.root + "/b.raw", size: 450_000, seed: 63)
        let id = try await running.enqueue(path, to: "rufh")
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let upload = try #require(try await server.uploads()[try Self.uploadID(job)])
        #expect(upload["sha256"] as? String == job.sha256, "the lost append was sent again")
        let statuses = try await server.requests().filter { $0["method"] as? String == "PATCH" }.map { $0["status"] as? Int }
        // Interop 6 answers each append with the offset it kept, so the lost one is seen at once; 7 and later
        // answer without it, and the next append's 409 tells.
        #expect(statuses.filter { $0 == 409 }.count == (interop == 6 ? 1 : 2), "\(statuses)")
        #expect(try running.attempts(id).count == 1, "resyncs happen inside one attempt")
    }

    @Test("an upload past its max-age, or gone, is started again; the old one is not continued")
    func expiry() async throws {
        let server = try await RUFHTestServer.make(interop: 8, ["max_age": 3600])
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(server.endpoint))
        let endpoint = proxy.url(server.path)
        let sandbox = try sandbox(endpoint: endpoint, interop: 8, chunk: 100_000)
        let configuration = try sandbox.configuration()
        let queue = try UploadQueue(configuration: configuration)
        let path = try sandbox.makeFile(sandbox.root + "/c.raw", size: 350_000, seed: 64)
        let id = try await queue.enqueue(path, destination: "rufh")
        var job = try #require(try queue.store.job(id))
        let destination = try #require(configuration.destinations["rufh"])
        guard case .rufh(let settings) = destination.settings else { throw UploadQueueError(.invalidArgument, "not rufh") }
        let engine = TransferEngine()
        defer { engine.shutdown() }
        let uploader = RUFHUploader(destination: destination, settings: settings, engine: engine)

        // The first attempt is cut off at its second append.
        try await proxy.add(["method": "PATCH", "action": "reset", "after_bytes": 1000, "skip": 1, "times": 1])
        let first = ContextRecorder()
        await #expect(throws: TransferFailure.self) { _ = try await uploader.upload(first.context(for: job)) }
        let kept = try #require(first.states().last ?? nil)
        var state = try #require(RUFHResumeState(json: kept))
        #expect(state.expiresAt != nil, "max-age is remembered")

        // The server forgets it: the next attempt asks, gets 404, and makes a new upload. (Whether the first
        // attempt reached its completing append depends on where the reset fell; that case is the last below.)
        try await server.update(["expire_all": true])
        state.completing = nil
        job.resumeState = state.json
        let second = ContextRecorder()
        let outcome = try await uploader.upload(second.context(for: job))
        #expect(outcome.remoteURL != state.uploadURL)
        let uploads = try await server.uploads()
        #expect(uploads.values.filter { $0["complete"] as? Bool == true }.count == 1)
        #expect(uploads.values.contains { $0["sha256"] as? String == job.sha256 })

        // A record past its max-age is still asked about (its last answer may have been lost): the server's
        // 404 says it is gone, and a new upload is made.
        var stale = state
        stale.expiresAt = Date().timeIntervalSince1970 - 10
        job.resumeState = stale.json
        let before = try await server.requests().count
        _ = try await uploader.upload(ContextRecorder().context(for: job))
        let after = try await server.requests().dropFirst(before).map { $0["method"] as? String ?? "" }
        #expect(Array(after.prefix(2)) == ["HEAD", "POST"], "\(after)")

        // Gone after the completing append was sent: completed with its answer lost, or expired. Neither a loss nor
        // a second copy: the job fails for good, saying so, and its record is forgotten for `uploadq retry`.
        var completing = state
        completing.completing = true
        job.resumeState = completing.json
        let third = ContextRecorder()
        do {
            _ = try await uploader.upload(third.context(for: job))
            Issue.record("an upload gone after its completing append was taken as done or made again")
        } catch {
            #expect(error.code == "completion-unverified" && error.kind == .permanent, "\(error)")
        }
        #expect(third.states().last == .some(nil), "the record is forgotten")
    }

    @Test("a file over the announced max-size fails for good, its limit named, before any byte goes out")
    func tooLarge() async throws {
        let server = try await RUFHTestServer.make(interop: 7, ["max_size": 500_000])
        let sandbox = try sandbox(endpoint: server.endpoint, interop: 7)
        let configuration = try sandbox.configuration()
        let destination = try #require(configuration.destinations["rufh"])
        guard case .rufh(let settings) = destination.settings else { throw UploadQueueError(.invalidArgument, "not rufh") }
        let engine = TransferEngine()
        defer { engine.shutdown() }
        let uploader = RUFHUploader(destination: destination, settings: settings, engine: engine)
        let queue = try UploadQueue(configuration: configuration)

        let big = try await queue.enqueue(try sandbox.makeFile(sandbox.root + "/big.raw", size: 600_000, seed: 65),
                                          destination: "rufh")
        let bigJob = try #require(try queue.store.job(big))
        do {
            _ = try await uploader.upload(ContextRecorder().context(for: bigJob))
            Issue.record("a file over max-size was taken")
        } catch {
            #expect(error.kind == .permanent && error.code == "too-large")
            #expect(error.message.contains("500000"), "\(error.message)")
        }
        #expect(try await server.requests().allSatisfy { $0["method"] as? String == "OPTIONS" })
    }

    @Test("cancelling a job in flight sends DELETE to its upload, which the server then forgets")
    func cancelInFlight() async throws {
        let server = try await RUFHTestServer.make(interop: 8)
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(server.endpoint))
        let sandbox = try sandbox(endpoint: proxy.url(server.path), interop: 8, chunk: 100_000)
        // The second append hangs: the job is caught mid-upload.
        try await proxy.add(["method": "PATCH", "action": "stall", "after_bytes": 1000, "seconds": 30, "skip": 1,
                             "times": 1])
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/s.raw", size: 300_000, seed: 66),
                                           to: "rufh")
        _ = try await running.wait(id) { $0.bytesConfirmed >= 100_000 }
        _ = try await running.queue.cancel(id)
        _ = try await eventually(timeout: .seconds(20)) {
            try await server.requests().contains { $0["method"] as? String == "DELETE" }
        }
        await running.stop()
        let uploads = try await server.uploads()
        #expect(uploads.count == 1 && uploads.values.allSatisfy { $0["deleted"] as? Bool == true })
    }

    @Test("a 413 above 3 MiB halves the appends until they pass; the next file starts at the learnt size")
    func bodyCap() async throws {
        let server = try await RUFHTestServer.make(interop: 8, ["body_cap": 3 << 20])
        let sandbox = try sandbox(endpoint: server.endpoint, interop: 8, chunk: 8 << 20)
        let running = try RunningQueue(sandbox)
        let first = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/v1.mov", size: 40 << 20, seed: 67),
                                              to: "rufh")
        let firstJob = try await running.settled(first)
        let afterFirst = try await server.requests().count
        let second = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/v2.mov", size: 5 << 20, seed: 68),
                                               to: "rufh")
        let secondJob = try await running.settled(second)
        await running.stop()
        #expect(firstJob.state == .uploaded, "\(firstJob.lastError ?? "")")
        #expect(secondJob.state == .uploaded, "\(secondJob.lastError ?? "")")
        let requests = try await server.requests()
        let patches = requests.prefix(afterFirst).filter { $0["method"] as? String == "PATCH" }
        #expect(patches.filter { $0["status"] as? Int == 413 }.count == 2, "8 MiB and 4 MiB refused, 2 MiB passes")
        #expect(patches.filter { $0["status"] as? Int != 413 }.allSatisfy { ($0["body_bytes"] as? Int ?? 0) <= 2 << 20 })
        let later = requests.dropFirst(afterFirst).filter { $0["method"] as? String == "PATCH" }
        #expect(!later.contains { $0["status"] as? Int == 413 }, "the learnt size is kept for the next file")
        #expect(try await server.uploads()[try Self.uploadID(firstJob)]?["sha256"] as? String == firstJob.sha256)
    }
}

/// The real `uploadq daemon` uploading 256 MiB with RUFH through the fault proxy, killed three times mid-append:
/// the server keeps what arrived of a cut append, so each restart asks it with HEAD and re-sends less than one
/// chunk.
@Suite(.serialized)
struct RUFHCrashTests {
    static let chunk = 8 << 20

    @Test("kill -9 three times mid-append: resumes from the server's offset, intact, < 1 chunk re-sent per kill")
    func killDuringUpload() async throws {
        let server = try await RUFHTestServer.make(interop: 8, ["max_age": 86_400])
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(server.endpoint))
        let sandbox = try Sandbox(destination: "rufh", """
            protocol = "rufh"
            url = "\(proxy.url(server.path))"
            interop_version = 8
            chunk_size = "8MiB"
            """, bandwidth: 16 << 20)
        let size = 256 << 20
        let source = try sandbox.makeRandomFile(sandbox.root + "/video.bin", size: size)
        let expected = try sha256(ofFile: source)
        let id = try await BinaryRunner.enqueue([source, "--destination", "rufh", "--config", sandbox.configPath])
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        func job() throws -> Job { try #require(try store.job(id)) }

        var daemon: DaemonProcess?
        for kill in 1...3 {
            // Counted from before the daemon starts: on a loaded machine it may be well on its way before the
            // test looks.
            let base = try await proxy.bodyBytes()
            daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-\(kill)")
            // Well into an append: 1.5 chunks further than where this run started.
            let midway = try await eventually(timeout: .seconds(60)) {
                try await proxy.bodyBytes() - base >= Self.chunk + Self.chunk / 2
            }
            #expect(midway, "daemon log:\n\(daemon?.log.suffix(2000) ?? "")")
            await daemon?.kill9()
            #expect(RUFHResumeState(json: try job().resumeState) != nil, "the upload URL was saved before its data")
        }
        daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-4")
        let finished = try await eventually(timeout: .seconds(120)) { try job().state == .uploaded }
        #expect(finished, "daemon log:\n\(daemon?.log.suffix(3000) ?? "")")
        let done = try job()
        #expect(done.sha256 == expected)
        let uploads = try await server.uploads()
        #expect(uploads.count == 1, "one upload, resumed three times")
        #expect(uploads.values.first?["sha256"] as? String == expected)
        let heads = try await proxy.requests().filter { $0["method"] as? String == "HEAD" }
        #expect(heads.count == 3, "each restart asks the server once")
        let sent = try await proxy.bodyBytes()
        print("rufh crash test: \(sent) bytes sent through the proxy for a \(size)-byte file with 3 kills "
            + "(\(String(format: "%.2f", Double(sent - size) / Double(Self.chunk))) chunks re-sent)")
        #expect(sent <= size + 3 * Self.chunk, "sent \(sent) bytes for a \(size)-byte file and 3 kills")
        #expect(await daemon?.terminate() ?? .zero < .seconds(5))
    }
}

/// The RFC 9651 fields of the draft, read without I/O.
struct UploadLimitTests {
    @Test("Upload-Limit: known keys as integers, unknown keys ignored, a wrong type spoils the field")
    func parse() {
        let limit = UploadLimit(field: "max-size=1000000, min-append-size=5, max-append-size=100, max-age=60, x=\"y\"")
        #expect(limit == UploadLimit(maximumSize: 1_000_000, maximumAppendSize: 100, minimumAppendSize: 5, lifetime: 60))
        #expect(UploadLimit(field: "expires=30")?.lifetime == 30, "interop 6 names it expires")
        #expect(UploadLimit(field: "min-size=0") == UploadLimit(minimumSize: 0))
        #expect(UploadLimit(field: "max-size=\"10\"") == nil)
        #expect(UploadLimit(field: "max-size=-1") == nil)
        #expect(UploadLimit(field: "max-size=1.5") == nil)
        #expect(UploadLimit(field: "max-size=, ") == nil)
        #expect(StructuredField.integer("42") == 42 && StructuredField.integer("-1") == nil)
        #expect(StructuredField.integer("4 2") == nil && StructuredField.integer("?1") == nil)
        #expect(StructuredField.boolean("?1") == true && StructuredField.boolean("?0") == false)
        #expect(StructuredField.boolean("1") == nil && StructuredField.boolean("true") == nil)
        // RFC 9651's newer types (a date, a display string) read as what they are, not as a crash (found by
        // fuzzing: the package's `bareItem` traps on them).
        #expect(StructuredField.integer("@4") == nil && StructuredField.boolean("@1700000000") == nil)
        #expect(StructuredField.integer("%\"4\"") == nil)
        #expect(UploadLimit(field: "max-size=@4") == nil && UploadLimit(field: "max-age=%\"60\"") == nil)
    }

    @Test("append lengths: the preferred size within max-append-size, raised to min-append-size unless the last")
    func appendLengths() {
        let limit = UploadLimit(maximumAppendSize: 300, minimumAppendSize: 100)
        #expect(limit.appendLength(remaining: 1000, preferred: 500) == 300)
        #expect(limit.appendLength(remaining: 1000, preferred: 50) == 100)
        #expect(limit.appendLength(remaining: 60, preferred: 50) == 60, "the last append may be small")
        #expect(limit.appendLength(remaining: 0, preferred: 50) == 0, "an empty completing append")
        #expect(UploadLimit().appendLength(remaining: 10, preferred: 1 << 20) == 10)
        #expect(RUFHUploader.expectedOffset(problem: Array(#"{"expected-offset": 100, "provided-offset": 0}"#.utf8)) == 100)
        #expect(RUFHUploader.expectedOffset(problem: Array(#"{"expected-offset": -3}"#.utf8)) == nil)
        #expect(RUFHUploader.expectedOffset(problem: Array(#"{"expected-offset": 1.5}"#.utf8)) == nil)
        #expect(RUFHUploader.reprDigest(sha256: String(repeating: "ab", count: 32))?.value
                == "sha-256=:\(Data(repeating: 0xAB, count: 32).base64EncodedString()):")
    }
}

/// A destination whose storage is full (HTTP 507): its jobs wait as `quota-full`, one tries again on a doubling
/// interval, and they all go once the storage takes files again.
struct QuotaFullTests {
    @Test("TrialWatch: held at the first refusal, one trial when due, twice the wait after a refused trial, cleared by an upload")
    func stateMachine() {
        var watch = TrialWatch()
        let policy = CircuitBreakerPolicy(threshold: 5, probeInterval: .seconds(10), maximumProbeInterval: .seconds(300))
        let start = Date(timeIntervalSince1970: 1_000_000)
        let (a, b, c) = (JobID(trusted: "a"), JobID(trusted: "b"), JobID(trusted: "c"))
        let full = TrialWatch.Held(reason: .quotaFull)
        #expect(watch.refused("d", full, job: a, policy: policy, now: start) == .held(full, until: start.addingTimeInterval(10)))
        #expect(watch.refused("d", full, job: b, policy: policy, now: start) == nil, "said once")
        #expect(watch.destinations(heldFor: .quotaFull) == ["d"])
        #expect(watch.dueTrials(now: start.addingTimeInterval(5), limit: 4, among: ["d"]).isEmpty)
        #expect(watch.dueTrials(now: start.addingTimeInterval(10), limit: 0, among: ["d"]).isEmpty, "no free slot")
        #expect(watch.dueTrials(now: start.addingTimeInterval(10), limit: 4, among: []).isEmpty, "offline: no trial")
        #expect(watch.nextTrialAt(among: ["d"]) == start.addingTimeInterval(10) && watch.nextTrialAt(among: []) == nil)
        #expect(watch.dueTrials(now: start.addingTimeInterval(10), limit: 4, among: ["d"]) == ["d"])
        watch.started("d", job: c)
        #expect(watch.dueTrials(now: start.addingTimeInterval(100), limit: 4, among: ["d"]).isEmpty, "one trial at a time")
        #expect(watch.finished("d", job: a, outcome: .other, now: start.addingTimeInterval(11)) == nil)
        #expect(watch.refused("d", full, job: c, policy: policy, now: start.addingTimeInterval(12))
                == .stillHeld(full, until: start.addingTimeInterval(32)), "the second wait is twice the first")
        #expect(watch.dueTrials(now: start.addingTimeInterval(32), limit: 4, among: ["d"]) == ["d"])
        watch.started("d", job: a)
        #expect(watch.finished("d", job: a, outcome: .uploaded, now: start.addingTimeInterval(33)) == .cleared(.quotaFull))
        #expect(watch.heldDestinations.isEmpty)
        // A trial that fails for another reason lifts the hold too; a due trial with nothing to send as well.
        _ = watch.refused("e", full, job: b, policy: policy, now: start)
        #expect(watch.dueTrials(now: start.addingTimeInterval(10), limit: 4, among: ["e"]) == ["e"])
        #expect(watch.nothingToTry("e") == .cleared(.quotaFull))
        #expect(watch.heldDestinations.isEmpty)
        // Another job's upload clears a held destination while its trial runs: the trial, refused later, holds
        // it again (it is not taken for a finished trial of a cleared watch).
        _ = watch.refused("f", full, job: a, policy: policy, now: start)
        #expect(watch.dueTrials(now: start.addingTimeInterval(10), limit: 4, among: ["f"]) == ["f"])
        watch.started("f", job: b)
        #expect(watch.finished("f", job: c, outcome: .uploaded, now: start.addingTimeInterval(11)) == .cleared(.quotaFull))
        #expect(watch.refused("f", full, job: b, policy: policy, now: start.addingTimeInterval(12))
                == .held(full, until: start.addingTimeInterval(22)))
    }

    @Test("TrialWatch: an unverified answer holds with its words; a full destination whose trial meets a portal says so")
    func unverifiedAnswers() {
        var watch = TrialWatch()
        let policy = CircuitBreakerPolicy(threshold: 5, probeInterval: .seconds(10), maximumProbeInterval: .seconds(300))
        let start = Date(timeIntervalSince1970: 1_000_000)
        let (a, b) = (JobID(trusted: "a"), JobID(trusted: "b"))
        let portal = TrialWatch.Held(reason: .unverifiedAnswer, detail: "a captive portal answered")
        #expect(watch.refused("d", portal, job: a, policy: policy, now: start)
                == .held(portal, until: start.addingTimeInterval(10)))
        #expect(watch.heldDestinations["d"] == portal)
        #expect(watch.destinations(heldFor: .quotaFull).isEmpty && watch.destinations(heldFor: .unverifiedAnswer) == ["d"])
        #expect(watch.dueTrials(now: start.addingTimeInterval(10), limit: 1, among: ["d"]) == ["d"])
        watch.started("d", job: b)
        #expect(watch.finished("d", job: b, outcome: .uploaded, now: start.addingTimeInterval(11)) == .cleared(.unverifiedAnswer))
        // Held as full, then the trial is answered by a portal: the reason follows, with its own timing from its
        // first wait.
        let full = TrialWatch.Held(reason: .quotaFull)
        _ = watch.refused("e", full, job: a, policy: policy, now: start)
        #expect(watch.dueTrials(now: start.addingTimeInterval(10), limit: 1, among: ["e"]) == ["e"])
        watch.started("e", job: b)
        #expect(watch.refused("e", portal, job: b, policy: policy, now: start.addingTimeInterval(11))
                == .held(portal, until: start.addingTimeInterval(21)))
        #expect(watch.heldDestinations["e"]?.reason == .unverifiedAnswer)
        // A job already sent when the hold began is refused for another reason: the hold says the newer one.
        let other = TrialWatch.Held(reason: .unverifiedAnswer, detail: "HTTP 511")
        #expect(watch.refused("e", other, job: a, policy: policy, now: start.addingTimeInterval(12)) == nil,
                "held for that reason already: said once")
    }

    @Test("a server answering 507: jobs wait as quota-full, one trial per interval reaches it, all go once it takes files")
    func quotaFull() async throws {
        let server = try await RUFHTestServer.make(interop: 8, ["quota_full": true])
        let sandbox = try Sandbox(destination: "rufh", """
            protocol = "rufh"
            url = "\(server.endpoint)"
            interop_version = 8
            circuit_probe_interval = "500ms"
            """, concurrency: 2)
        let running = try RunningQueue(sandbox)
        var ids: [JobID] = []
        for index in 0..<6 {
            ids.append(try await running.enqueue(try sandbox.makeFile(sandbox.root + "/p\(index).jpg", size: 20_000,
                                                                      seed: UInt64(70 + index)), to: "rufh"))
        }
        let held = try await eventually(timeout: .seconds(10)) {
            (try await running.queue.status().summary.waiting[.quotaFull] ?? 0) >= 4
        }
        #expect(held, "the jobs wait as quota-full")
        let summary = try await running.queue.status().summary
        #expect(summary.fullDestinations == ["rufh"])
        #expect(summary.counts[.failed] == 0, "a full destination fails no job")
        try await Task.sleep(for: .seconds(3))
        try await server.update(["quota_full": false])
        var settled: [Job] = []
        for id in ids { settled.append(try await running.settled(id, timeout: .seconds(30))) }
        await running.stop()
        #expect(settled.allSatisfy { $0.state == .uploaded }, "\(settled.map { $0.lastError ?? "" })")
        #expect(settled.allSatisfy { $0.failures == 0 })
        let refused = try await server.requests().filter { $0["status"] as? Int == 507 }
        let times = refused.compactMap { $0["time"] as? Double }
        // The first wave (both slots) meets the full storage at once; after it, one trial per wait, each wait at
        // least the 500 ms interval (then 1 s, 2 s…).
        let trials = Array(times.dropFirst(2))
        #expect(trials.count >= 1 && trials.count <= 4, "\(times)")
        for (earlier, later) in zip(times.dropFirst(1), trials) {
            #expect(later - earlier >= 0.45, "a trial came too early: \(times)")
        }
    }
}

/// Interop with an independent implementation: swift-nio-extras' `NIOResumableUpload` (interop 6), built by the
/// test set-up from contrib/nio-rufh-server (never part of the product).
@Suite(.serialized)
struct RUFHInteropTests {
    @Test("NIOResumableUpload takes a small file whole in its creation request (creation_with_upload): one POST, the file whole")
    func nioCreationWithUpload() async throws {
        let endpoint = try TestServers.address("UPLOADQ_TEST_NIO_RUFH_ENDPOINT")
        let files = try TestServers.address("UPLOADQ_TEST_NIO_RUFH_FILES")
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(endpoint))
        let sandbox = try Sandbox(destination: "nio", """
            protocol = "rufh"
            url = "\(proxy.url("/files/"))"
            interop_version = 6
            creation_with_upload = true
            """)
        let running = try RunningQueue(sandbox)
        let source = try sandbox.makeRandomFile(sandbox.root + "/whole.bin", size: 300_000)
        let job = try await running.settled(try await running.enqueue(source, to: "nio"))
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let stored = try FileManager.default.contentsOfDirectory(atPath: files).filter { !$0.hasSuffix(".part") }
        #expect(try stored.map { try sha256(ofFile: files + "/" + $0) }.contains(job.sha256), "\(stored)")
        let story = try await proxy.requests().map { "\($0["method"] ?? "") \($0["status"] ?? "-")" }
            .filter { !$0.hasPrefix("OPTIONS") }
        #expect(story.count == 1 && story.first?.hasPrefix("POST 2") == true, "\(story)")
    }

    @Test("NIOResumableUpload: careful creation, appends, a daemon killed in a hung append resumes with HEAD; the file arrives whole")
    func nioResumableUpload() async throws {
        let endpoint = try TestServers.address("UPLOADQ_TEST_NIO_RUFH_ENDPOINT")
        let files = try TestServers.address("UPLOADQ_TEST_NIO_RUFH_FILES")
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(endpoint))
        // The second append stops after 1 MiB and hangs: the daemon is killed there, mid-append, whatever the
        // machine's load.
        try await proxy.add(["method": "PATCH", "action": "stall", "after_bytes": 1 << 20, "seconds": 60, "skip": 1,
                             "times": 1])
        let sandbox = try Sandbox(destination: "nio", """
            protocol = "rufh"
            url = "\(proxy.url("/files/"))"
            interop_version = 6
            chunk_size = "4MiB"
            """)
        let size = 20 << 20
        let source = try sandbox.makeRandomFile(sandbox.root + "/interop.bin", size: size)
        let expected = try sha256(ofFile: source)
        let id = try await BinaryRunner.enqueue([source, "--destination", "nio", "--config", sandbox.configPath])
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let first = try DaemonProcess(sandbox: sandbox, name: "daemon-1")
        let stalled = try await eventually(timeout: .seconds(30)) {
            try await proxy.bodyBytes() >= (4 << 20) + (1 << 20)
        }
        #expect(stalled, "daemon log:\n\(first.log.suffix(2000))")
        await first.kill9()
        #expect(try store.job(id)?.state == .uploading, "killed mid-upload")
        let second = try DaemonProcess(sandbox: sandbox, name: "daemon-2")
        let finished = try await eventually(timeout: .seconds(60)) { try store.job(id)?.state == .uploaded }
        #expect(finished, "daemon log:\n\(second.log.suffix(3000))")
        #expect(await second.terminate() < .seconds(5))
        let stored = try FileManager.default.contentsOfDirectory(atPath: files).filter { !$0.hasSuffix(".part") }
        #expect(try stored.map { try sha256(ofFile: files + "/" + $0) }.contains(expected), "\(stored)")
        let requests = try await proxy.requests()
        let story = requests.map { "\($0["method"] ?? "") \($0["status"] ?? "-")" }
        #expect(requests.filter { $0["method"] as? String == "POST" }.count == 1, "one upload, resumed: \(story)")
        #expect(requests.filter { $0["method"] as? String == "HEAD" }.count == 1, "\(story)")
        let sent = try await proxy.bodyBytes()
        #expect(sent <= size + (4 << 20), "at most the append in flight again: \(sent)")
    }
}
