import Foundation
import Testing
@testable import UploadQueue

/// `source_after_upload` / `enqueue --then`: what becomes of a `reference` job's own file after the upload. Only
/// after the confirmation, and only on the file that was enqueued.
@Suite(.serialized)
struct SourceAfterUploadTests {
    func enqueue(_ sandbox: Sandbox, _ path: String, _ extra: [String] = []) async throws -> JobID {
        let result = try await BinaryRunner.run(["enqueue", path, "--mode", "reference", "--config", sandbox.configPath] + extra)
        #expect(result.status == 0, "\(result.stderr)")
        return try #require(JobID(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    @Test("--then delete and --then move:DIR act once the upload is confirmed; without --then the file stays")
    func deleteAndMove() async throws {
        let sandbox = try Sandbox()
        let deleted = try sandbox.makeFile(sandbox.root + "/in/a.jpg", size: 30_000, seed: 601)
        let moved = try sandbox.makeFile(sandbox.root + "/in/b.jpg", size: 30_000, seed: 602)
        let kept = try sandbox.makeFile(sandbox.root + "/in/c.jpg", size: 30_000, seed: 603)
        let movedSum = try sha256(ofFile: moved)
        let ids = await [try enqueue(sandbox, deleted, ["--then", "delete"]),
                   try enqueue(sandbox, moved, ["--then", "move:\(sandbox.root)/sent"]),
                   try await enqueue(sandbox, kept)]
        try await sandbox.drain()
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        for id in ids { #expect(try store.job(id)?.state == .uploaded) }
        #expect(!FileManager.default.fileExists(atPath: deleted), "deleted after the upload")
        #expect(!FileManager.default.fileExists(atPath: moved))
        #expect(try sha256(ofFile: sandbox.root + "/sent/b.jpg") == movedSum, "moved, whole, under its own name")
        #expect(FileManager.default.fileExists(atPath: kept), "a reference file is kept by default")
        #expect(try FileManager.default.contentsOfDirectory(atPath: sandbox.target).count == 3, "all three uploaded")
        let owed = try await store.writer.read { db in try FileRelease.fetchCount(db) }
        #expect(owed == 0, "nothing left owed")
    }

    @Test("the destination's source_after_upload applies unless the job says otherwise")
    func destinationDefault() async throws {
        let sandbox = try Sandbox(config: """
            [destinations.tidy]
            protocol = "file"
            url = "file://uploaded"
            source_after_upload = "delete"
            """)
        let gone = try sandbox.makeFile(sandbox.root + "/in/a.jpg", size: 10_000, seed: 611)
        let stays = try sandbox.makeFile(sandbox.root + "/in/b.jpg", size: 10_000, seed: 612)
        _ = try await enqueue(sandbox, gone, ["--destination", "tidy"])
        _ = try await enqueue(sandbox, stays, ["--destination", "tidy", "--then", "keep"])
        try await sandbox.drain()
        #expect(!FileManager.default.fileExists(atPath: gone))
        #expect(FileManager.default.fileExists(atPath: stays), "--then keep narrows the destination's delete")
    }

    @Test("a file replaced after its upload is left alone: the release acts only on the file that was enqueued")
    func replacedFileIsLeft() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/in/a.jpg", size: 10_000, seed: 621)
        let id = try await queue.enqueue(EnqueueRequest(path: path, mode: .reference, sourceAfterUpload: .delete)).id
        let job = try #require(try await queue.job(id))
        let release = try #require(FileRelease.owed(for: job, policy: RetentionPolicy(), source: .delete, now: Date()))
        // A new version takes the name (another inode) after the upload.
        let newer = try sandbox.makeFile(sandbox.root + "/in/a.jpg.new", size: 12_000, seed: 622)
        #expect(rename(newer, path) == 0)
        let outcome = FileReleaser().perform([release])[id]
        guard case .left(let reason)? = outcome else {
            Issue.record("expected the file to be left alone, got \(String(describing: outcome))")
            return
        }
        #expect(reason.contains("changed after it was uploaded"))
        #expect(try FileFingerprint.of(path: path).size == 12_000, "the newer version is untouched")
    }

    @Test("--then is refused for copies and moves, in the CLI, the library and a spool sidecar; a bad destination value is a config error")
    func refusals() async throws {
        let sandbox = try Sandbox()
        let path = try sandbox.makeFile(sandbox.root + "/in/a.jpg", size: 1_000, seed: 631)
        let cli = try await BinaryRunner.run(["enqueue", path, "--then", "delete", "--config", sandbox.configPath])
        #expect(cli.status == 2 && cli.stderr.contains("--mode reference"), "\(cli.stderr)")
        let bad = try await BinaryRunner.run(["enqueue", path, "--mode", "reference", "--then", "shred",
                                        "--config", sandbox.configPath])
        #expect(bad.status == 2, "\(bad.stderr)")
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        await #expect {
            try await queue.enqueue(EnqueueRequest(path: path, mode: .copy, sourceAfterUpload: .delete))
        } throws: { error in
            (error as? UploadQueueError)?.code == .invalidArgument && "\(error)".contains("reference")
        }
        #expect(throws: SidecarError.self) {
            try Sidecar(json: Data(#"{"source_after_upload": "delete"}"#.utf8))
        }
        let broken = try Sandbox(config: """
            [destinations.x]
            protocol = "file"
            url = "file://x"
            source_after_upload = "shred"
            """)
        #expect {
            try broken.configuration()
        } throws: { error in
            "\(error)".contains("destinations.x.source_after_upload")
        }
    }
}

