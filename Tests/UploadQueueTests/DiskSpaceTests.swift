import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// The free-space guard's decisions, without I/O.
struct FreeSpaceGuardTests {
    @Test("min_free_space takes sizes and percentages; the intake pauses below it, or when a copy would go below it")
    func verdicts() throws {
        #expect(FreeSpaceThreshold("256MiB") == .bytes(256 << 20))
        #expect(FreeSpaceThreshold(" 5% ") == .percent(5))
        #expect(FreeSpaceThreshold("0") == .bytes(0))
        #expect(FreeSpaceThreshold("150%") == nil)
        #expect(FreeSpaceThreshold("lots") == nil)
        #expect(FreeSpaceThreshold.percent(5).bytes(ofTotal: 1000) == 50)
        #expect(FreeSpaceThreshold.standard.description == "256.0 MiB")

        let space = DiskSpace(available: 300 << 20, total: 1 << 30)
        #expect(FreeSpaceGuard.verdict(space: space, threshold: .bytes(256 << 20), needed: 0, path: "/s") == nil)
        let copy = try #require(FreeSpaceGuard.verdict(space: space, threshold: .bytes(256 << 20), needed: 100 << 20, path: "/s"))
        #expect(copy.needed == 100 << 20)
        #expect("\(copy)".contains("a copy of 100.0 MiB would leave less than min_free_space (256.0 MiB)"), "\(copy)")
        let below = try #require(FreeSpaceGuard.verdict(space: space, threshold: .percent(50), needed: 0, path: "/s"))
        #expect("\(below)" == "the disk holding /s has 300.0 MiB free, below min_free_space (512.0 MiB)")
        // No floor: a full disk still pauses, and a copy that cannot fit at all is still refused.
        #expect(FreeSpaceGuard.verdict(space: DiskSpace(available: 0, total: 1 << 30), threshold: .bytes(0), needed: 0,
                                       path: "/s") != nil)
        #expect(FreeSpaceGuard.verdict(space: space, threshold: .bytes(0), needed: 400 << 20, path: "/s") != nil)
        #expect(FreeSpaceGuard.verdict(space: space, threshold: .bytes(0), needed: 200 << 20, path: "/s") == nil)
    }

    @Test("a bad min_free_space is a configuration error naming the key")
    func badThreshold() throws {
        for value in ["\"lots\"", "\"150%\"", "-1", "true"] {
            let sandbox = try Sandbox(limits: "min_free_space = \(value)")
            #expect {
                try sandbox.configuration()
            } throws: { error in
                "\(error)".contains("limits.min_free_space")
            }
        }
        let sandbox = try Sandbox(limits: "min_free_space = \"10%\"")
        #expect(try sandbox.configuration().limits.minFreeSpace == .percent(10))
        #expect(try Sandbox().configuration().limits.minFreeSpace == .standard)
    }
}

/// The queue on a small disk of its own (a tmpfs over the state directory): the intake pauses below
/// `min_free_space` and resumes by itself, and a disk that fills up while uploads finish loses nothing and sends
/// nothing twice.
@Suite(.serialized)
struct DiskFullTests {
    /// Writes zeros to `path` until the file system is full, to the last page (or `megabytes` are written).
    @discardableResult
    func fill(_ path: String, megabytes: Int? = nil) async throws -> BinaryRunner.Output {
        var arguments = ["dd", "if=/dev/zero", "of=\(path)", "bs=4k"]
        if let megabytes { arguments.append("count=\(megabytes * 256)") }
        return try await BinaryRunner.run(arguments, executable: "/bin/dd")
    }

