import Foundation
import Testing
@testable import UploadQueue

/// End to end with the real `uploadq daemon` binary: spool intake by every kind of writer, kill -9 and SIGTERM
/// in the middle of a transfer, and bad input that must not stop the daemon.
@Suite(.serialized)
struct DaemonTests {
    func statusJSON(_ sandbox: Sandbox) async throws -> [String: Any] {
        let output = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        #expect(output.status == 0, "status failed: \(output.stderr)")
        return try #require(try output.json() as? [String: Any])
    }

    func count(_ state: String, _ sandbox: Sandbox) async throws -> Int {
        let counts = try await statusJSON(sandbox)["counts"] as? [String: Any]
        return counts?[state] as? Int ?? -1
    }

    func jobs(_ sandbox: Sandbox) async throws -> [[String: Any]] {
        let output = try await BinaryRunner.run(["list", "--json", "--config", sandbox.configPath])
        #expect(output.status == 0, "list failed: \(output.stderr)")
        return try #require(try output.json() as? [[String: Any]])
    }

    /// The local path behind a job's `remote_url` (a file:// URL for local-directory destinations).
    func remotePath(_ job: [String: Any]?) throws -> String {
        let text = try #require(job?["remote_url"] as? String, "job has no remote_url: \(String(describing: job))")
        let url = try #require(URL(string: text))
        #expect(url.isFileURL)
        return url.path
    }

