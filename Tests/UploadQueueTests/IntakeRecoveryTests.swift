import CUploadQueueSystem
import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// Intakes that go wrong half-way: each one finishes or is undone, one bad leftover never blocks the others, and
/// a file is only unlinked while its name still refers to the file that was read.
@Suite(.serialized)
struct IntakeRecoveryTests {
    /// Sets a job's row back to the moment a crash left it: a `move` intake not yet complete, recorded with the
    /// identity of `source`.
    func makeIncompleteMove(_ queue: UploadQueue, _ id: JobID, source: String) async throws {
        let fingerprint = try FileFingerprint.of(path: source)
        try await queue.store.writer.write { db in
            try db.execute(sql: """
                UPDATE job SET intake_complete = 0, mode = ?, source_path = ?, inode = ?, device = ?, mtime_ns = ? WHERE id = ?
                """, arguments: [IntakeMode.move.rawValue, source, fingerprint.inode, fingerprint.device,
                                 fingerprint.modifiedNanoseconds, id.rawValue])
        }
    }

    @Test("a move whose copy across file systems hits a full disk is undone: the file stays, a later enqueue is not 'already queued'")
    func moveUndoneOnFullDisk() async throws {
        // No free-space floor: the copy itself runs into the full disk.
        let sandbox = try Sandbox(limits: "min_free_space = 0")
        let blobs = try await TmpfsMount(at: sandbox.state + "/blobs", size: "1m")
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/in/big.jpg", size: 2 << 20, seed: 11)
        let expected = try sha256(ofFile: path)
        await #expect(throws: UploadQueueError.self) { try await queue.enqueue(path, mode: .move) }
        #expect(try sha256(ofFile: path) == expected, "the file is where it was, whole")
        #expect(try await queue.jobs().isEmpty, "no half-taken row is left behind")
        #expect(try FileManager.default.contentsOfDirectory(atPath: blobs.path).isEmpty, "no partial copy is left")
        try await blobs.resize("8m")
        let again = try await queue.enqueue(EnqueueRequest(path: path, mode: .move))
        #expect(!again.deduplicated)
        let job = try #require(try await queue.job(again.id))
        #expect(job.intakeComplete && !FileManager.default.fileExists(atPath: path))
        #expect(try sha256(ofFile: job.file) == expected)
        #expect(try FileFingerprint.of(path: job.file).inode == job.inode, "the copy's own inode is recorded")
    }

    @Test("one interrupted intake that cannot be finished is reported; the others are finished and the queue starts")
    func oneBadLeftoverDoesNotBlock() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        var ids: [JobID] = []
        var sources: [String] = []
        for index in 0..<3 {
            let source = try sandbox.makeFile(sandbox.root + "/in/f\(index).jpg", size: 3000, seed: UInt64(20 + index))
            let id = try await queue.enqueue(source)
            unlink(sandbox.state + "/blobs/\(id)")
            try await makeIncompleteMove(queue, id, source: source)
            ids.append(id)
            sources.append(source)
        }
        // The first one's place in blobs/ is taken by a directory: its rename cannot succeed.
        try FileManager.default.createDirectory(atPath: sandbox.state + "/blobs/\(ids[0])", withIntermediateDirectories: false)
        let problems = queue.intake.finishIncompleteIntakes()
        #expect(problems.count == 1 && problems.first?.job == ids[0], "\(problems)")
        for (id, source) in zip(ids.dropFirst(), sources.dropFirst()) {
            let job = try #require(try await queue.job(id))
            #expect(job.intakeComplete && !FileManager.default.fileExists(atPath: source))
        }
        #expect(FileManager.default.fileExists(atPath: sources[0]), "the file that could not be taken stays where it is")
        // The queue still starts and delivers the rest.
        try await sandbox.drain()
        let second = try await queue.job(ids[1])
        let third = try await queue.job(ids[2])
        #expect(second?.state == .uploaded && third?.state == .uploaded)
    }

    @Test("a crash in the cross-file-system move window: the copy's inode is recorded, the original goes, the upload works")
    func crossDeviceCrashWindow() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let source = try sandbox.makeFile(sandbox.root + "/in/photo.jpg", size: 50_000, seed: 30)
        let id = try await queue.enqueue(source)
        // The copy is in blobs/ under its final name, the original not yet unlinked, the row not yet complete.
        try await makeIncompleteMove(queue, id, source: source)
        #expect(queue.intake.finishIncompleteIntakes().isEmpty)
        let job = try #require(try await queue.job(id))
        #expect(job.intakeComplete)
        #expect(job.inode == (try FileFingerprint.of(path: job.file).inode))
        #expect(!FileManager.default.fileExists(atPath: source), "the original is unlinked once the copy is recorded")
        try await sandbox.drain()
        let done = try #require(try await queue.job(id))
        #expect(done.state == .uploaded, "\(done.lastError ?? "")")
    }

    @Test("the original is not unlinked when a new version took its name, or was written in place, meanwhile")
    func unlinkOnlyWhatWasRead() throws {
        let sandbox = try Sandbox()
        let blobs = try BlobStore(directory: sandbox.state + "/blobs")
        let path = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 100, seed: 1)
        let read = try FileFingerprint.of(path: path)
        let newer = try sandbox.makeFile(sandbox.root + "/.new", size: 100, seed: 2)
        #expect(rename(newer, path) == 0)
        #expect(throws: UploadQueueError.self) { try blobs.unlinkIfUnchanged(path, expected: read, job: JobID.generate()) }
        #expect(try sha256(ofFile: path) == (try sha256(ofFile: sandbox.makeFile(sandbox.root + "/b", size: 100, seed: 2))))
        let replaced = try FileFingerprint.of(path: path)
        let writer = open(path, O_WRONLY | O_APPEND)
        #expect(write(writer, "more", 4) == 4)
        close(writer)
        #expect(throws: UploadQueueError.self) { try blobs.unlinkIfUnchanged(path, expected: replaced, job: JobID.generate()) }
        #expect(FileManager.default.fileExists(atPath: path))
        try blobs.unlinkIfUnchanged(path, expected: try FileFingerprint.of(path: path), job: JobID.generate())
        #expect(!FileManager.default.fileExists(atPath: path))
    }
}

