import Foundation
import Testing
@testable import UploadQueue

/// The daemon binary with network destinations: secrets stay out of every output, and a cancelled job's
/// partial remote upload is terminated whether or not a daemon runs.
@Suite(.serialized)
struct NetworkDaemonTests {
    @Test("tokens and header values never appear in the daemon's log, status, list or show")
    func secretsStayHidden() async throws {
        let recorder = try RecorderSession()
        try await recorder.script([["status": 401], ["status": 401, "body": "invalid token"]])
        let sandbox = try Sandbox(destination: "api", """
            protocol = "http-post"
            url = "\(recorder.url())"
            token_env = "UPLOADQ_TEST_SECRET"
            headers = { "X-Api-Key" = "key-HEADER-456" }
            """)
        let daemon = try DaemonProcess(sandbox: sandbox, environment: ["UPLOADQ_TEST_SECRET": "tok-SECRET-123"])
        let path = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 1000, seed: 70)
        let enqueued = try await BinaryRunner.run(["enqueue", path, "--destination", "api", "--config", sandbox.configPath])
        let id = enqueued.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let failed = try await eventually {
            try await BinaryRunner.run(["show", id, "--json", "--config", sandbox.configPath]).stdout.contains("\"failed\"")
        }
        #expect(failed, "daemon log:\n\(daemon.log.suffix(2000))")
        let sent = try await recorder.requests().compactMap { ($0["headers"] as? [String: String])?["authorization"] }
        #expect(sent == ["Bearer tok-SECRET-123", "Bearer tok-SECRET-123"])
        #expect(await daemon.terminate() < .seconds(5))
        var outputs = [daemon.log]
        for command in [["show", id, "--json"], ["show", id], ["list", "--json"], ["status", "--json"], ["status"]] {
            outputs.append(try await BinaryRunner.run(command + ["--config", sandbox.configPath]).stdout)
        }
        #expect(outputs[1].contains("HTTP 401") && outputs[1].contains("invalid token"))
        for output in outputs {
            #expect(!output.contains("tok-SECRET-123") && !output.contains("key-HEADER-456"))
        }
    }

    @Test("cancelling a pending job with a partial tus upload terminates it, by the daemon or by the CLI itself",
          arguments: [true, false])
    func cancelPartialUpload(daemonRunning: Bool) async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        try await proxy.add(["method": "PATCH", "skip": 1, "times": 2, "action": "reset", "after_bytes": 0])
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(proxy.url("/files/"))"
            chunk_size = "256KiB"
            """, retry: "30s")
        let path = try sandbox.makeFile(sandbox.root + "/a.bin", size: 1_000_000, seed: 71)
        let id = try await BinaryRunner.enqueue([path, "--destination", "tus", "--config", sandbox.configPath])
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        var daemon = try DaemonProcess(sandbox: sandbox)
        #expect(try await eventually { try store.job(id)?.state == .failed })
        let upload = try #require(TusResumeState(json: try store.job(id)?.resumeState)).uploadURL
        if !daemonRunning { #expect(await daemon.terminate() < .seconds(5)) }

        let cancelled = try await BinaryRunner.run(["cancel", id.rawValue, "--config", sandbox.configPath])
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        #expect(try await eventually { try store.job(id) == nil })
        #expect(try await eventually {
            try await proxy.requests().contains { $0["method"] as? String == "DELETE" && $0["status"] as? Int == 204 }
        }, "daemon log:\n\(daemon.log.suffix(2000))")
        #expect(!FileManager.default.fileExists(atPath: try TestServers.tusStoredFile(uploadURL: upload)))
        #expect(FileManager.default.fileExists(atPath: sandbox.state + "/cancelled/\(id)-a.bin"))
        if daemonRunning { #expect(await daemon.terminate() < .seconds(5)) }
        daemon = try DaemonProcess(sandbox: sandbox, name: "after")
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("daemon --exit-when-idle drains the queue to nginx DAV, then exits 0 (batch use)")
    func exitWhenIdle() async throws {
        let sandbox = try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(try TestServers.davURL())/batch/{job_id}-{name}"
            """)
        var ids: [String] = []
        for index in 0..<3 {
            let path = try sandbox.makeFile(sandbox.root + "/p\(index).jpg", size: 50_000 * (index + 1), seed: UInt64(72 + index))
            let enqueued = try await BinaryRunner.run(["enqueue", path, "--destination", "dav", "--config", sandbox.configPath])
            ids.append(enqueued.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let run = try await BinaryRunner.run(["daemon", "--exit-when-idle", "--config", sandbox.configPath])
        #expect(run.status == 0, "\(run.stderr.suffix(2000))")
        let status = try #require(try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath]).json()
            as? [String: Any])
        #expect((status["counts"] as? [String: Int])?["uploaded"] == 3)
        #expect((status["daemon"] as? [String: Any])?["running"] as? Bool == false)
        for id in ids {
            let stored = try FileManager.default.contentsOfDirectory(atPath: try TestServers.davRoot() + "/batch")
                .filter { $0.hasPrefix(id) }
            #expect(stored.count == 1)
        }
    }

    @Test("the daemon keeps what its threads free: 300 small files drain with almost no madvise (glibc's trimming made two a file)")
    func allocatorKeepsFreedMemory() async throws {
        let strace = "/usr/bin/strace"
        try #require(FileManager.default.isExecutableFile(atPath: strace), "strace is missing: contrib/test-servers/setup.sh installs it")
        let sandbox = try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(try TestServers.davURL())/allocator/{job_id}-{name}"
            """)
        let files = try (0..<300).map { try sandbox.makeFile(sandbox.root + "/in/f\($0).bin", size: 8 << 10, seed: UInt64($0)) }
        try files.joined(separator: "\n").write(toFile: sandbox.root + "/list", atomically: true, encoding: .utf8)
        let enqueued = try await BinaryRunner.run(["enqueue", "--mode", "reference", "--files-from", sandbox.root + "/list",
                                                   "--destination", "dav", "--config", sandbox.configPath])
        #expect(enqueued.status == 0, "\(enqueued.stderr)")
        let trace = sandbox.root + "/madvise.trace"
        // `--seccomp-bpf`: only the traced call stops the daemon, so it runs at nearly its own pace. The time limit
        // is inside: a daemon that hangs is ended, and strace with it (killing strace would leave the daemon running).
        let drained = try await BinaryRunner.run([strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=madvise", "-o", trace,
                                                  "/usr/bin/timeout", "-k", "10", "120", BinaryRunner.path, "daemon",
                                                  "--exit-when-idle", "--config", sandbox.configPath],
                                                 executable: strace)
        #expect(drained.status == 0, "\(drained.stderr.suffix(2000))")
        let status = try #require(try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath]).json()
            as? [String: Any])
        #expect((status["counts"] as? [String: Int])?["uploaded"] == 300)
        // What is left: thread stacks given back as threads end, a few allocations of 1 MiB or more.
        let calls = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").filter { $0.contains("madvise(") }
        #expect(calls.count < 30, "\(calls.count) madvise calls for 300 files:\n\(calls.prefix(20).joined(separator: "\n"))")
    }
}