    @Test("below min_free_space: copies and reference jobs are refused (exit 5), status explains; room comes back, both are taken")
    func intakePausesAndResumes() async throws {
        let sandbox = try Sandbox(limits: "min_free_space = \"20MiB\"")
        let disk = try await TmpfsMount(at: sandbox.state, size: "32m")
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let small = try sandbox.makeFile(sandbox.root + "/in/small.jpg", size: 10_000, seed: 301)
        let big = try sandbox.makeFile(sandbox.root + "/in/big.jpg", size: 6 << 20, seed: 302)

        // 32 MiB free: a 6 MiB copy fits above the floor.
        _ = try await queue.enqueue(big)
        try await fill(disk.path + "/filler", megabytes: 10)
        // About 16 MiB free now: below the floor.
        await #expect {
            try await queue.enqueue(small)
        } throws: { error in
            (error as? UploadQueueError)?.code == .diskLow && "\(error)".contains("min_free_space")
        }
        // A reference job writes no copy, but its row grows the database: refused all the same.
        await #expect {
            try await queue.enqueue(small, mode: .reference)
        } throws: { error in
            (error as? UploadQueueError)?.code == .diskLow
        }

        let cli = try await BinaryRunner.run(["enqueue", small, "--config", sandbox.configPath])
        #expect(cli.status == 5, "exit 5 for a disk that is low: \(cli.stderr)")
        #expect(cli.stderr.contains("below min_free_space (20.0 MiB)"), "\(cli.stderr)")
        let status = try await BinaryRunner.run(["status", "--config", sandbox.configPath])
        #expect(status.stdout.contains("intake:   paused: the disk holding \(sandbox.state)"), "\(status.stdout)")
        let json = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let diskJSON = try #require(document["disk"] as? [String: Any])
        #expect(diskJSON["intake_paused"] as? Bool == true)
        #expect((diskJSON["min_free_bytes"] as? Int) == 20 << 20)
        let metrics = try await BinaryRunner.run(["status", "--prometheus", "--config", sandbox.configPath])
        #expect(metrics.stdout.contains("uploadq_intake_paused 1"), "\(metrics.stdout)")

        unlink(disk.path + "/filler")
        let other = try sandbox.makeFile(sandbox.root + "/in/other.jpg", size: 10_000, seed: 304)
        let copied = try await queue.enqueue(EnqueueRequest(path: other))
        #expect(!copied.deduplicated, "with room again the copy is taken")
        let reference = try await queue.enqueue(small, mode: .reference)
        #expect(try await queue.job(reference)?.mode == .reference, "and a reference job")
        let after = try await BinaryRunner.run(["status", "--config", sandbox.configPath])
        #expect(!after.stdout.contains("intake:") && after.stdout.contains("disk:"), "\(after.stdout)")
    }

    @Test("the spool waits while the disk is low and takes its files by itself once there is room")
    func spoolWaitsForRoom() async throws {
        let sandbox = try Sandbox(limits: "min_free_space = \"20MiB\"")
        let disk = try await TmpfsMount(at: sandbox.state, size: "32m")
        try await fill(disk.path + "/filler", megabytes: 16)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        try FileManager.default.createDirectory(atPath: sandbox.spool, withIntermediateDirectories: true)
        let dropped = try sandbox.makeFile(sandbox.spool + "/photo.jpg", size: 50_000, seed: 303)
        let expected = try sha256(ofFile: dropped)
        let paused = await eventually(timeout: .seconds(20)) { daemon.log.contains("spool: intake paused") }
        #expect(paused, "daemon log:\n\(daemon.log.suffix(2000))")
        try await Task.sleep(for: .seconds(2))
        #expect(FileManager.default.fileExists(atPath: dropped), "the file stays in the spool while the disk is low")

        unlink(disk.path + "/filler")
        let delivered = await eventually(timeout: .seconds(20)) {
            ((try? FileManager.default.contentsOfDirectory(atPath: sandbox.target)) ?? []).contains { $0.hasSuffix("photo.jpg") }
        }
        #expect(delivered, "daemon log:\n\(daemon.log.suffix(2000))")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: sandbox.target).first { $0.hasSuffix("photo.jpg") })
        #expect(try sha256(ofFile: sandbox.target + "/" + name) == expected)
        #expect(daemon.log.contains("spool: there is room again"))
        #expect(await daemon.terminate() < .seconds(10))
    }

    @Test("a daemon started on a disk too full to open the queue waits, says why, and starts by itself once there is room")
    func startWaitsForRoom() async throws {
        let sandbox = try Sandbox(limits: "min_free_space = 0")
        let disk = try await TmpfsMount(at: sandbox.state, size: "16m")
        let path = try sandbox.makeFile(sandbox.root + "/in/a.jpg", size: 100_000, seed: 320)
        let enqueued = try await BinaryRunner.run(["enqueue", path, "--config", sandbox.configPath])
        #expect(enqueued.status == 0, "\(enqueued.stderr)")
        try await fill(disk.path + "/filler")
        // Whether SQLite can still open the queue on a full tmpfs depends on pages it happens to hold: either the
        // queue cannot be opened (exit 5; the daemon waits to open it) or it opens and cannot be written (the
        // daemon says so and waits). Both must end in a daemon that stays up, says why, and goes on by itself.
        let status = try await BinaryRunner.run(["status", "--config", sandbox.configPath])
        #expect(status.status == 0 || (status.status == 5 && status.stderr.contains("full")),
                "exit 5 for a disk too full to open the queue: \(status.status) \(status.stderr)")
        let daemon = try DaemonProcess(sandbox: sandbox)
        let waiting = await eventually(timeout: .seconds(20)) {
            daemon.log.contains("cannot open the queue yet") || daemon.log.contains("the disk is full")
        }
        #expect(waiting, "daemon log:\n\(daemon.log.suffix(2000))")
        try await Task.sleep(for: .seconds(1))
        #expect(daemon.isRunning, "it waits instead of exiting")
        unlink(disk.path + "/filler")
        let delivered = await eventually(timeout: .seconds(30)) {
            ((try? FileManager.default.contentsOfDirectory(atPath: sandbox.target)) ?? []).contains { $0.hasSuffix("a.jpg") }
        }
        #expect(delivered, "daemon log:\n\(daemon.log.suffix(2000))")
        #expect(await daemon.terminate() < .seconds(10))
    }

    @Test("the disk fills while uploads finish: the reserve records the first, the second waits in memory; nothing is sent twice")
    func successRecordedOnceThereIsRoom() async throws {
        let recorder = try RecorderSession()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.recorderURL()))
        try await proxy.add(["method": "PUT", "action": "hold", "seconds": 4, "times": 2])
        let sandbox = try Sandbox(config: """
            [destinations.api]
            protocol = "http-put"
            url = "\(proxy.url("/record/\(recorder.name)/{job_id}-{name}"))"
            """, concurrency: 1, limits: "min_free_space = 0")
        let disk = try await TmpfsMount(at: sandbox.state, size: "24m")
        var ids: [JobID] = []
        for index in 0..<2 {
            let path = try sandbox.makeFile(sandbox.root + "/in/p\(index).jpg", size: 100_000, seed: UInt64(310 + index))
            ids.append(try await BinaryRunner.enqueue([path, "--destination", "api", "--config", sandbox.configPath]))
        }
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let daemon = try DaemonProcess(sandbox: sandbox)
        let reserve = sandbox.state + "/space.reserve"
        #expect(await eventually { FileManager.default.fileExists(atPath: reserve) }, "the runner makes its reserve")
        func held(_ count: Int) async throws -> Bool {
            try await eventually(timeout: .seconds(30)) {
                try await proxy.requests().filter { $0["held"] as? Bool == true }.count >= count
            }
        }
        func puts(of id: JobID) async throws -> Int {
            try await recorder.requests().filter { ($0["path"] as? String ?? "").contains(id.rawValue) }.count
        }

        // 1. The server has the first file; the disk fills before the daemon hears so. Its first write fails,
        //    the reserve goes, and the success is recorded.
        #expect(try await held(1), "daemon log:\n\(daemon.log.suffix(2000))")
        try await fill(disk.path + "/filler-1")
        let first = try await eventually(timeout: .seconds(30)) { try store.job(ids[0])?.state == .uploaded }
        #expect(first, "daemon log:\n\(daemon.log.suffix(3000))")

        // 2. The second: the disk fills again and there is no reserve left. The success waits in memory (the
        //    row stays `uploading`, nothing is sent again), and is recorded once there is room.
        #expect(try await held(2), "daemon log:\n\(daemon.log.suffix(2000))")
        try await fill(disk.path + "/filler-2")
        let waiting = await eventually(timeout: .seconds(30)) {
            daemon.log.contains("cannot record the end of a transfer yet")
        }
        #expect(waiting, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(daemon.log.contains("released the space reserve"), "daemon log:\n\(daemon.log.suffix(3000))")
        try await Task.sleep(for: .seconds(2))
        #expect(try store.job(ids[1])?.state == .uploading, "not recorded while the disk is full")
        #expect(daemon.isRunning, "the daemon stays up")
        unlink(disk.path + "/filler-1")
        unlink(disk.path + "/filler-2")
        let second = try await eventually(timeout: .seconds(30)) { try store.job(ids[1])?.state == .uploaded }
        #expect(second, "daemon log:\n\(daemon.log.suffix(3000))")
        let requests = try await recorder.requests()
        for id in ids {
            let sent = try await puts(of: id)
            #expect(sent == 1, "each file reached the server once: \(sent) PUTs of \(id)\n\(requests)")
        }
        #expect(try store.jobs(state: .uploading).isEmpty)
        #expect(await daemon.terminate() < .seconds(10))
    }
}