/// Cancelling keeps the queue's copy of the file whatever happens: the row goes only once the file is safe.
@Suite(.serialized)
struct CancelKeepsFileTests {
    @Test("a cancel whose file cannot be kept fails and leaves job and file; once possible, the file is kept")
    func cancelWaitsForTheFile() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let id = try await queue.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 1000, seed: 3))
        // A regular file where cancelled/ should be: nothing can be moved there.
        #expect(FileManager.default.createFile(atPath: sandbox.state + "/cancelled", contents: Data()))
        await #expect(throws: UploadQueueError.self) { try await queue.cancel(id) }
        #expect(try await queue.job(id) != nil)
        #expect(FileManager.default.fileExists(atPath: sandbox.state + "/blobs/\(id)"))
        // The start-up sweep must not take the blob for an orphan either.
        let swept = try BlobStore(directory: sandbox.state + "/blobs")
        #expect(try swept.removeLeftovers(referenced: Set(try await queue.jobs().map(\.id.rawValue))))
        #expect(FileManager.default.fileExists(atPath: sandbox.state + "/blobs/\(id)"))
        unlink(sandbox.state + "/cancelled")
        #expect(try await queue.cancel(id) == .removed)
        #expect(try await queue.job(id) == nil)
        #expect(FileManager.default.fileExists(atPath: sandbox.state + "/cancelled/\(id)-a.jpg"))
    }

    @Test("a name too long for the cancelled/ folder is shortened, and the file kept")
    func cancelLongName() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let name = String(repeating: "é", count: 120) + ".jpg"
        let path = try sandbox.makeFile(sandbox.root + "/" + name, size: 1000, seed: 4)
        let id = try await queue.enqueue(path)
        let blob = sandbox.state + "/blobs/\(id)"
        let expected = try sha256(ofFile: blob)
        #expect(try await queue.cancel(id) == .removed)
        let kept = try FileManager.default.contentsOfDirectory(atPath: sandbox.state + "/cancelled")
        #expect(kept.count == 1)
        let keptName = try #require(kept.first)
        #expect(keptName.utf8.count <= 255 && keptName.hasPrefix(id.rawValue) && keptName.hasSuffix(".jpg"))
        #expect(try sha256(ofFile: sandbox.state + "/cancelled/" + keptName) == expected)
        #expect(!FileManager.default.fileExists(atPath: blob))
    }
}

/// The shortening rule for names a target cannot take.
struct FileNameTests {
    let id = JobID("01934f7e-8c1a-7b3e-9d2f-0a1b2c3d4e5f")!

    @Test("names that fit are left alone")
    func fits() {
        #expect(FileName.fitting("photo.jpg", jobID: id) == "photo.jpg")
        let exact = String(repeating: "a", count: 251) + ".jpg"
        #expect(FileName.fitting(exact, jobID: id) == exact)
    }

    @Test("a long name keeps its beginning, the job id and the extension, in 255 bytes, the same every time")
    func shortened() {
        let long = String(repeating: "a", count: 300) + ".jpg"
        let short = FileName.fitting(long, jobID: id)
        #expect(short.utf8.count == 255)
        #expect(short.hasPrefix("aaaa") && short.hasSuffix("~\(id).jpg"))
        #expect(FileName.fitting(long, jobID: id) == short)
    }

    @Test("a name that starts with the job id keeps it once, and multi-byte characters are never split")
    func multiByte() {
        let long = "\(id)-" + String(repeating: "é", count: 200) + ".heic"
        let short = FileName.fitting(long, jobID: id)
        #expect(short.utf8.count <= 255 && short.utf8.count >= 253)
        #expect(short.hasPrefix("\(id)-é") && short.hasSuffix("é.heic") && !short.contains("~"))
        #expect(String(decoding: Array(short.utf8), as: UTF8.self) == short)
        let noExtension = String(repeating: "日", count: 100)
        let cut = FileName.fitting(noExtension, jobID: id)
        #expect(cut.utf8.count <= 255 && cut.hasSuffix("~\(id)") && cut.hasPrefix("日"))
    }
}