    @Test("100 files dropped by cp, by rsync-style dot-name + rename, and by mv all arrive byte-identical")
    func spoolIntake() async throws {
        let sandbox = try Sandbox()
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox))
        let outside = sandbox.root + "/outside"
        var expected: [String: String] = [:]
        for index in 0..<100 {
            let name = "photo-\(index).jpg"
            let source = try sandbox.makeFile("\(outside)/\(name)", size: 1000 + index * 3000, seed: UInt64(100 + index))
            expected[name] = try sha256(ofFile: source)
            switch index % 3 {
            case 0:
                let cp = try await BinaryRunner.run(["/bin/cp", source, sandbox.spool + "/" + name], executable: "/bin/cp")
                #expect(cp.status == 0, "cp: \(cp.stderr)")
            case 1:
                let temporary = sandbox.spool + "/.\(name).XXXXXX"
                try FileManager.default.copyItem(atPath: source, toPath: temporary)
                #expect(rename(temporary, sandbox.spool + "/" + name) == 0)
            default:
                #expect(rename(source, sandbox.spool + "/" + name) == 0)
            }
        }
        let arrived = try await eventually(timeout: .seconds(90)) { try await count("uploaded", sandbox) == 100 }
        #expect(arrived, "daemon log:\n\(daemon.log.suffix(3000))")
        let listed = try await jobs(sandbox)
        #expect(listed.count == 100)
        for job in listed {
            let name = try #require(job["original_name"] as? String)
            #expect(try sha256(ofFile: try remotePath(job)) == expected[name], "\(name)")
            #expect(job["state"] as? String == "uploaded")
        }
        #expect(sandbox.deliveredFiles().count == 100)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: sandbox.spool).filter { $0 != ".rejected" }
        #expect(leftovers.isEmpty)
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("kill -9 mid-transfer: after restart the copy continues from the partial length and is byte-identical")
    func crashResume() async throws {
        let sandbox = try Sandbox(bandwidth: 4 << 20)
        let source = try sandbox.makeFile(sandbox.root + "/big.bin", size: 20 << 20, seed: 7)
        let expected = try sha256(ofFile: source)
        let id = try await BinaryRunner.enqueue([source, "--config", sandbox.configPath])
        let partial = sandbox.target + "/.uploadq-\(id).partial"

        let daemon = try DaemonProcess(sandbox: sandbox)
        let started = await eventually(timeout: .seconds(30)) {
            ((try? FileFingerprint.of(path: partial).size) ?? 0) >= 6 << 20
        }
        #expect(started, "daemon log:\n\(daemon.log.suffix(3000))")
        await daemon.kill9()
        let partialLength = try FileFingerprint.of(path: partial).size
        #expect(partialLength > 0 && partialLength < 20 << 20)
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        #expect(try await queue.job(id)?.state == .uploading, "a killed daemon leaves its row as it was")

        let restarted = try DaemonProcess(sandbox: sandbox, name: "daemon2")
        let finished = try await eventually(timeout: .seconds(60)) { try await queue.job(id)?.state == .uploaded }
        #expect(finished, "daemon log:\n\(restarted.log.suffix(3000))")
        let attempts = try await queue.attempts(of: id)
        #expect(attempts.count == 2)
        #expect(attempts.first?.outcome == "interrupted")
        #expect(attempts.last?.startOffset == partialLength, "the second attempt continues from the partial file's length")
        let job = try #require(try await queue.job(id))
        #expect(try sha256(ofFile: try #require(URL(string: job.remoteURL ?? "")).path) == expected)
        await #expect(try count("uploading", sandbox) == 0)
        #expect(!FileManager.default.fileExists(atPath: partial))
        #expect(await restarted.terminate() < .seconds(5))
    }

    @Test("SIGTERM during a transfer: exit within 5 s, job pending with its offset saved")
    func gracefulStop() async throws {
        let sandbox = try Sandbox(bandwidth: 2 << 20)
        let source = try sandbox.makeFile(sandbox.root + "/big.bin", size: 20 << 20, seed: 8)
        let id = try await BinaryRunner.enqueue([source, "--config", sandbox.configPath])
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(try await eventually(timeout: .seconds(30)) { (try await queue.job(id)?.bytesConfirmed ?? 0) >= 2 << 20 })
        let took = await daemon.terminate()
        #expect(took < .seconds(5))
        #expect(await daemon.exitStatus() == 0, "daemon log:\n\(daemon.log.suffix(2000))")
        let job = try #require(try await queue.job(id))
        #expect(job.state == .pending)
        #expect(job.bytesConfirmed >= 2 << 20 && job.bytesConfirmed < job.size)
        #expect(try await queue.attempts(of: id).last?.outcome == "interrupted")
        #expect(DaemonLock.holder(path: sandbox.state + "/daemon.lock") == nil)
    }

    @Test("bad spool input is rejected with a reason or handled safely, and the daemon stays up")
    func badInput() async throws {
        let sandbox = try Sandbox(spool: """
            sidecar_meta_keys = ["event", "n"]
            sidecar_max_priority = 2
            """)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox))
        let spool = sandbox.spool
        let rejected = spool + "/.rejected"

        let inside = try sandbox.makeFile(spool + "/.inside-target", size: 100, seed: 1)
        #expect(symlink(inside, spool + "/link-inside.jpg") == 0)
        let outsideTarget = try sandbox.makeFile(sandbox.root + "/secret.txt", size: 100, seed: 2)
        #expect(symlink(outsideTarget, spool + "/link-outside.jpg") == 0)
        #expect(mkfifo(spool + "/pipe.jpg", 0o600) == 0)
        try FileManager.default.createDirectory(atPath: spool + "/folder", withIntermediateDirectories: false)
        #expect(FileManager.default.createFile(atPath: spool + "/empty.jpg", contents: Data()))
        let linked = try sandbox.makeFile(sandbox.root + "/keep/linked.jpg", size: 50_000, seed: 3)
        #expect(link(linked, spool + "/linked.jpg") == 0)
        try Data("{\"destination\": ".utf8).write(to: URL(fileURLWithPath: spool + "/bad-sidecar.jpg.uploadq.json"))
        try sandbox.makeFile(sandbox.root + "/bad-sidecar.jpg", size: 100, seed: 4)
        #expect(rename(sandbox.root + "/bad-sidecar.jpg", spool + "/bad-sidecar.jpg") == 0)
        try Data("{\"destination\": \"default\", \"meta\": {\"event\": \"e-1\", \"n\": 3}, \"priority\": 2}".utf8)
            .write(to: URL(fileURLWithPath: spool + "/good.jpg.uploadq.json"))
        try sandbox.makeFile(sandbox.root + "/good.jpg", size: 100, seed: 5)
        #expect(rename(sandbox.root + "/good.jpg", spool + "/good.jpg") == 0)

        // A slow writer: 3 s of appends, then close. Nothing may be taken before the close.
        let slowPath = spool + "/slow.jpg"
        #expect(FileManager.default.createFile(atPath: slowPath, contents: nil))
        let writer = try FileHandle(forWritingTo: URL(fileURLWithPath: slowPath))
        var written = Data()
        for round in 0..<6 {
            let piece = Data(repeating: UInt8(round + 65), count: 10_000)
            writer.write(piece)
            written.append(piece)
            try await Task.sleep(for: .milliseconds(500))
            await #expect(try jobs(sandbox).allSatisfy { $0["original_name"] as? String != "slow.jpg" },
                    "slow.jpg was taken while still open for writing")
        }
        try writer.close()

        let settled = try await eventually(timeout: .seconds(30)) {
            let names = await Set(try jobs(sandbox).compactMap { $0["original_name"] as? String })
            let uploaded = try await count("uploaded", sandbox)
            return names.isSuperset(of: ["empty.jpg", "linked.jpg", "good.jpg", "slow.jpg"]) && uploaded == 4
                && ["link-inside.jpg", "link-outside.jpg", "pipe.jpg", "folder", "bad-sidecar.jpg"].allSatisfy {
                    FileManager.default.fileExists(atPath: rejected + "/\($0).reason.txt")
                }
        }
        #expect(settled, "daemon log:\n\(daemon.log.suffix(4000))")
        #expect(daemon.isRunning)

        var info = stat()
        #expect(lstat(rejected + "/link-outside.jpg", &info) == 0 && info.st_mode & S_IFMT == S_IFLNK)
        #expect(FileManager.default.fileExists(atPath: outsideTarget), "the symlink's target is untouched")
        #expect(FileManager.default.fileExists(atPath: rejected + "/bad-sidecar.jpg.uploadq.json"))
        let reason = try String(contentsOfFile: rejected + "/bad-sidecar.jpg.reason.txt", encoding: .utf8)
        #expect(reason.contains("sidecar"))
        #expect(try String(contentsOfFile: rejected + "/pipe.jpg.reason.txt", encoding: .utf8).contains("FIFO"))
        #expect(FileManager.default.fileExists(atPath: linked), "the other hard link keeps its file")

        let byName = await Dictionary(uniqueKeysWithValues: try jobs(sandbox).map { ($0["original_name"] as? String ?? "", $0) })
        #expect(byName["empty.jpg"]?["size"] as? Int == 0)
        #expect(byName["good.jpg"]?["meta"] as? [String: String] == ["event": "e-1", "n": "3"])
        let slow = try #require(byName["slow.jpg"])
        #expect(slow["size"] as? Int == written.count)
        #expect(try Data(contentsOf: URL(fileURLWithPath: try remotePath(slow))) == written)
        #expect(try sha256(ofFile: try remotePath(byName["linked.jpg"])) == (try sha256(ofFile: linked)))
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("with a daemon running: enqueue --wait wakes it at once and returns 0; cancel stops a transfer")
    func cliWithDaemon() async throws {
        let sandbox = try Sandbox(bandwidth: 1 << 20)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox))
        // The scheduler polls every 5 s; finishing well inside that proves the CLI's wake-up reached the daemon.
        let small = try sandbox.makeFile(sandbox.root + "/small.jpg", size: 10_000, seed: 11)
        let clock = ContinuousClock()
        let start = clock.now
        let waited = try await BinaryRunner.run(["enqueue", small, "--wait", "--config", sandbox.configPath])
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(clock.now - start < .seconds(3))
        let id = waited.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        await #expect(try jobs(sandbox).first { $0["id"] as? String == id }?["state"] as? String == "uploaded")

        let big = try sandbox.makeFile(sandbox.root + "/big.bin", size: 30 << 20, seed: 12)
        let enqueued = try await BinaryRunner.run(["enqueue", big, "--config", sandbox.configPath])
        let bigID = enqueued.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let moving = try await eventually(timeout: .seconds(20)) {
            try await jobs(sandbox).first { $0["id"] as? String == bigID }?["state"] as? String == "uploading"
        }
        #expect(moving)
        let cancel = try await BinaryRunner.run(["cancel", bigID, "--config", sandbox.configPath])
        #expect(cancel.status == 0, "\(cancel.stderr)")
        #expect(cancel.stdout.contains("cancelled"))
        #expect(try await BinaryRunner.run(["show", bigID, "--config", sandbox.configPath]).status == 3)
        #expect(!sandbox.deliveredFiles().contains { $0.hasSuffix("big.bin") })
        let partials = try FileManager.default.contentsOfDirectory(atPath: sandbox.target).filter { $0.hasSuffix(".partial") }
        #expect(partials.isEmpty, "the cancelled transfer's partial file is removed")
        #expect(FileManager.default.fileExists(atPath: big))
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("a second daemon on the same state directory exits 1 with a clear message")
    func secondDaemon() async throws {
        let sandbox = try Sandbox()
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox))
        let second = try await BinaryRunner.run(["daemon", "--config", sandbox.configPath])
        #expect(second.status == 1)
        #expect(second.stderr.contains("already runs this queue"))
        #expect(second.stderr.contains("pid \(daemon.pid)"))
        let status = try await statusJSON(sandbox)
        #expect((status["daemon"] as? [String: Any])?["pid"] as? Int == Int(daemon.pid))
        #expect(await daemon.terminate() < .seconds(5))
    }
}