/// The scheduler's view of a database that does not take writes: each cause said once, the reserve given back
/// on a full disk, the end of the spell said once it is really over.
struct StoreHealthTests {
    @Test("a spell of failures is reported once per cause, lasts until every unsettled end is recorded, then the reserve is looked at")
    func spell() {
        var health = StoreHealth(reserveInterval: .seconds(30))
        let start = ContinuousClock.now
        #expect(health.succeeded(unsettled: 0, at: start) == [.checkReserve])
        #expect(health.succeeded(unsettled: 0, at: start + .seconds(1)) == [], "the reserve is looked at every 30 s")
        #expect(health.failed("full", diskFull: true, at: start + .seconds(2)) == [.releaseReserve, .report("full", diskFull: true)])
        #expect(health.failed("full", diskFull: true, at: start + .seconds(3)) == [.releaseReserve], "said once")
        #expect(health.failed("locked", diskFull: false, at: start + .seconds(4)) == [.report("locked", diskFull: false)])
        #expect(health.hasLasted(.seconds(1), at: start + .seconds(4)))
        #expect(!health.hasLasted(.seconds(60), at: start + .seconds(4)))
        #expect(health.succeeded(unsettled: 1, at: start + .seconds(5)) == [], "not over while an end waits")
        #expect(health.succeeded(unsettled: 0, at: start + .seconds(40)) == [.recovered, .checkReserve])
        #expect(health.trouble == nil && !health.hasLasted(.zero, at: start + .seconds(41)))
    }
}
