import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// Field life on a small disk: the queue's copies are released once the server confirmed them (deleted, kept for
/// a while, or archived), a release owed survives a crash, history is pruned and the database gives space back.
@Suite(.serialized)
struct RetentionTests {
    func blobNames(_ sandbox: Sandbox) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: sandbox.state + "/blobs")) ?? []).sorted()
    }

    func owed(_ queue: UploadQueue) throws -> [FileRelease] {
        try queue.store.writer.read { db in try FileRelease.fetchAll(db) }
    }

    @Test("copies are released once the server confirmed them: blobs/ ends empty, the originals and uploads stay")
    func releaseAfterUpload() async throws {
        let sandbox = try Sandbox()
        let running = try RunningQueue(sandbox)
        var ids: [JobID] = []
        for index in 0..<6 {
            let path = try sandbox.makeFile(sandbox.root + "/in/p\(index).jpg", size: 20_000 + index, seed: UInt64(index))
            ids.append(try await running.enqueue(path, to: "default", mode: index % 2 == 0 ? .copy : .move))
        }
        for id in ids {
            let job = try await running.settled(id)
            #expect(job.state == .uploaded)
            #expect(try sha256(ofFile: try #require(URL(string: job.remoteURL ?? "")).path) == job.sha256)
        }
        let emptied = try await eventually { try owed(running.queue).isEmpty && blobNames(sandbox).isEmpty }
        #expect(emptied, "left in blobs/: \(blobNames(sandbox))")
        for index in stride(from: 0, to: 6, by: 2) {
            #expect(FileManager.default.fileExists(atPath: sandbox.root + "/in/p\(index).jpg"), "copy mode leaves the caller's file")
        }
        await running.stop()
    }

    @Test("a newcomer's daemon: 60 photos dropped into the spool (one with a sidecar) leave blobs/ empty once uploaded")
    func spoolLeavesNothingBehind() async throws {
        let sandbox = try Sandbox(spool: "sidecar_meta_keys = [\"album\"]")
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox))
        try FileManager.default.createDirectory(atPath: sandbox.spool, withIntermediateDirectories: true)
        try Data(#"{"meta": {"album": "field"}}"#.utf8).write(to: URL(fileURLWithPath: sandbox.spool + "/p0.jpg.uploadq.json"))
        for index in 0..<60 {
            let source = try sandbox.makeFile(sandbox.root + "/out/p\(index).jpg", size: 5_000 + 977 * index, seed: UInt64(900 + index))
            #expect(rename(source, sandbox.spool + "/p\(index).jpg") == 0)
        }
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let done = try await eventually(timeout: .seconds(60)) { try queue.store.summary().counts[.uploaded] == 60 }
        #expect(done, "daemon log:\n\(daemon.log.suffix(2000))")
        let emptied = try await eventually { try owed(queue).isEmpty && blobNames(sandbox).isEmpty }
        #expect(emptied, "left in blobs/: \(blobNames(sandbox).prefix(5))")
        #expect(sandbox.deliveredFiles().count == 60)
        let status = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let releases = try #require((try status.json() as? [String: Any])?["releases"] as? [String: Any])
        #expect(releases["owed"] as? Int == 0)
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("a crash between the uploaded commit and the unlink leaks nothing: the next start finishes the release")
    func releaseOwedAcrossCrash() async throws {
        let sandbox = try Sandbox()
        let configuration = try sandbox.configuration()
        let queue = try UploadQueue(configuration: configuration)
        let id = try await queue.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 4096, seed: 1))
        // What a daemon killed right after committing the upload leaves: the job uploaded, its release owed.
        let (job, attempt) = try #require(try queue.store.claimNext())
        try queue.store.finish(id, attempt: attempt.number, event: .succeed, outcome: "uploaded", error: nil,
                               release: FileRelease.owed(for: job, policy: configuration.retention, now: Date())) {
            $0.remoteURL = "file:///elsewhere"
        }
        #expect(blobNames(sandbox) == [id.rawValue])
        #expect(try owed(queue).map(\.jobID) == [id])
        try await sandbox.drain()
        #expect(blobNames(sandbox).isEmpty)
        #expect(try owed(queue).isEmpty)
    }

    @Test("archive across file systems: the copy and its sidecar move under the template; a full archive keeps it owed")
    func archiveAcrossFileSystems() async throws {
        let sandbox = try Sandbox(config: "[retention]\nuploaded_copies = \"archive\"\narchive_dir = \"archive\"\n")
        let archive = try await TmpfsMount(at: sandbox.root + "/archive", size: "1m")
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let small = try await queue.enqueue(try sandbox.makeFile(sandbox.root + "/small.jpg", size: 100_000, seed: 3))
        let large = try await queue.enqueue(try sandbox.makeFile(sandbox.root + "/large.jpg", size: 3 << 20, seed: 4))
        // The sidecar a spool file leaves beside its copy travels with it.
        #expect(FileManager.default.createFile(atPath: sandbox.state + "/blobs/\(small).uploadq.json", contents: Data("{}".utf8)))
        let running = Task { try await queue.run() }
        #expect(try await eventually { try queue.store.summary().counts[.uploaded] == 2 })
        let smallJob = try #require(try await queue.job(small))
        let largeJob = try #require(try await queue.job(large))
        #expect(smallJob.state == .uploaded && largeJob.state == .uploaded)
        let day = PathTemplate.utcDay(smallJob.createdAt)
        let archived = sandbox.root + "/archive/\(day)/\(small)-small.jpg"
        #expect(await eventually { FileManager.default.fileExists(atPath: archived) })
        #expect(try sha256(ofFile: archived) == smallJob.sha256)
        #expect(FileManager.default.fileExists(atPath: archived + ".uploadq.json"))
        // The large copy does not fit: it stays in blobs/, owed, with the reason shown.
        let failing = try await eventually { try queue.store.summary().releaseError != nil }
        #expect(failing)
        #expect(blobNames(sandbox) == [large.rawValue], "nothing is lost while the archive is full")
        let status = try await BinaryRunner.run(["status", "--config", sandbox.configPath])
        #expect(status.stdout.contains("1 uploaded copy to release (failing:"), "\(status.stdout)")
        try await archive.resize("16m")
        #expect(try await eventually(timeout: .seconds(20)) { try owed(queue).isEmpty && blobNames(sandbox).isEmpty })
        #expect(try sha256(ofFile: sandbox.root + "/archive/\(day)/\(large)-large.jpg") == largeJob.sha256)
        running.cancel()
        _ = try? await running.value
    }

    @Test("copies uploaded before retention existed are released by the configured policy")
    func upgradeReleasesOldCopies() async throws {
        let sandbox = try Sandbox(config: "[retention]\nuploaded_copies = \"archive\"\narchive_dir = \"archive\"\n"
            + "archive_template = \"old/{name}\"\n")
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let id = try await queue.enqueue(try sandbox.makeFile(sandbox.root + "/old.jpg", size: 1000, seed: 5))
        let (_, attempt) = try #require(try queue.store.claimNext())
        try queue.store.finish(id, attempt: attempt.number, event: .succeed, outcome: "uploaded", error: nil)
        // The row the v5 migration writes for such a copy.
        try await queue.store.writer.write { db in
            try db.execute(sql: "INSERT INTO file_release (job_id, action, path, due_at, created_at) VALUES (?, 'policy', ?, ?, ?)",
                           arguments: [id.rawValue, sandbox.state + "/blobs/\(id)", Date(), Date()])
        }
        try await sandbox.drain()
        #expect(FileManager.default.fileExists(atPath: sandbox.root + "/archive/old/old.jpg"))
        #expect(blobNames(sandbox).isEmpty)
    }

    /// A queue with `old` uploaded jobs finished 100 days ago (each with an attempt and a wide meta), plus jobs
    /// prune must leave alone; returns the ids by kind.
    func seed(_ queue: UploadQueue, _ sandbox: Sandbox, old: Int) async throws -> [String: [JobID]] {
        var requests: [EnqueueRequest] = []
        for index in 0..<(old + 8) {
            let path = try sandbox.makeFile(sandbox.root + "/in/f\(index)", size: 64, seed: UInt64(5000 + index))
            requests.append(EnqueueRequest(path: path, meta: ["note": String(repeating: "x", count: 2000)], mode: .reference))
        }
        let ids = await queue.enqueue(batch: requests).map { try! $0.get().id }
        let kinds: [String: [JobID]] = [
            "old": Array(ids[0..<old]), "recent": [ids[old], ids[old + 1]], "patchOwed": [ids[old + 2], ids[old + 3]],
            "failed": [ids[old + 4], ids[old + 5]], "pending": [ids[old + 6], ids[old + 7]],
        ]
        let longAgo = Date().addingTimeInterval(-100 * 86_400)
        try await queue.store.writer.write { db in
            for id in ids {
                try db.execute(sql: """
                    INSERT INTO job_attempt (job_id, number, started_at, start_offset, outcome) VALUES (?, 1, ?, 0, 'uploaded')
                    """, arguments: [id.rawValue, longAgo])
            }
            for (kind, state, when, patch) in [("old", JobState.uploaded, longAgo, PatchState.none),
                                               ("recent", .uploaded, Date(), .none), ("patchOwed", .uploaded, longAgo, .pending),
                                               ("failed", .failed, longAgo, .none)] {
                for id in kinds[kind]! {
                    try db.execute(sql: "UPDATE job SET state = ?, updated_at = ?, patch_state = ?, permanent = ? WHERE id = ?",
                                   arguments: [state.rawValue, when, patch.rawValue, state == .failed, id.rawValue])
                }
            }
        }
        return kinds
    }

    @Test("prune removes old uploaded jobs with their attempts, keeps failed, live and patch-owed ones, and shrinks the database")
    func pruneHistory() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let kinds = try await seed(queue, sandbox, old: 600)
        let dry = try await queue.prune(olderThan: .seconds(30 * 86_400), dryRun: true)
        #expect(dry.jobs == 600 && dry.attempts == 600)
        #expect(try queue.store.jobs().count == 608, "a dry run removes nothing")
        let report = try await queue.prune(olderThan: .seconds(30 * 86_400))
        #expect(report.jobs == 600 && report.attempts == 600)
        let left = Set(try queue.store.jobs().map(\.id))
        #expect(left == Set(kinds["recent"]! + kinds["patchOwed"]! + kinds["failed"]! + kinds["pending"]!))
        let attempts = try await queue.store.writer.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM job_attempt") }
        #expect(attempts == 8)
        #expect(report.databaseBytesAfter < report.databaseBytesBefore / 2,
                "\(report.databaseBytesBefore) → \(report.databaseBytesAfter): the space goes back to the file system")
        let autoVacuum = try await queue.store.writer.read { db in try Int.fetchOne(db, sql: "PRAGMA auto_vacuum") }
        #expect(autoVacuum == 2)
    }

    @Test("an Idempotency-Key outlives its job (cancelled or pruned) until it is as old as the history kept")
    func idempotencyKeysOutliveTheirJobs() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let kinds = try await seed(queue, sandbox, old: 2)
        let store = queue.store
        let longAgo = Date().addingTimeInterval(-90 * 86_400)
        let (pruned, kept, live) = (kinds["old"]![0], kinds["old"]![1], kinds["recent"]![0])
        try store.recordIdempotencyKey(owner: 1000, key: "pruned-job", job: pruned, now: longAgo)
        try store.recordIdempotencyKey(owner: 1000, key: "recent-key", job: kept, now: Date())
        try store.recordIdempotencyKey(owner: 1000, key: "live-job", job: live, now: longAgo)
        try store.recordIdempotencyKey(owner: 1001, key: "pruned-job", job: live, now: Date())
        _ = try await queue.prune(olderThan: .seconds(30 * 86_400))
        let prunedGone = try await queue.job(pruned) == nil, keptGone = try await queue.job(kept) == nil
        #expect(prunedGone && keptGone, "both old uploads were pruned")
        // The prune that removed the job keeps its key until the key is old too: a late retry is still answered.
        #expect(try store.idempotentJob(owner: 1000, key: "recent-key") == kept)
        #expect(try store.idempotentJob(owner: 1000, key: "live-job") == live, "a live job's key stays, however old")
        #expect(try store.idempotentJob(owner: 1001, key: "pruned-job") == live, "keys are per user")
        #expect(try store.idempotentJob(owner: 1000, key: "pruned-job") == nil, "an old key of a gone job goes")
    }

    @Test("an Idempotency-Key is remembered in the intake's transaction: it names the job made, or the duplicate found, once that commits")
    func idempotencyKeyWithItsJob() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let photo = try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 4_000, seed: 7)
        var request = EnqueueRequest(path: photo)
        request.idempotencyKey = .init(owner: 1000, key: "first")
        let made = try await queue.accept(request, noFollow: false)
        #expect(!made.deduplicated)
        #expect(try queue.store.idempotentJob(owner: 1000, key: "first") == made.id)
        // The same content under another key: the key names the job that already carries it.
        request.idempotencyKey = .init(owner: 1000, key: "second")
        let again = try await queue.accept(request, noFollow: false)
        #expect(again.deduplicated && again.id == made.id)
        #expect(try queue.store.idempotentJob(owner: 1000, key: "second") == made.id)
        // A refused intake remembers no key: sending it again later tries again.
        request.path = sandbox.root + "/missing.jpg"
        request.idempotencyKey = .init(owner: 1000, key: "refused")
        await #expect(throws: UploadQueueError.self) { try await queue.accept(request, noFollow: false) }
        #expect(try queue.store.idempotentJob(owner: 1000, key: "refused") == nil)
    }

    @Test("once a library host consumes completions, prune keeps the unacknowledged ones")
    func pruneKeepsUnacknowledgedCompletions() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let kinds = try await seed(queue, sandbox, old: 4)
        _ = queue.completions()
        try queue.acknowledge(kinds["old"]![0])
        let report = try await queue.prune(olderThan: .seconds(86_400))
        #expect(report.jobs == 1 && report.completions == 1)
        #expect(try await queue.job(kinds["old"]![1]) != nil)
    }

    @Test("uploadq prune: --dry-run counts, --json reports, a bad age is a usage error; cancelled files go too")
    func pruneCommand() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        _ = try await seed(queue, sandbox, old: 30)
        let dry = try await BinaryRunner.run(["prune", "--older-than", "30d", "--dry-run", "--config", sandbox.configPath])
        #expect(dry.status == 0 && dry.stdout.contains("would remove 30 uploaded job(s)"), "\(dry.stdout)\(dry.stderr)")
        let bad = try await BinaryRunner.run(["prune", "--older-than", "soon", "--config", sandbox.configPath])
        #expect(bad.status == 2)
        let real = try await BinaryRunner.run(["prune", "--older-than", "30d", "--json", "--config", sandbox.configPath])
        let report = try #require(try real.json() as? [String: Any])
        #expect(report["jobs"] as? Int == 30 && report["attempts"] as? Int == 30)
        // A kept file's age is its ctime's, on the kernel's clock (pruneCancelledFiles): at 0s it goes.
        try FileManager.default.createDirectory(atPath: sandbox.state + "/cancelled", withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: sandbox.state + "/cancelled/x-old.jpg", contents: Data("x".utf8)))
        let everything = try await BinaryRunner.run(["prune", "--older-than", "0s", "--json", "--config", sandbox.configPath])
        let second = try #require(try everything.json() as? [String: Any])
        #expect(second["cancelled_files"] as? Int == 1)
        #expect(try await queue.jobs().count == 6, "recent uploads go at 0s; patch-owed, failed and pending stay")
    }

    @Test("kept files of cancelled jobs are aged by when they were moved there (their ctime): older than the cutoff go")
    func pruneCancelledFiles() throws {
        let sandbox = try Sandbox()
        let cancelled = CancelledFiles(directory: sandbox.state + "/cancelled")
        try FileManager.default.createDirectory(atPath: cancelled.directory, withIntermediateDirectories: true)
        let kept = cancelled.directory + "/01a31899-5518-7d3e-8515-d34cee7ba43c-a.jpg"
        #expect(FileManager.default.createFile(atPath: kept, contents: Data("x".utf8)))
        // The cutoff from the file's own time, not the wall clock: the kernel stamps ctime, and the clock sweep's
        // shim moves only the wall clock.
        var info = stat()
        #expect(lstat(kept, &info) == 0)
        let moved = Date(timeIntervalSince1970: Double(info.st_ctim.tv_sec))
        #expect(cancelled.prune(before: moved.addingTimeInterval(-1), dryRun: false) == 0, "moved after the cutoff: kept")
        #expect(cancelled.prune(before: moved.addingTimeInterval(2), dryRun: true) == 1)
        #expect(FileManager.default.fileExists(atPath: kept), "a dry run removes nothing")
        #expect(cancelled.prune(before: moved.addingTimeInterval(2), dryRun: false) == 1)
        #expect(!FileManager.default.fileExists(atPath: kept))
    }

    @Test("a database made before incremental vacuum is converted when a runner starts")
    func vacuumModeUpgrade() throws {
        let sandbox = try Sandbox()
        let path = sandbox.root + "/old.sqlite"
        let old = try DatabaseQueue(path: path)
        try old.write { db in try db.execute(sql: "CREATE TABLE earlier (id TEXT PRIMARY KEY)") }
        #expect(try old.read { db in try Int.fetchOne(db, sql: "PRAGMA auto_vacuum") } == 0)
        try old.close()
        let database = try QueueDatabase.open(path: path)
        try database.enableIncrementalVacuum()
        #expect(try database.writer.read { db in try Int.fetchOne(db, sql: "PRAGMA auto_vacuum") } == 2)
    }

    @Test("[retention] keys are read and checked")
    func configuration() throws {
        func parse(_ text: String) throws(ConfigurationError) -> RetentionPolicy {
            try ConfigurationLoader.parse(text, file: "t.toml", baseDirectory: "/base").retention
        }
        #expect(try parse("") == RetentionPolicy())
        #expect(try parse("[retention]\nhistory = \"forever\"").history == nil)
        #expect(try parse("[retention]\nhistory = \"30d\"").history == .seconds(30 * 86_400))
        #expect(try parse("[retention]\nuploaded_copies = \"keep\"").uploadedCopies == .keep(for: .seconds(7 * 86_400)))
        let archive = try parse("[retention]\nuploaded_copies = \"archive\"\narchive_dir = \"a\"")
        #expect(archive.uploadedCopies == .archive(directory: "/base/a", template: RetentionPolicy.defaultArchiveTemplate))
        for (text, key) in [("uploaded_copies = \"shred\"", "retention.uploaded_copies"),
                            ("uploaded_copies = \"archive\"", "retention.uploaded_copies"),
                            ("keep_for = \"1d\"", "retention.keep_for"),
                            ("archive_dir = \"a\"", "retention.archive_dir"),
                            ("history = \"soon\"", "retention.history"),
                            ("uploaded_copies = \"archive\"\narchive_dir = \"a\"\narchive_template = \"../x\"",
                             "retention.archive_template")] {
            #expect(throws: ConfigurationError.self) { try parse("[retention]\n" + text) }
            do { _ = try parse("[retention]\n" + text) } catch { #expect(error.key == key, "\(text): \(error)") }
        }
    }

    @Test("keep: the copy stays for keep_for after the upload, then goes")
    func keepForAWhile() async throws {
        let sandbox = try Sandbox(config: "[retention]\nuploaded_copies = \"keep\"\nkeep_for = \"3s\"\n")
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 8192, seed: 2), to: "default")
        #expect(try await running.settled(id).state == .uploaded)
        #expect(blobNames(sandbox) == [id.rawValue], "kept right after the upload")
        let release = try #require(try owed(running.queue).first)
        #expect(abs(release.dueAt.timeIntervalSince(release.createdAt) - 3) < 0.01)
        #expect(await eventually(timeout: .seconds(15)) { blobNames(sandbox).isEmpty })
        await running.stop()
    }
}

