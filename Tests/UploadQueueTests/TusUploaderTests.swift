import Foundation
import Testing
@testable import UploadQueue

/// tus 1.0 against tuspyserver, directly or through the fault proxy for what a healthy server never does: the
/// tus conformance cases of PROTOCOLS.md (the kill -9 case runs the daemon binary in TusCrashTests).
struct TusUploaderTests {
    static let chunk = 256 << 10

    func sandbox(endpoint: String, extra: String = "", retry: String = "300ms") throws -> Sandbox {
        try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(endpoint)"
            chunk_size = \(Self.chunk)
            stall_timeout = "2s"
            \(extra)
            """, retry: retry)
    }

    /// A proxy in front of tuspyserver.
    func proxy() async throws -> FaultProxy {
        try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
    }

    func requests(_ proxy: FaultProxy, _ method: String) async throws -> [[String: Any]] {
        try await proxy.requests().filter { $0["method"] as? String == method }
    }

    func storedDigest(_ job: Job) throws -> String {
        try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: try #require(job.remoteURL)))
    }

    @Test("chunks arrive byte-identical; remote_url is the upload URL; no Upload-Checksum unless advertised (9)")
    func basicUpload() async throws {
        let proxy = try await proxy()
        let sandbox = try sandbox(endpoint: proxy.url("/files/"))
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 1_000_000, seed: 1)
        let id = try await running.enqueue(path, to: "tus")
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(job.remoteURL?.hasPrefix(proxy.url("/files/")) == true)
        #expect(try storedDigest(job) == job.sha256)
        #expect(job.bytesConfirmed == 1_000_000)
        let patches = try await requests(proxy, "PATCH")
        #expect(patches.count == (1_000_000 + Self.chunk - 1) / Self.chunk)
        #expect(patches.allSatisfy { ($0["headers"] as? [String: String])?["upload-checksum"] == nil })
        #expect(patches.allSatisfy { ($0["headers"] as? [String: String])?["expect"] == nil })
        #expect(try await requests(proxy, "OPTIONS").count == 1)
    }

    @Test("UTF-8 names, commas and spaces in metadata reach the server intact (11)")
    func metadata() async throws {
        let sandbox = try sandbox(endpoint: try TestServers.tusEndpoint())
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/Fête, à la plage 📷.jpg", size: 10_000, seed: 2)
        let id = try await running.enqueue(path, to: "tus", meta: ["caption": "sun, sea and sand", "record": "r-1",
                                                                   "empty": "", "bad key": "skipped"])
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let info = try TestServers.tusStoredFile(uploadURL: try #require(job.remoteURL)) + ".info"
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: info)))
        let metadata = try #require((object as? [String: Any])?["metadata"] as? [String: String])
        #expect(metadata["filename"] == "Fête, à la plage 📷.jpg")
        #expect(metadata["filetype"] == job.contentType)
        #expect(metadata["caption"] == "sun, sea and sand")
        #expect(metadata["record"] == "r-1")
        #expect(metadata["empty"] == "")
        #expect(metadata["bad key"] == nil)
    }

    @Test("a zero-byte file is created with Upload-Length 0 and counts as uploaded (12)")
    func zeroBytes() async throws {
        let sandbox = try sandbox(endpoint: try TestServers.tusEndpoint())
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/empty.txt", size: 0, seed: 0)
        let id = try await running.enqueue(path, to: "tus")
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let stored = try TestServers.tusStoredFile(uploadURL: try #require(job.remoteURL))
        #expect(try FileManager.default.attributesOfItem(atPath: stored)[.size] as? Int == 0)
    }

    @Test("public_url_template makes remote_url from the upload id and the job's placeholders")
    func publicURL() async throws {
        let sandbox = try sandbox(endpoint: try TestServers.tusEndpoint(),
                                  extra: #"public_url_template = "https://cdn.example.com/p/{upload_id}/{name}""#)
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/a b.jpg", size: 5000, seed: 3)
        let id = try await running.enqueue(path, to: "tus")
        let job = try await running.settled(id)
        await running.stop()
        let remote = try #require(job.remoteURL)
        #expect(remote.hasPrefix("https://cdn.example.com/p/"))
        #expect(remote.hasSuffix("/a%20b.jpg"))
        let uploadID = remote.split(separator: "/")[3]
        #expect(FileManager.default.fileExists(atPath: try TestServers.tusFiles() + "/" + uploadID))
    }

    @Test("a server offset beyond the file fails permanently before any PATCH, and the upload is forgotten (2)")
    func offsetBeyondFile() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "PATCH", "action": "reset", "after_bytes": 1000, "times": 2])
        try await proxy.add(["method": "HEAD", "action": "rewrite", "set_headers": ["Upload-Offset": "999999999"]])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"))
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/f.bin", size: 600_000, seed: 4)
        let id = try await running.enqueue(path, to: "tus")
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .failed && job.permanent)
        #expect(job.lastError?.contains("offset 999999999") == true, "\(job.lastError ?? "")")
        #expect(job.lastError?.contains("uploadq retry") == true)
        #expect(job.resumeState == nil)
        let log = try await proxy.requests().map { $0["method"] as? String ?? "" }
        let head = try #require(log.lastIndex(of: "HEAD"))
        #expect(!log[head...].contains("PATCH"), "\(log)")
    }

    @Test("a server offset behind ours: the upload backs up to it and resends, no gap (3)")
    func offsetBehindOurs() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "PATCH", "skip": 2, "action": "reset", "after_bytes": 0, "times": 2])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"), retry: "30s")
        let path = try sandbox.makeFile(sandbox.root + "/f.bin", size: 1_500_000, seed: 5)
        var running = try RunningQueue(sandbox)
        let id = try await running.enqueue(path, to: "tus")
        _ = try await running.wait(id) { $0.state == .failed }
        await running.stop()
        // Our record claims more than the server holds (as after a server restored from an older backup).
        try await running.queue.store.writer.write { db in
            try db.execute(sql: "UPDATE job SET bytes_confirmed = 1400000, state = 'pending', next_attempt_at = NULL")
        }
        let before = try await proxy.requests().count
        running = try RunningQueue(sandbox)
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try storedDigest(job) == job.sha256)
        let after = try await proxy.requests().dropFirst(before)
        let firstPatch = try #require(after.first { $0["method"] as? String == "PATCH" })
        #expect((firstPatch["headers"] as? [String: String])?["upload-offset"] == String(2 * Self.chunk))
        #expect(try running.attempts(id).last?.startOffset == Int64(2 * Self.chunk))
    }

    @Test("409 leads to one HEAD resync and the upload goes on; a 409 that persists ends the attempt, no loop (4)")
    func conflictResync() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "PATCH", "skip": 1, "action": "respond", "status": 409])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"), retry: "30s")
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/f.bin", size: 700_000, seed: 6)
        let id = try await running.enqueue(path, to: "tus")
        let job = try await running.settled(id)
        #expect(job.state == .uploaded && job.attempts == 1, "\(job.lastError ?? "")")
        #expect(try storedDigest(job) == job.sha256)
        #expect(try await requests(proxy, "HEAD").count == 1)

        try await proxy.add(["method": "PATCH", "action": "respond", "status": 409, "times": -1])
        let other = try sandbox.makeFile(sandbox.root + "/g.bin", size: 700_000, seed: 7)
        let heads = try await requests(proxy, "HEAD").count
        let stuck = try await running.enqueue(other, to: "tus")
        let failed = try await running.wait(stuck) { $0.state == .failed }
        await running.stop()
        #expect(failed.lastError?.contains("409 again") == true, "\(failed.lastError ?? "")")
        #expect(try await requests(proxy, "HEAD").count == heads + 1)
    }

    @Test("a short PATCH acknowledgement is continued from what the server kept (5)")
    func shortAcknowledgement() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "PATCH", "skip": 1, "action": "truncate", "after_bytes": 1000])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"))
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/f.bin", size: 800_000, seed: 8)
        let id = try await running.enqueue(path, to: "tus")
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded && job.attempts == 1, "\(job.lastError ?? "")")
        #expect(try storedDigest(job) == job.sha256)
        let offsets = try await requests(proxy, "PATCH").compactMap { ($0["headers"] as? [String: String])?["upload-offset"] }
        #expect(offsets.prefix(3) == ["0", String(Self.chunk), String(Self.chunk + 1000)])
        #expect(try await requests(proxy, "HEAD").isEmpty)
    }

    @Test("an upload gone on resume (404, 410) is replaced by a new one (6)")
    func goneOnResume() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "PATCH", "skip": 1, "action": "reset", "after_bytes": 0, "times": 2])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"), retry: "30s")
        let path = try sandbox.makeFile(sandbox.root + "/f.bin", size: 900_000, seed: 9)
        var running = try RunningQueue(sandbox)
        let id = try await running.enqueue(path, to: "tus")
        let interrupted = try await running.wait(id) { $0.state == .failed }
        await running.stop()
        let first = try #require(TusResumeState(json: interrupted.resumeState)).uploadURL
        // The server lost the upload (expired, cleaned up): delete it behind uploadq's back.
        let direct = try TestServers.tusEndpoint() + String(first.split(separator: "/").last!)
        let (deleted, _) = try await TestHTTP.request("DELETE", direct, headers: ["Tus-Resumable": "1.0.0"])
        #expect(deleted == 204)
        try await running.queue.retry([id])
        running = try RunningQueue(sandbox)
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(job.remoteURL != first)
        #expect(try storedDigest(job) == job.sha256)
        #expect(try await requests(proxy, "POST").count == 2)
    }

    @Test("410 on HEAD also starts a new upload")
    func expiredOnResume() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "PATCH", "skip": 1, "action": "reset", "after_bytes": 0, "times": 2])
        try await proxy.add(["method": "HEAD", "action": "respond", "status": 410])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"))
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/f.bin", size: 900_000, seed: 10)
        let id = try await running.enqueue(path, to: "tus")
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try storedDigest(job) == job.sha256)
        #expect(try await requests(proxy, "POST").count == 2)
    }

    @Test("412 is permanent and names the server's versions (7)")
    func versionRefused() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "POST", "action": "respond", "status": 412, "headers": ["Tus-Version": "2.0.0,0.2.2"]])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"))
        let (job, _) = try await sandbox.uploadOne("f.bin", size: 1000, seed: 11, to: "tus")
        #expect(job.state == .failed && job.permanent)
        #expect(job.lastError?.contains("2.0.0,0.2.2") == true, "\(job.lastError ?? "")")
        #expect(job.attempts == 1)
    }

    @Test("with the checksum extension advertised every PATCH carries the chunk's SHA-1; 460 resends, capped (8)")
    func checksums() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "OPTIONS", "action": "rewrite", "times": -1, "set_headers": [
            "Tus-Extension": "creation,termination,checksum", "Tus-Checksum-Algorithm": "md5,sha1"]])
        try await proxy.add(["method": "PATCH", "skip": 1, "times": 2, "action": "respond", "status": 460])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"), retry: "30s")
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/f.bin", size: 700_000, seed: 12), to: "tus")
        let job = try await running.settled(id)
        #expect(job.state == .uploaded && job.attempts == 1, "\(job.lastError ?? "")")
        #expect(try storedDigest(job) == job.sha256)
        let patches = try await requests(proxy, "PATCH")
        #expect(patches.count == 5)
        #expect(patches.filter { $0["status"] as? Int == 460 }.count == 2)
        for patch in patches where patch["status"] as? Int == 204 {
            let sent = (patch["headers"] as? [String: String])?["upload-checksum"]
            #expect(sent == "sha1 \(patch["sha1"] as? String ?? "?")")
        }

        try await proxy.add(["method": "PATCH", "action": "respond", "status": 460, "times": -1])
        let before = try await requests(proxy, "PATCH").count
        let capped = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/g.bin", size: 300_000, seed: 13), to: "tus")
        let failed = try await running.wait(capped) { $0.state == .failed }
        await running.stop()
        #expect(failed.lastError?.contains("460") == true, "\(failed.lastError ?? "")")
        #expect(try await requests(proxy, "PATCH").count - before == 4)
    }

    @Test("relative, absolute and cross-host Location headers all work (10)", arguments: ["relative", "absolute", "cross-host"])
    func locations(kind: String) async throws {
        let proxy = try await proxy()
        let tus = try TestServers.authority(try TestServers.tusEndpoint())
        switch kind {
        case "relative": try await proxy.add(["method": "POST", "action": "rewrite", "location": "relative"])
        case "cross-host": try await proxy.add(["method": "POST", "action": "rewrite", "location": "authority:\(tus)"])
        default: break
        }
        let sandbox = try sandbox(endpoint: proxy.url("/files/"))
        let (job, _) = try await sandbox.uploadOne("f.bin", size: 600_000, seed: 14, to: "tus")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try storedDigest(job) == job.sha256)
        let patches = try await requests(proxy, "PATCH").count
        if kind == "cross-host" {
            #expect(job.remoteURL?.contains(tus) == true)
            #expect(patches == 0)
        } else {
            #expect(job.remoteURL?.hasPrefix(proxy.url("/files/")) == true)
            #expect(patches == 3)
        }
    }

    @Test("a file over Tus-Max-Size fails before any data is sent (13)")
    func maximumSize() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "OPTIONS", "action": "rewrite", "set_headers": ["Tus-Max-Size": "4096"]])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"))
        let (job, _) = try await sandbox.uploadOne("f.bin", size: 5000, seed: 15, to: "tus")
        #expect(job.state == .failed && job.permanent)
        #expect(job.lastError?.contains("Tus-Max-Size") == true, "\(job.lastError ?? "")")
        #expect(try await proxy.bodyBytes() == 0)
        #expect(try await requests(proxy, "POST").isEmpty)
    }

    @Test("a stalled PATCH is aborted after the stall window, then resynced and resumed (14)")
    func stall() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "PATCH", "skip": 1, "action": "stall", "after_bytes": 100_000, "seconds": 40])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"))
        let running = try RunningQueue(sandbox)
        let started = ContinuousClock.now
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/f.bin", size: 800_000, seed: 16), to: "tus")
        let job = try await running.settled(id)
        let attempts = try running.attempts(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        // Waiting the stall out would take 40 s; the bound leaves a loaded machine room for the resync.
        #expect(ContinuousClock.now - started < .seconds(39))
        #expect(try storedDigest(job) == job.sha256)
        #expect(attempts.first?.error?.contains("stalled") == true, "\(attempts.map { $0.error ?? "-" })")
        #expect(attempts.count == 2)
        #expect(try await requests(proxy, "HEAD").count == 1)
    }

    @Test("5xx retries on the schedule and honours Retry-After (15)")
    func serverErrors() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "PATCH", "skip": 1, "times": 2, "action": "respond", "status": 503,
                             "headers": ["Retry-After": "1"], "body": "<html><body><h1>busy</h1></body></html>"])
        let sandbox = try sandbox(endpoint: proxy.url("/files/"))
        let (job, attempts) = try await sandbox.uploadOne("f.bin", size: 800_000, seed: 17, to: "tus")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try storedDigest(job) == job.sha256)
        #expect(attempts.count == 3)
        #expect(attempts.prefix(2).allSatisfy { $0.error?.contains("HTTP 503") == true && $0.error?.contains("busy") == true })
        #expect(attempts.prefix(2).allSatisfy { $0.error?.contains("<h1>") == false })
        for (earlier, later) in zip(attempts, attempts.dropFirst()) {
            let gap = later.startedAt.timeIntervalSince(try #require(earlier.endedAt))
            #expect(gap >= 0.95, "Retry-After 1 must win over the 300 ms schedule: \(gap)")
        }
    }

    @Test("a reference file changed between runs is refused and its old upload terminated (21)")
    func sourceChanged() async throws {
        let proxy = try await proxy()
        try await proxy.add(["method": "PATCH", "skip": 1, "action": "reset", "after_bytes": 0, "times": 2])
        // The file changes while the job waits for its retry: a wait long enough for a loaded machine to see the
        // failure and write the file before the retry comes.
        let sandbox = try sandbox(endpoint: proxy.url("/files/"), retry: "4s")
        let path = try sandbox.makeFile(sandbox.root + "/ref.bin", size: 900_000, seed: 18)
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(path, to: "tus", mode: .reference)
        let interrupted = try await running.wait(id) { $0.state == .failed }
        let upload = try #require(TusResumeState(json: interrupted.resumeState)).uploadURL
        try sandbox.makeFile(path, size: 900_000, seed: 19)
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .failed && job.permanent)
        #expect(job.lastError?.contains("source changed") == true, "\(job.lastError ?? "")")
        #expect(job.resumeState == nil)
        let deletes = try await requests(proxy, "DELETE")
        #expect(deletes.count == 1 && deletes.first?["status"] as? Int == 204)
        #expect(!FileManager.default.fileExists(atPath: try TestServers.tusStoredFile(uploadURL: upload)))
    }

    @Test("cancelling a transfer in progress terminates the remote upload (DELETE)")
    func cancelTerminates() async throws {
        let proxy = try await proxy()
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(proxy.url("/files/"))"
            chunk_size = "64KiB"
            """, bandwidth: 256 << 10)
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/f.bin", size: 4 << 20, seed: 20), to: "tus")
        let started = try await running.wait(id) { $0.bytesConfirmed > 0 }
        let upload = try #require(TusResumeState(json: started.resumeState)).uploadURL
        #expect(try await running.queue.cancel(id) == .requested)
        #expect(try await eventually { try running.queue.store.job(id) == nil })
        await running.stop()
        #expect(try await eventually { try await requests(proxy, "DELETE").count == 1 })
        #expect(!FileManager.default.fileExists(atPath: try TestServers.tusStoredFile(uploadURL: upload)))
    }
}
