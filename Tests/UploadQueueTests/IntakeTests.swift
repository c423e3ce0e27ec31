import CUploadQueueSystem
import Foundation
import Testing
@testable import UploadQueue

/// Intake: the three modes, what is recorded, dedupe, refusal of unusable files, and crash recovery of `move`.
struct IntakeTests {
    @Test("SHA-256 matches the published test vectors")
    func sha256Vectors() throws {
        let sandbox = try Sandbox()
        try Data("abc".utf8).write(to: URL(fileURLWithPath: sandbox.root + "/abc"))
        #expect(try sha256(ofFile: sandbox.root + "/abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(FileManager.default.createFile(atPath: sandbox.root + "/empty", contents: Data()))
        #expect(try sha256(ofFile: sandbox.root + "/empty") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test("a batch of 600 (three commits): each file its own result, a bad one alone refused, duplicates folded")
    func batch() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        var requests: [EnqueueRequest] = []
        for index in 0..<600 {
            let path = try sandbox.makeFile(sandbox.root + "/in/p\(index).jpg", size: 1000 + index, seed: UInt64(index))
            requests.append(EnqueueRequest(path: path, mode: index % 3 == 0 ? .reference : .copy))
        }
        try FileManager.default.copyItem(atPath: sandbox.root + "/in/p5.jpg", toPath: sandbox.root + "/in/again.jpg")
        requests.append(EnqueueRequest(path: sandbox.root + "/in/again.jpg"))
        requests.append(EnqueueRequest(path: sandbox.root + "/in/missing.jpg"))
        let results = await queue.enqueue(batch: requests)
        #expect(results.count == 602)
        let accepted = results.prefix(600).compactMap { try? $0.get() }
        #expect(accepted.count == 600 && accepted.allSatisfy { !$0.deduplicated })
        #expect((try? results[600].get())?.deduplicated == true)
        #expect((try? results[600].get())?.id == accepted[5].id)
        #expect((try? results[601].get()) == nil, "the missing file fails alone")
        let jobs = try queue.store.jobs()
        #expect(jobs.count == 600)
        for job in jobs.prefix(50) where job.mode == .copy {
            #expect(try sha256(ofFile: job.file) == job.sha256)
            #expect(try FileFingerprint.of(path: job.file).inode == job.inode)
        }
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: sandbox.state + "/blobs")
            .filter { $0.hasPrefix(".") }
        #expect(leftovers.isEmpty, "no temporary copy stays behind: \(leftovers.prefix(3))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: sandbox.state + "/blobs").count == 400)
    }

    @Test("copy keeps the original and owns a copy; the job records size, hash, type, inode and mtime")
    func copyMode() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/in/photo.bin", size: 300_000, seed: 1)
        let id = try await queue.enqueue(path, metadata: ["device": "cam-7"], mode: .copy)
        let job = try #require(try await queue.job(id))
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(job.file == sandbox.state + "/blobs/\(id)")
        #expect(try sha256(ofFile: job.file) == job.sha256)
        #expect(job.sha256 == (try sha256(ofFile: path)))
        #expect(job.size == 300_000 && job.originalName == "photo.bin" && job.meta == ["device": "cam-7"])
        #expect(job.state == .pending && job.intakeComplete && job.mode == .copy)
        #expect(job.contentType == "application/octet-stream")
        let blob = try FileFingerprint.of(path: job.file)
        #expect(job.inode == blob.inode)
    }

    @Test("move takes the file over by rename: same inode, gone from its old place")
    func moveMode() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/in/a.bin", size: 1000, seed: 2)
        let inode = try FileFingerprint.of(path: path).inode
        let id = try await queue.enqueue(path, mode: .move)
        let job = try #require(try await queue.job(id))
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(try FileFingerprint.of(path: job.file).inode == inode)
        #expect(job.intakeComplete)
    }

    @Test("a file with several hard links is copied, and only the given name is dropped")
    func moveHardLinked() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/in/a.bin", size: 1000, seed: 3)
        let other = sandbox.root + "/in/other-name.bin"
        #expect(link(path, other) == 0)
        let id = try await queue.enqueue(path, mode: .move)
        let job = try #require(try await queue.job(id))
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(FileManager.default.fileExists(atPath: other))
        #expect(try FileFingerprint.of(path: job.file).inode != (try FileFingerprint.of(path: other).inode))
        #expect(try sha256(ofFile: job.file) == (try sha256(ofFile: other)))
    }

    @Test("camera formats recognised by signature get the type libmagic gives them; anything else goes to libmagic")
    func cameraFormats() {
        let detector = ContentTypeDetector()
        func box(_ type: String, _ payload: [UInt8]) -> [UInt8] {
            let size = UInt32(8 + payload.count)
            return withUnsafeBytes(of: size.bigEndian, Array.init) + Array(type.utf8) + payload
        }
        let random = (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 7919) }
        let samples: [[UInt8]] = [
            [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10] + Array("JFIF".utf8) + [0, 1, 1, 0, 0, 1, 0, 1, 0, 0] + random,
            [0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x10] + Array("Exif".utf8) + [0, 0] + random,
            [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Array("IHDR".utf8)
                + [0, 0, 1, 0, 0, 0, 1, 0, 8, 2, 0, 0, 0] + random,
            Array("GIF89a".utf8) + [1, 0, 1, 0, 0, 0, 0] + random,
            Array("RIFF".utf8) + [0, 16, 0, 0] + Array("WEBPVP8 ".utf8) + random,
            box("ftyp", Array("heic".utf8) + [0, 0, 0, 0] + Array("mif1heic".utf8)) + random,
            box("ftyp", Array("isom".utf8) + [0, 0, 2, 0] + Array("isomiso2avc1mp41".utf8)) + random,
            box("ftyp", Array("qt  ".utf8) + [0, 0, 2, 0] + Array("qt  ".utf8)) + random,
        ]
        for sample in samples {
            sample.withUnsafeBytes { head in
                let fast = ContentTypeDetector.cameraFormat(head)
                #expect(fast != nil)
                #expect(fast == detector.libmagicType(of: head), "libmagic disagrees on \(Array(sample.prefix(12)))")
            }
        }
        random.withUnsafeBytes { #expect(ContentTypeDetector.cameraFormat($0) == nil) }
    }

    @Test("a file still open for writing is recognised as such (read lease refused), and not once it is closed")
    func openForWriting() throws {
        let sandbox = try Sandbox()
        let path = try sandbox.makeFile(sandbox.root + "/w.jpg", size: 10, seed: 1)
        let writer = open(path, O_WRONLY | O_APPEND)
        #expect(writer >= 0)
        #expect(uploadq_open_for_writing(path) == 1)
        close(writer)
        #expect(uploadq_open_for_writing(path) == 0)
    }

    @Test("copies (and kept sidecars) no job refers to are removed once no intake is in flight; referenced ones stay")
    func orphanBlobs() throws {
        let sandbox = try Sandbox()
        let blobs = try BlobStore(directory: sandbox.state + "/blobs")
        let orphan = JobID.generate(), kept = JobID.generate()
        for id in [orphan, kept] {
            #expect(FileManager.default.createFile(atPath: blobs.path(for: id), contents: Data("x".utf8)))
        }
        #expect(FileManager.default.createFile(atPath: blobs.path(for: orphan) + ".uploadq.json", contents: Data()))
        #expect(FileManager.default.createFile(atPath: blobs.path(for: kept) + ".uploadq.json", contents: Data()))
        let intake = try blobs.shareIntakeLock()
        #expect(try !blobs.removeLeftovers(referenced: [kept.rawValue]), "an intake is in flight")
        #expect(FileManager.default.fileExists(atPath: blobs.path(for: orphan)), "a copy of an intake in flight has no row yet")
        intake.release()
        #expect(try blobs.removeLeftovers(referenced: [kept.rawValue]))
        #expect(!FileManager.default.fileExists(atPath: blobs.path(for: orphan)))
        #expect(FileManager.default.fileExists(atPath: blobs.path(for: kept)))
        #expect(!FileManager.default.fileExists(atPath: blobs.path(for: orphan) + ".uploadq.json"),
                "a kept sidecar goes with its orphaned copy")
        #expect(FileManager.default.fileExists(atPath: blobs.path(for: kept) + ".uploadq.json"),
                "a referenced job's sidecar stays")
    }

    @Test("libmagic names the content type")
    func contentType() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let png = sandbox.root + "/pixel.png"
        let bytes: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52,
                              0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1F, 0x15, 0xC4, 0x89]
        try Data(bytes).write(to: URL(fileURLWithPath: png))
        try "hello, world\n".write(toFile: sandbox.root + "/note.txt", atomically: true, encoding: .utf8)
        let image = try #require(try await queue.job(try await queue.enqueue(png)))
        let text = try #require(try await queue.job(try await queue.enqueue(sandbox.root + "/note.txt")))
        #expect(image.contentType == "image/png")
        #expect(text.contentType == "text/plain")
    }

    @Test("the same content to the same destination returns the live job's id; to another destination it is new")
    func dedupe() async throws {
        let sandbox = try Sandbox(config: "[destinations.other]\nprotocol = \"file\"\nurl = \"file://other\"\n")
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let first = try sandbox.makeFile(sandbox.root + "/a.bin", size: 5000, seed: 4)
        let second = try sandbox.makeFile(sandbox.root + "/b.bin", size: 5000, seed: 4)
        let original = try await queue.enqueue(EnqueueRequest(path: first))
        let again = try await queue.enqueue(EnqueueRequest(path: second))
        #expect(!original.deduplicated)
        #expect(again.deduplicated && again.id == original.id)
        let elsewhere = try await queue.enqueue(EnqueueRequest(path: second, destination: "other"))
        #expect(!elsewhere.deduplicated && elsewhere.id != original.id)
        #expect(try await queue.jobs().count == 2)
    }

    @Test("a permanently failed job does not absorb a new enqueue of the same content")
    func dedupeSkipsPermanentFailures() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/a.bin", size: 100, seed: 5)
        let id = try await queue.enqueue(path)
        try queue.store.apply(.failPermanent(error: "test"), to: id)
        let again = try await queue.enqueue(EnqueueRequest(path: path))
        #expect(!again.deduplicated && again.id != id)
    }

    @Test("unusable input is refused with a clear error and left where it is", arguments: ["fifo", "dir", "link", "missing"])
    func refusals(kind: String) async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = sandbox.root + "/input"
        switch kind {
        case "fifo": #expect(mkfifo(path, 0o600) == 0)
        case "dir": try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        case "link":
            try sandbox.makeFile(sandbox.root + "/real", size: 10, seed: 6)
            #expect(symlink(sandbox.root + "/real", path) == 0)
        default: break
        }
        await #expect(throws: UploadQueueError.self) {
            try await queue.enqueue(EnqueueRequest(path: path, mode: .move))
        }
        #expect(try await queue.jobs().isEmpty)
        if kind != "missing" {
            var info = stat()
            #expect(lstat(path, &info) == 0, "the input must still be there")
        }
    }

    @Test("an unknown destination or on_metered value is refused before anything is written")
    func badRequest() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/a.bin", size: 10, seed: 7)
        await #expect(throws: UploadQueueError.self) { try await queue.enqueue(path, destination: "nowhere") }
        await #expect(throws: UploadQueueError.self) {
            try await queue.enqueue(EnqueueRequest(path: path, onMetered: "sometimes"))
        }
        #expect(try await queue.jobs().isEmpty)
    }

    @Test("a move cut short by a crash is completed at the next start, or reported when the file is gone")
    func incompleteMoveRecovery() async throws {
        let sandbox = try Sandbox()
        let configuration = try sandbox.configuration()
        let queue = try UploadQueue(configuration: configuration)
        let path = try sandbox.makeFile(sandbox.root + "/in/a.bin", size: 2048, seed: 8)
        let gone = try sandbox.makeFile(sandbox.root + "/in/b.bin", size: 2048, seed: 9)
        let id = try await queue.enqueue(path, mode: .copy)
        let lost = try await queue.enqueue(gone, mode: .copy)
        // Simulate the crash window: row committed as an incomplete move, file still at its source.
        for (job, source) in [(id, path), (lost, gone)] {
            let fingerprint = try FileFingerprint.of(path: source)
            try await queue.store.writer.write { db in
                try db.execute(sql: "UPDATE job SET intake_complete = 0, mode = 'move', source_path = ?, inode = ?, device = ? WHERE id = ?",
                               arguments: [source, fingerprint.inode, fingerprint.device, job.rawValue])
            }
            unlink(sandbox.state + "/blobs/\(job)")
        }
        unlink(gone)
        #expect(queue.intake.finishIncompleteIntakes().isEmpty)
        let recovered = try #require(try await queue.job(id))
        #expect(recovered.intakeComplete && recovered.state == .pending)
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(try sha256(ofFile: recovered.file) == recovered.sha256)
        let failed = try #require(try await queue.job(lost))
        #expect(failed.state == .failed && failed.permanent)
        #expect(failed.lastError?.contains("vanished") == true)
    }

    @Test("a starting runner removes a crashed copy's temporary, but not while an intake is in flight")
    func staleTemporaries() throws {
        let sandbox = try Sandbox()
        let blobs = try BlobStore(directory: sandbox.state + "/blobs")
        let crashed = sandbox.state + "/blobs/.crashed.tmp"
        try sandbox.makeFile(crashed, size: 10, seed: 1)
        let intake = try blobs.shareIntakeLock()
        #expect(try !blobs.removeLeftovers(referenced: []))
        #expect(FileManager.default.fileExists(atPath: crashed), "it may be the copy in flight")
        intake.release()
        #expect(try blobs.removeLeftovers(referenced: []))
        #expect(!FileManager.default.fileExists(atPath: crashed))
        #expect(FileManager.default.fileExists(atPath: blobs.intakeLockPath), "the lock file stays")
    }

    @Test("an intake that cannot take the intake lock copies nothing and says why; a reference job needs none")
    func noIntakeLock() async throws {
        let sandbox = try Sandbox()
        let configuration = try sandbox.configuration()
        let queue = try UploadQueue(configuration: configuration)
        // Something in the lock's place that cannot be opened as a file.
        try FileManager.default.createDirectory(atPath: sandbox.state + "/intake.lock", withIntermediateDirectories: true)
        let photo = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 1000, seed: 11)
        await #expect(throws: UploadQueueError.self) { try await queue.enqueue(photo) }
        let refused = await queue.enqueue(batch: [EnqueueRequest(path: photo)])
        if case .failure(let error) = refused.first {
            #expect(error.message.contains("cannot open the intake lock") && error.path == sandbox.state + "/intake.lock",
                    "\(error)")
        } else {
            Issue.record("a batch copied without the intake lock: \(refused)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: configuration.blobDirectory).isEmpty)
        #expect(FileManager.default.fileExists(atPath: photo))
        _ = try await queue.enqueue(photo, mode: .reference)
        let problems = queue.intake.finishIncompleteIntakes()
        #expect(problems.count == 1 && problems.first?.message.contains("stays for now") == true, "\(problems)")
    }

    @Test("a starting runner leaves an unreferenced copy while another process's intake holds the lock, then removes it")
    func leftoversAcrossProcesses() async throws {
        let sandbox = try Sandbox()
        let configuration = try sandbox.configuration()
        let blobs = try BlobStore(directory: configuration.blobDirectory)
        let stray = blobs.path(for: JobID.generate())
        #expect(FileManager.default.createFile(atPath: stray, contents: Data("x".utf8)))
        // Another process in the middle of an intake, as `uploadq enqueue` is between its copies and its rows.
        let ready = sandbox.root + "/holding"
        let log = open(sandbox.root + "/flock.log", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        defer { close(log) }
        let holder = try ChildProcess(["/usr/bin/flock", "--shared", "--close", blobs.intakeLockPath, "-c", "touch \(ready); exec sleep 60"],
                                      executable: "/usr/bin/flock", environment: ProcessInfo.processInfo.environment,
                                      input: nil, output: log, errors: log, ownGroup: true)
        #expect(await eventually { FileManager.default.fileExists(atPath: ready) }, "flock took the lock")
        let queue = try UploadQueue(configuration: configuration)
        #expect(queue.intake.finishIncompleteIntakes().isEmpty)
        #expect(FileManager.default.fileExists(atPath: stray), "its row may be on its way")
        #expect(holder.signal(SIGKILL, group: true))
        _ = await holder.exit()
        #expect(queue.intake.finishIncompleteIntakes().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: stray), "no intake in flight: nothing will ever refer to it")
    }

    @Test("only the sidecar that was read is taken: a directory or a link swapped in after the read goes back to its name")
    func sidecarSwappedAfterTheRead() throws {
        let sandbox = try Sandbox()
        let blobs = try BlobStore(directory: sandbox.state + "/blobs")
        try FileManager.default.createDirectory(atPath: sandbox.spool, withIntermediateDirectories: true)
        let path = sandbox.spool + "/a.jpg" + Sidecar.suffix
        try Data(#"{"priority": -1}"#.utf8).write(to: URL(fileURLWithPath: path))
        let read = try #require(try Sidecar.readExamined(at: path))
        let id = JobID.generate()
        #expect(unlink(path) == 0)
        for swapped in ["directory", "link"] {
            if swapped == "directory" {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
                #expect(FileManager.default.createFile(atPath: path + "/junk", contents: Data(count: 10)))
            } else {
                #expect(symlink("/etc/shadow", path) == 0)
            }
            blobs.adoptSidecar(path, expected: read.file, for: id)
            var info = stat()
            #expect(lstat(blobs.sidecarPath(for: id), &info) != 0, "nothing of it in blobs/ (\(swapped))")
            #expect(lstat(path, &info) == 0, "back under its name (\(swapped))")
            try FileManager.default.removeItem(atPath: path)
        }
        // The file that was read is taken.
        try Data(#"{"priority": -1}"#.utf8).write(to: URL(fileURLWithPath: path))
        let again = try #require(try Sidecar.readExamined(at: path))
        blobs.adoptSidecar(path, expected: again.file, for: id)
        #expect(FileManager.default.fileExists(atPath: blobs.sidecarPath(for: id)))
        #expect(!FileManager.default.fileExists(atPath: path))
    }
}