/// Upgrades and leftovers: a queue from before retention, spool sidecars taken in with their file.
@Suite(.serialized)
struct RetentionUpgradeTests {
    @Test("a v4 queue with an uploaded copy upgrades: the copy is owed by the policy, and the daemon deletes it")
    func upgradeFromV4() async throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state + "/blobs", withIntermediateDirectories: true)
        let id = JobID.generate(at: Date())
        let blob = try sandbox.makeFile(sandbox.state + "/blobs/\(id)", size: 5_000, seed: 701)
        let database = try DatabaseQueue(path: sandbox.state + "/queue.sqlite")
        try QueueDatabase.migrator.migrate(database, upTo: "v4-summary-indexes")
        try await database.write { db in
            try db.execute(sql: """
                INSERT INTO job (id, state, file, source_path, original_name, mode, size, sha256, content_type, mtime_ns,
                inode, device, destination, meta, intake_complete, remote_url, created_at, updated_at)
                VALUES (?, 'uploaded', ?, ?, 'a.jpg', 'copy', 5000, 'x', 'image/jpeg', 0, 1, 1, 'default', '{}', 1,
                'file:///x', ?, ?)
                """, arguments: [id.rawValue, blob, blob, Date(), Date()])
        }
        try database.close()
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let owed = try await store.writer.read { db in try FileRelease.fetchAll(db) }
        #expect(owed.map(\.action) == [.policy] && owed.first?.jobID == id)
        #expect(FileManager.default.fileExists(atPath: blob), "nothing is deleted by the migration itself")
        try await sandbox.drain()
        #expect(!FileManager.default.fileExists(atPath: blob), "the daemon applies the policy (delete) and releases it")
        #expect(try await store.writer.read { db in try FileRelease.fetchCount(db) } == 0)
    }

    @Test("a spool sidecar goes into blobs/ with its file before the job can run; a crash in between is finished at start; orphans are swept")
    func sidecarTakenWithTheFile() async throws {
        let sandbox = try Sandbox(config: "[retention]\nuploaded_copies = \"keep\"\n")
        try FileManager.default.createDirectory(atPath: sandbox.spool, withIntermediateDirectories: true)
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let photo = try sandbox.makeFile(sandbox.spool + "/a.jpg", size: 2_000, seed: 702)
        try Data(#"{"meta": {"k": "v"}}"#.utf8).write(to: URL(fileURLWithPath: photo + Sidecar.suffix))
        var request = EnqueueRequest(path: photo, mode: .move)
        request.sidecar = photo + Sidecar.suffix
        let id = try await queue.accept(request, noFollow: true).id
        #expect(FileManager.default.fileExists(atPath: sandbox.state + "/blobs/\(id)\(Sidecar.suffix)"))
        #expect(!FileManager.default.fileExists(atPath: photo + Sidecar.suffix), "no sidecar is left in the spool")

        // A crash after the row was committed, before the file and its sidecar were taken.
        let second = try sandbox.makeFile(sandbox.spool + "/b.jpg", size: 2_000, seed: 703)
        let secondID = try await queue.enqueue(second)
        unlink(sandbox.state + "/blobs/\(secondID)")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: second + Sidecar.suffix))
        let fingerprint = try FileFingerprint.of(path: second)
        try await queue.store.writer.write { db in
            try db.execute(sql: """
                UPDATE job SET intake_complete = 0, mode = 'move', file = ?, inode = ?, device = ?, mtime_ns = ? WHERE id = ?
                """, arguments: [sandbox.state + "/blobs/\(secondID)", fingerprint.inode, fingerprint.device,
                                 fingerprint.modifiedNanoseconds, secondID.rawValue])
        }
        #expect(queue.intake.finishIncompleteIntakes().isEmpty)
        #expect(FileManager.default.fileExists(atPath: sandbox.state + "/blobs/\(secondID)\(Sidecar.suffix)"))
        #expect(!FileManager.default.fileExists(atPath: second + Sidecar.suffix))

        // A kept sidecar whose job is gone is swept with the orphaned copies.
        let stray = JobID.generate(at: Date())
        let strayPath = sandbox.state + "/blobs/\(stray)\(Sidecar.suffix)"
        try Data("{}".utf8).write(to: URL(fileURLWithPath: strayPath))
        let blobs = try BlobStore(directory: sandbox.state + "/blobs")
        #expect(try blobs.removeLeftovers(referenced: [id.rawValue, secondID.rawValue]))
        #expect(!FileManager.default.fileExists(atPath: strayPath))
        #expect(FileManager.default.fileExists(atPath: sandbox.state + "/blobs/\(id)\(Sidecar.suffix)"))
    }
}
