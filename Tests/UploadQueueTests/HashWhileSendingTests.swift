import Foundation
import Testing
@testable import UploadQueue

/// `sha256 = "while-sending"`: the file is read once, its SHA-256 taken from the bytes the upload sends (also
/// across a resume, a rewind and a process that stops), recorded with the upload; intake hashes only when a job of
/// the same size could be a duplicate.
struct HashWhileSendingTests {
    /// A sandbox whose `default` destination (a local directory) hashes while sending, plus `lines`.
    func sandbox(_ lines: String = "") throws -> Sandbox {
        try Sandbox(config: "sha256 = \"while-sending\"\n\(lines)")
    }

    @Test("a PUT job has no digest until it is sent, then the one of the bytes the server stored")
    func put() async throws {
        let dav = try TestServers.davURL()
        let folder = "hash-\(UInt32.random(in: 0...UInt32.max))"
        let sandbox = try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(dav)/\(folder)/{job_id}"
            sha256 = "while-sending"
            """)
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 1_500_000, seed: 70)
        let id = try await queue.enqueue(path, destination: "dav", mode: .reference)
        #expect(try queue.store.job(id)?.sha256 == "")
        try await queue.run(exitWhenIdle: true)
        let job = try #require(try queue.store.job(id))
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(job.sha256 == (try sha256(ofFile: path)))
        #expect(try sha256(ofFile: try TestServers.davRoot() + "/\(folder)/\(id)") == job.sha256)
    }

    @Test("a tus upload cut off mid-chunk resumes where the server stands, and its digest covers the whole file")
    func tusResumed() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        // The second PATCH is cut off after 100,000 bytes, and so is its resend: the attempt ends, and the next one
        // (a new read of the file) resumes at the server's offset.
        try await proxy.add(["method": "PATCH", "skip": 1, "action": "reset", "after_bytes": 100_000, "times": 2])
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(proxy.url("/files/"))"
            chunk_size = \(256 << 10)
            sha256 = "while-sending"
            """)
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/clip.mov", size: 1_000_000, seed: 71)
        let id = try await running.enqueue(path, to: "tus", mode: .reference)
        let job = try await running.settled(id)
        let attempts = try running.attempts(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(attempts.count >= 2, "the cut-off PATCH ended an attempt: \(attempts)")
        #expect(attempts.last.map { $0.startOffset > 0 } == true, "the last attempt resumed: \(attempts)")
        #expect(job.sha256 == (try sha256(ofFile: path)))
        let stored = try TestServers.tusStoredFile(uploadURL: try #require(job.remoteURL))
        #expect(try sha256(ofFile: stored) == job.sha256)
    }

    @Test("a copy into a directory resumed from its partial file gets the digest of the whole file")
    func fileResumedFromPartial() async throws {
        let sandbox = try sandbox()
        let configuration = try sandbox.configuration()
        let queue = try UploadQueue(configuration: configuration)
        let path = try sandbox.makeFile(sandbox.root + "/big.raw", size: 3_000_000, seed: 72)
        let id = try await queue.enqueue(path, mode: .reference)
        let job = try #require(try queue.store.job(id))
        #expect(job.sha256 == "")
        // What a process that stopped had copied: the first 1,200,000 bytes, under the temporary name.
        let destination = try #require(configuration.destinations["default"])
        guard case .localDirectory(let settings) = destination.settings else {
            Issue.record("default is not a local directory")
            return
        }
        let uploader = LocalDirectoryUploader(destination: destination, settings: settings)
        let partial = uploader.temporaryPath(for: job)
        try FileManager.default.createDirectory(atPath: (partial as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        try Data(try Data(contentsOf: URL(fileURLWithPath: path)).prefix(1_200_000))
            .write(to: URL(fileURLWithPath: partial))
        try await queue.run(exitWhenIdle: true)
        let uploaded = try #require(try queue.store.job(id))
        #expect(uploaded.state == .uploaded, "\(uploaded.lastError ?? "")")
        #expect(try queue.store.attempts(of: id).first?.startOffset == 1_200_000)
        #expect(uploaded.sha256 == (try sha256(ofFile: path)))
        #expect(try sha256(ofFile: uploader.finalPath(for: uploaded)) == uploaded.sha256)
    }

    @Test("intake hashes only on a size collision: same content is one job, other content its own, a changed file none")
    func deduplication() async throws {
        let sandbox = try sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        func enqueue(_ path: String) async throws -> EnqueueResult {
            try await queue.enqueue(EnqueueRequest(path: path, mode: .reference))
        }
        func digest(_ id: JobID) throws -> String? { try queue.store.job(id)?.sha256 }

        let first = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 100_000, seed: 73)
        let a = try await enqueue(first)
        #expect(try digest(a.id) == "", "a size of its own: not hashed at intake")
        let odd = try await enqueue(try sandbox.makeFile(sandbox.root + "/odd.jpg", size: 100_001, seed: 74))
        #expect(try digest(odd.id) == "")

        // The same photo under another name: both get hashed, and it is the first job.
        let copy = sandbox.root + "/a-copy.jpg"
        try FileManager.default.copyItem(atPath: first, toPath: copy)
        let again = try await enqueue(copy)
        #expect(again.deduplicated && again.id == a.id)
        #expect(try digest(a.id) == (try sha256(ofFile: first)))

        // Same size, other bytes: a job of its own, with its digest.
        let other = try sandbox.makeFile(sandbox.root + "/b.jpg", size: 100_000, seed: 75)
        let b = try await enqueue(other)
        #expect(!b.deduplicated && b.id != a.id)
        #expect(try digest(b.id) == (try sha256(ofFile: other)))

        // A waiting job whose file was rewritten since is nobody's duplicate, and keeps no digest.
        let changing = try sandbox.makeFile(sandbox.root + "/c.jpg", size: 50_000, seed: 76)
        let c = try await enqueue(changing)
        try await Task.sleep(for: .milliseconds(20))
        _ = try sandbox.makeFile(changing, size: 50_000, seed: 77)
        let twin = sandbox.root + "/c-twin.jpg"
        try FileManager.default.copyItem(atPath: changing, toPath: twin)
        let d = try await enqueue(twin)
        #expect(!d.deduplicated && d.id != c.id)
        #expect(try digest(c.id) == "")
        #expect(try digest(d.id) == (try sha256(ofFile: twin)))
    }

    @Test("a copy of a waiting job's content is that job: the waiting one is hashed at this intake, once")
    func copyModeFindsUnhashedJob() async throws {
        let sandbox = try sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 120_000, seed: 83)
        let first = try await queue.enqueue(EnqueueRequest(path: path, mode: .reference))
        #expect(try queue.store.job(first.id)?.sha256 == "")
        // `copy` hashes as it copies: the new job has its digest, the waiting one has none yet.
        let copied = try await queue.enqueue(EnqueueRequest(path: path, mode: .copy))
        #expect(copied.deduplicated && copied.id == first.id)
        #expect(try queue.store.job(first.id)?.sha256 == (try sha256(ofFile: path)))
    }

    @Test("one batch: files of one size are compared among themselves; a waiting job whose file went is skipped")
    func batch() async throws {
        let sandbox = try sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let gone = try sandbox.makeFile(sandbox.root + "/gone.jpg", size: 64_000, seed: 84)
        let waiting = try await queue.enqueue(EnqueueRequest(path: gone, mode: .reference))
        try FileManager.default.removeItem(atPath: gone)
        let a = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 64_000, seed: 85)
        let twin = sandbox.root + "/a-twin.jpg"
        try FileManager.default.copyItem(atPath: a, toPath: twin)
        let b = try sandbox.makeFile(sandbox.root + "/b.jpg", size: 64_000, seed: 86)
        let results = await queue.enqueue(batch: [a, twin, b].map { EnqueueRequest(path: $0, mode: .reference) })
        let accepted = try results.map { try $0.get() }
        #expect(!accepted[0].deduplicated && accepted[1].deduplicated && accepted[1].id == accepted[0].id)
        #expect(!accepted[2].deduplicated && accepted[2].id != accepted[0].id)
        #expect(try queue.store.job(accepted[0].id)?.sha256 == (try sha256(ofFile: a)))
        #expect(try queue.store.job(accepted[2].id)?.sha256 == (try sha256(ofFile: b)))
        // The job whose file went keeps no digest and held nothing up.
        #expect(try queue.store.job(waiting.id)?.sha256 == "")
    }

