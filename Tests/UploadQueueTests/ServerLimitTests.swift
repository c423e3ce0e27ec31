import Foundation
import Synchronization
import Testing
@testable import UploadQueue

/// A server (or a proxy in front of it) that caps request bodies with 413: chunked protocols halve their requests
/// and keep the size that passes across files and restarts; a whole-file upload over a refused size fails for
/// good, naming it, without sending the bytes again.
struct ServerLimitTests {
    static let cap = 3 << 20

    @Test("tus behind a 3 MiB body cap: 8 MiB and 4 MiB PATCHes refused, 2 MiB ones pass; status shows it; a restart keeps it")
    func tusHalves() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        try await proxy.add(["method": "PATCH", "action": "respond", "status": 413, "min_length": Self.cap + 1,
                             "times": -1])
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(proxy.url("/files/"))"
            chunk_size = "8MiB"
            """)
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/v.mov", size: 40 << 20, seed: 81),
                                           to: "tus")
        let job = try await running.settled(id, timeout: .seconds(90))
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: try #require(job.remoteURL))) == job.sha256)
        let patches = try await proxy.requests().filter { $0["method"] as? String == "PATCH" }
        #expect(patches.filter { $0["status"] as? Int == 413 }.count == 2, "\(patches.map { $0["status"] ?? 0 })")
        #expect(try await running.queue.status().requestLimits["tus"]?.chunkCap == 2 << 20)
        await running.stop()
        #expect(try running.attempts(id).count == 1, "the 413s are handled inside one attempt")

        // The CLI (another process) sees it, and a new run starts at the learnt size.
        let status = try await BinaryRunner.run(["status", "--config", sandbox.configPath])
        #expect(status.stdout.contains("tus: chunks of at most 2.0 MiB"), "\(status.stdout)")
        let json = try #require(try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath]).json()
            as? [String: Any])
        #expect((json["request_limits"] as? [String: [String: Any]])?["tus"]?["chunk_cap"] as? Int == 2 << 20)
        let again = try RunningQueue(sandbox)
        let before = try await proxy.requests().count
        let second = try await again.enqueue(try sandbox.makeFile(sandbox.root + "/w.mov", size: 5 << 20, seed: 82),
                                             to: "tus")
        #expect(try await again.settled(second).state == .uploaded)
        await again.stop()
        let later = try await proxy.requests().dropFirst(before)
        #expect(!later.contains { $0["status"] as? Int == 413 }, "no 413 after the restart")
    }

    @Test("a whole-file PUT refused with 413: failed for good naming the size; a larger file then waits without its bytes")
    func wholeFile() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL()))
        try await proxy.add(["method": "PUT", "action": "respond", "status": 413, "min_length": 1 << 20, "times": -1])
        let sandbox = try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(proxy.url("/limits/{job_id}-{name}"))"
            """)
        let running = try RunningQueue(sandbox)
        let big = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/big.raw", size: 2 << 20, seed: 83),
                                            to: "dav")
        let bigJob = try await running.settled(big)
        #expect(bigJob.state == .failed && bigJob.permanent)
        #expect(bigJob.lastError?.contains("2097152 bytes") == true && bigJob.lastError?.contains("413") == true,
                "\(bigJob.lastError ?? "")")
        let puts = try await proxy.requests().filter { $0["method"] as? String == "PUT" }.count
        let bigger = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/bigger.raw", size: 3 << 20, seed: 84),
                                               to: "dav")
        let small = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/small.jpg", size: 500_000, seed: 85),
                                              to: "dav")
        // Remembered for an hour: the larger file waits (a transient failure) without sending a byte.
        let biggerJob = try await running.wait(bigger) { $0.failures >= 1 }
        let smallJob = try await running.settled(small)
        await running.stop()
        #expect(biggerJob.state == .failed && !biggerJob.permanent)
        #expect(biggerJob.lastError?.contains("nothing was sent") == true, "\(biggerJob.lastError ?? "")")
        #expect(biggerJob.nextAttemptAt.map { $0.timeIntervalSinceNow > 3000 } == true,
                "it is tried again once the refusal is an hour old")
        #expect(smallJob.state == .uploaded, "\(smallJob.lastError ?? "")")
        let after = try await proxy.requests().filter { $0["method"] as? String == "PUT" }
        #expect(after.count == puts + 1, "only the small file went out")
        #expect(try await running.queue.status().requestLimits["dav"]?.refusedAt == 2 << 20)
    }

    @Test("S3 parts refused with 413 above 6 MiB: the upload starts again with 5 MiB parts, the first one aborted")
    func s3Parts() async throws {
        let bucket = try await S3TestBucket.make()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(bucket.endpoint))
        try await proxy.add(["method": "PUT", "action": "respond", "status": 413, "min_length": 6 << 20, "times": -1])
        let sandbox = try Sandbox(destination: "s3", bucket.destination(endpoint: proxy.url(""), """
            part_size = "8MiB"
            multipart_threshold = "8MiB"
            """))
        let running = try RunningQueue(sandbox)
        let id = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/s3.mov", size: 20 << 20, seed: 86),
                                           to: "s3")
        let job = try await running.settled(id)
        let limits = try await running.queue.status().requestLimits
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let attempts = try running.attempts(id)
        #expect(attempts.count == 2 && attempts.first?.error?.contains("parts of 5242880 bytes") == true,
                "\(attempts.map { $0.error ?? "-" })")
        #expect(limits["s3"]?.chunkCap == 5 << 20)
        #expect(try await bucket.openUploads().isEmpty, "the upload with 8 MiB parts was aborted")
        let path = try await bucket.download("\(job.id)-s3.mov", to: NSTemporaryDirectory() + "/s3parts-\(job.id)")
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(try sha256(ofFile: path) == job.sha256)
    }

    @Test("a learnt limit is forgotten after its lifetime: a refusal after an hour, a chunk cap after a day")
    func lifetimes() {
        let learnt = Date(timeIntervalSince1970: 1_000_000)
        let limit = RequestLimit(chunkCap: 2 << 20, chunkCapLearntAt: learnt, refusedAt: 100 << 20,
                                 refusalLearntAt: learnt.addingTimeInterval(3000))
        #expect(limit.current(at: learnt.addingTimeInterval(60)) == limit)
        // Each number by its own time: the refusal, learnt later, outlives the first hour.
        #expect(limit.current(at: learnt.addingTimeInterval(3700)) == limit)
        #expect(limit.current(at: learnt.addingTimeInterval(2 * 3600))
                == RequestLimit(chunkCap: 2 << 20, chunkCapLearntAt: learnt))
        #expect(limit.current(at: learnt.addingTimeInterval(25 * 3600)) == RequestLimit())
        // Changes are kept (persisted) only when they lower what holds.
        let kept = Mutex<[RequestLimit]>([])
        let body = RequestBodyLimit(destination: "d", persist: { _, value in kept.withLock { $0.append(value) } })
        body.capChunks(at: 4 << 20)
        body.capChunks(at: 8 << 20)
        body.refused(10 << 20)
        body.refused(20 << 20)
        #expect(kept.withLock { $0.map(\.chunkCap) } == [4 << 20, 4 << 20])
        #expect(kept.withLock { $0.map(\.refusedAt) } == [nil, 10 << 20])
        #expect(body.chunkCap == 4 << 20 && body.refusedAt == 10 << 20)
    }
}