/// Source releases that must wait or choose another name.
@Suite(.serialized)
struct SourceReleaseCornerTests {
    @Test("a file two jobs read is released only once the second is uploaded; a name taken in DIR gets ~<job id>")
    func sharedFileAndTakenName() async throws {
        let recorder = try RecorderSession()
        try await recorder.script([["status": 503, "body": "busy"]])
        let sandbox = try Sandbox(config: """
            [destinations.slow]
            protocol = "http-put"
            url = "\(recorder.url("/{job_id}-{name}"))"
            """, retryInterval: "1s")
        let shared = try sandbox.makeFile(sandbox.root + "/in/shared.jpg", size: 20_000, seed: 641)
        let runner = SourceAfterUploadTests()
        let first = try await runner.enqueue(sandbox, shared, ["--then", "delete"])
        let second = try await runner.enqueue(sandbox, shared, ["--destination", "slow"])
        let named = try sandbox.makeFile(sandbox.root + "/in/IMG_0001.JPG", size: 10_000, seed: 642)
        let namedSum = try sha256(ofFile: named)
        let earlier = try sandbox.makeFile(sandbox.root + "/sent/IMG_0001.JPG", size: 5_000, seed: 643)
        let earlierSum = try sha256(ofFile: earlier)
        let moved = try await runner.enqueue(sandbox, named, ["--then", "move:\(sandbox.root)/sent"])

        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let daemon = try DaemonProcess(sandbox: sandbox)
        let firstDone = try await eventually(timeout: .seconds(20)) { try store.job(first)?.state == .uploaded }
        #expect(firstDone, "daemon log:\n\(daemon.log.suffix(2000))")
        if try store.job(second)?.state != .uploaded {
            #expect(FileManager.default.fileExists(atPath: shared), "kept while job \(second) still has to upload it")
        }
        let gone = await eventually(timeout: .seconds(30)) { !FileManager.default.fileExists(atPath: shared) }
        #expect(gone, "released once both are uploaded; daemon log:\n\(daemon.log.suffix(2000))")
        #expect(try store.job(second)?.state == .uploaded)
        #expect(try sha256(ofFile: earlier) == earlierSum, "the file already in DIR is untouched")
        let renamed = sandbox.root + "/sent/IMG_0001~\(moved).JPG"
        let arrived = await eventually(timeout: .seconds(20)) { FileManager.default.fileExists(atPath: renamed) }
        #expect(arrived, "daemon log:\n\(daemon.log.suffix(2000))")
        #expect(try sha256(ofFile: renamed) == namedSum)
        #expect(await daemon.terminate() < .seconds(10))
    }

    @Test("a file a crash left aside under its hidden name is finished by the next pass")
    func asideAfterCrash() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/in/a.jpg", size: 10_000, seed: 651)
        let id = try await queue.enqueue(EnqueueRequest(path: path, mode: .reference, sourceAfterUpload: .delete)).id
        let job = try #require(try await queue.job(id))
        let release = try #require(FileRelease.owed(for: job, policy: RetentionPolicy(), source: .delete, now: Date()))
        let aside = FileReleaser.asidePath(of: release)
        #expect(rename(path, aside) == 0)
        #expect(FileReleaser().perform([release])[id] == .done)
        #expect(!FileManager.default.fileExists(atPath: aside) && !FileManager.default.fileExists(atPath: path))
    }
}