    @Test("a job left without its digest whose destination now names files by it is hashed before it is copied")
    func templateNeedsDigest() async throws {
        let (sandbox, path, id) = try await Self.enqueuedWithoutDigest(size: 150_000, seed: 87)
        let text = try String(contentsOfFile: sandbox.configPath, encoding: .utf8)
        try text.replacingOccurrences(of: "sha256 = \"while-sending\"", with: "name_template = \"{sha256}.jpg\"")
            .write(toFile: sandbox.configPath, atomically: true, encoding: .utf8)
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        try await queue.run(exitWhenIdle: true)
        let job = try #require(try queue.store.job(id))
        let digest = try sha256(ofFile: path)
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(job.sha256 == digest)
        #expect(try sha256(ofFile: sandbox.root + "/photos/\(digest).jpg") == digest)
    }

    @Test("the bytes a request body reads from the job's file are hashed as they are read: nothing is read twice")
    func bodyReadsAreHashed() throws {
        let sandbox = try sandbox()
        let size = 300_000
        let path = try sandbox.makeFile(sandbox.root + "/body.bin", size: size, seed: 88)
        let source = try Self.source(path: path, size: Int64(size))
        let reader = RequestBodyReader(.sequence([.bytes(Array("head".utf8)), .source(source, offset: 0,
                                                                                        length: Int64(size))]))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
        defer { buffer.deallocate() }
        // libcurl reads a while, rewinds (a dead kept-alive connection), and reads it all.
        _ = reader.read(into: buffer)
        _ = reader.read(into: buffer)
        #expect(reader.seek(to: 0))
        while let count = reader.read(into: buffer), count > 0 {}
        #expect(source.digest.hashedUpTo == Int64(size), "hashed as it was read, before any catching up")
    }

    @Test("the insert starts over when a job of the same size came after the digests were taken")
    func queueChangedMeanwhile() throws {
        let sandbox = try sandbox()
        let waiting = try Self.job(path: sandbox.root + "/w.jpg", size: 500)
        let gone = try Self.job(path: sandbox.root + "/g.jpg", size: 500)
        let newcomer = try Self.job(path: sandbox.root + "/n.jpg", size: 500)
        var hashed = try Self.job(path: sandbox.root + "/h.jpg", size: 500)
        hashed.sha256 = String(repeating: "a", count: 64)
        let store = try QueueStoreTests.store(with: [waiting, gone, newcomer, hashed])
        // Seen before the transaction (hashed, or found gone): its digest is recorded now, or it is nobody's
        // duplicate. Not seen: start over.
        let digest = String(repeating: "b", count: 64)
        let examined = ContentIdentity.Examined(digests: [waiting.id: digest], unreadable: [gone.id])
        let compared = try store.writer.write { db in
            try ContentIdentity.withDigests([waiting, gone, hashed], examined: examined, in: db)
        }
        #expect(compared.map(\.id) == [waiting.id, hashed.id] && compared.first?.sha256 == digest)
        #expect(try store.job(waiting.id)?.sha256 == digest, "recorded in the insert's transaction")
        #expect(throws: ContentIdentity.QueueChanged.self) {
            try store.writer.write { db in
                try ContentIdentity.withDigests([newcomer], examined: examined, in: db)
            }
        }
        #expect(throws: ContentIdentity.QueueChanged.self) {
            try store.writer.write { db in try ContentIdentity.checkNoneOfItsSize(newcomer, in: db) }
        }
    }

    @Test("a job without its digest moved to S3 is hashed before its PutObject, which is signed with the digest")
    func destinationChanged() async throws {
        let bucket = try await S3TestBucket.make()
        let (sandbox, path, id) = try await Self.enqueuedWithoutDigest(size: 200_000, seed: 78)
        // The admin moves the destination to S3 (hashing at intake), whose PutObject is signed with the SHA-256.
        let text = try String(contentsOfFile: sandbox.configPath, encoding: .utf8)
        let head = try #require(text.range(of: "[destinations.photos]"))
        try (String(text[..<head.lowerBound]) + "[destinations.photos]\n" + bucket.destination())
            .write(toFile: sandbox.configPath, atomically: true, encoding: .utf8)
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        try await queue.run(exitWhenIdle: true)
        let job = try #require(try queue.store.job(id))
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(job.sha256 == (try sha256(ofFile: path)))
        #expect(try await bucket.keys().count == 1)
    }

    @Test("S3: a multipart upload is hashed beside its parts, a PutObject just before it is signed")
    func s3() async throws {
        let bucket = try await S3TestBucket.make()
        let sandbox = try Sandbox(destination: "s3", bucket.destination(endpoint: nil, """
            part_size = "5MiB"
            multipart_threshold = "5MiB"
            sha256 = "while-sending"
            """))
        let running = try RunningQueue(sandbox)
        let large = try sandbox.makeFile(sandbox.root + "/large.raw", size: 12 << 20, seed: 81)
        let small = try sandbox.makeFile(sandbox.root + "/small.jpg", size: 300_000, seed: 82)
        let ids = [try await running.enqueue(large, to: "s3", mode: .reference),
                   try await running.enqueue(small, to: "s3", mode: .reference)]
        #expect(try ids.map { try running.queue.store.job($0)?.sha256 } == ["", ""])
        let jobs = [try await running.settled(ids[0]), try await running.settled(ids[1])]
        await running.stop()
        #expect(jobs.allSatisfy { $0.state == .uploaded }, "\(jobs.map { $0.lastError ?? "" })")
        #expect(jobs[0].sha256 == (try sha256(ofFile: large)))
        #expect(jobs[1].sha256 == (try sha256(ofFile: small)))
        #expect(try await bucket.keys().count == 2)
    }

    @Test("a body libcurl rewinds is hashed once, in order; bytes past a gap wait for the gap", arguments: [
        ([(0, 300), (0, 1000)], 1000), ([(0, 500), (200, 800)], 800), ([(400, 600), (0, 400), (400, 600)], 600),
        ([(300, 1000)], 0),
    ])
    func rewinds(reads: [(Int, Int)], hashed: Int) async throws {
        let sandbox = try sandbox()
        let path = try sandbox.makeFile(sandbox.root + "/r.bin", size: 1000, seed: 79)
        let content = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        let source = try Self.source(path: path, size: 1000)
        let digest = source.digest
        for (offset, end) in reads {
            content[offset..<end].withUnsafeBytes { digest.take($0, at: Int64(offset)) }
        }
        #expect(digest.hashedUpTo == Int64(hashed))
        let sent = try await source.sentDigest()
        #expect(sent == (try sha256(ofFile: path)))
    }

    @Test("an S3 multipart upload hashes on a thread beside its parts; the bytes they read are left to it")
    func beside() async throws {
        let sandbox = try sandbox()
        let size = 3 << 20 + 12_345
        let path = try sandbox.makeFile(sandbox.root + "/big.bin", size: size, seed: 80)
        let source = try Self.source(path: path, size: Int64(size))
        let digest = source.digest
        source.hashBesideUpload()
        #expect(digest.isHashingBeside)
        // What the engine thread hands over meanwhile (a read at the start, out of step with the thread) is left
        // alone; the digest is the file's.
        let head = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)).prefix(4096))
        head.withUnsafeBytes { digest.take($0, at: 0) }
        let sent = try await source.sentDigest()
        #expect(sent == (try sha256(ofFile: path)))
        #expect(digest.hashedUpTo == Int64(size))
    }

    @Test("a catch-up read stops when its upload's task is cancelled (a stop does not wait for gigabytes)")
    func catchUpStops() async throws {
        let sandbox = try sandbox()
        let size = 2 << 20
        let path = try sandbox.makeFile(sandbox.root + "/long.bin", size: size, seed: 89)
        let source = try Self.source(path: path, size: Int64(size))
        let digest = source.digest
        let task = Task { () async -> TransferFailure? in
            // Cancelled before it starts: the handler stops the read at its first block.
            withUnsafeCurrentTask { $0?.cancel() }
            do throws(TransferFailure) {
                try await source.hashPrefix(upTo: Int64(size))
                return nil
            } catch {
                return error
            }
        }
        let failure = await task.value
        #expect(failure?.kind == .interrupted, "\(String(describing: failure))")
        #expect(digest.hashedUpTo == 0)
    }

    /// The open file of a pending reference job for `path` (with the file's fingerprint) that has no digest.
    static func source(path: String, size: Int64) throws -> SourceFile {
        let fingerprint = try FileFingerprint.of(path: path)
        var job = try job(path: path, size: size)
        job.inode = fingerprint.inode
        job.device = fingerprint.device
        job.modifiedNanoseconds = fingerprint.modifiedNanoseconds
        return try SourceFile(job: job)
    }

    /// A job enqueued (reference) to a `file` destination "photos" that hashes while sending; the config the
    /// test then changes, the file and the job.
    static func enqueuedWithoutDigest(size: Int, seed: UInt64) async throws -> (Sandbox, String, JobID) {
        let sandbox = try Sandbox(destination: "photos", """
            protocol = "file"
            url = "file://photos"
            sha256 = "while-sending"
            """)
        let path = try sandbox.makeFile(sandbox.root + "/p.jpg", size: size, seed: seed)
        let id = try await UploadQueue(configuration: try sandbox.configuration())
            .enqueue(path, destination: "photos", mode: .reference)
        return (sandbox, path, id)
    }

    /// A pending reference job for `path` with no digest.
    static func job(path: String, size: Int64) throws -> Job {
        let now = Date()
        return Job(id: JobID.generate(at: now), state: .pending, waitingReason: nil, permanent: false, attempts: 0,
                   failures: 0, nextAttemptAt: nil, lastError: nil, file: path, sourcePath: path,
                   originalName: (path as NSString).lastPathComponent, mode: .reference, size: size, sha256: "",
                   contentType: "application/octet-stream", modifiedNanoseconds: 0, inode: 0, device: 0,
                   destination: "default", priority: 0, remoteURL: nil, bytesConfirmed: 0, rateBytesPerSecond: 0,
                   meta: [:], patch: nil, patchState: .none, onMetered: nil, meteredBelow: nil,
                   sourceAfterUpload: nil, resumeState: nil, intakeComplete: true, cancelRequested: false,
                   createdAt: now, updatedAt: now)
    }
}
