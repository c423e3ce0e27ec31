import Foundation
import Testing
@testable import UploadQueue

/// The `uploadq` binary without a daemon: output shapes and the contract's exit codes
/// (0 ok, 1 failure, 2 usage, 3 not found, 4 no daemon).
struct CLITests {
    let sandbox: Sandbox

    init() throws {
        sandbox = try Sandbox()
    }

    func uploadq(_ arguments: String...) async throws -> BinaryRunner.Output {
        try await BinaryRunner.run(arguments + ["--config", sandbox.configPath])
    }

    func enqueue(_ size: Int, seed: UInt64, _ extra: String...) async throws -> String {
        let path = try sandbox.makeFile(sandbox.root + "/in-\(seed).bin", size: size, seed: seed)
        let output = try await BinaryRunner.run(["enqueue", path] + extra + ["--config", sandbox.configPath])
        #expect(output.status == 0, "enqueue: \(output.stderr)")
        return output.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test("list leaves out a row this version cannot read, names it on stderr, and lists the others")
    func listWithUnreadableRow() async throws {
        let first = try await enqueue(100, seed: 11)
        let second = try await enqueue(200, seed: 12)
        let queue = try QueueDatabase.open(path: try sandbox.configuration().databasePath)
        try await queue.writer.write { db in
            try db.execute(sql: "UPDATE job SET mode = 'mirror' WHERE id = ?", arguments: [first])
        }
        let list = try await uploadq("list", "--json")
        #expect(list.status == 0, "\(list.stderr)")
        let jobs = try #require(try list.json() as? [[String: Any]])
        #expect(jobs.compactMap { $0["id"] as? String } == [second])
        #expect(list.stderr.contains(first) && list.stderr.contains("column mode"), "\(list.stderr)")
    }

    @Test("enqueue prints one id per line; list shows the jobs newest first; show --json has the contract's keys")
    func enqueueListShow() async throws {
        let first = try await enqueue(100, seed: 1, "--meta", "record=r1", "--priority", "3")
        let second = try await enqueue(200, seed: 2)
        #expect(JobID(first) != nil && JobID(second) != nil)

        let list = try await uploadq("list", "--json")
        #expect(list.status == 0)
        let jobs = try #require(try list.json() as? [[String: Any]])
        #expect(jobs.compactMap { $0["id"] as? String } == [second, first])

        let show = try await uploadq("show", first, "--json")
        #expect(show.status == 0)
        let job = try #require(try show.json() as? [String: Any])
        for key in ["id", "state", "waiting_reason", "file", "original_name", "size", "sha256", "content_type",
                    "destination", "remote_url", "bytes_confirmed", "attempts", "last_error", "permanent",
                    "next_attempt_at", "created_at", "updated_at", "meta", "patch_state"] {
            #expect(job.keys.contains(key), "show --json lacks \(key)")
        }
        #expect(job["state"] as? String == "pending")
        #expect(job["size"] as? Int == 100)
        #expect((job["meta"] as? [String: String]) == ["record": "r1"])
        #expect(job["sha256"] as? String == (try sha256(ofFile: sandbox.root + "/in-1.bin")))

        let text = try await uploadq("list")
        #expect(text.status == 0 && text.stdout.contains(first) && text.stdout.contains("pending"))
    }

    @Test("the same content enqueued twice returns the first job's id")
    func dedupe() async throws {
        let path = try sandbox.makeFile(sandbox.root + "/same.bin", size: 300, seed: 9)
        let first = try await uploadq("enqueue", path, "--json")
        let second = try await uploadq("enqueue", path, "--json")
        let a = try #require(try first.json() as? [[String: Any]])
        let b = try #require(try second.json() as? [[String: Any]])
        #expect(a.first?["id"] as? String == b.first?["id"] as? String)
        #expect(b.first?["deduplicated"] as? Bool == true)
    }

    @Test("status without a daemon reports it stopped and counts the queue")
    func statusWithoutDaemon() async throws {
        _ = try await enqueue(1000, seed: 3)
        let output = try await uploadq("status", "--json")
        #expect(output.status == 0)
        let status = try #require(try output.json() as? [String: Any])
        #expect((status["daemon"] as? [String: Any])?["running"] as? Bool == false)
        #expect((status["counts"] as? [String: Int])?["pending"] == 1)
        #expect((status["bytes"] as? [String: Int])?["pending"] == 1000)
        #expect(((status["link"] as? [String: Any])?["class"] as? String) != nil)
        #expect(status["active"] is [Any])
        let text = try await uploadq("status")
        #expect(text.status == 0 && text.stdout.contains("not running"))
    }

    @Test("exit codes: unknown job 3, malformed id 2, bad option 2, retrying a pending job 1")
    func exitCodes() async throws {
        let unknown = JobID.generate().rawValue
        await #expect(try uploadq("show", unknown).status == 3)
        await #expect(try uploadq("retry", unknown).status == 3)
        await #expect(try uploadq("cancel", unknown).status == 3)
        let malformed = try await uploadq("show", "not-an-id")
        #expect(malformed.status == 2)
        #expect(malformed.stderr.contains("not a job id"))
        await #expect(try uploadq("list", "--state", "bogus").status == 2)
        await #expect(try uploadq("enqueue", "x", "--mode", "teleport").status == 2)
        await #expect(try uploadq("frobnicate").status == 2)

        let id = try await enqueue(10, seed: 4)
        let retry = try await uploadq("retry", id)
        #expect(retry.status == 1)
        #expect(retry.stderr.contains("pending"))
    }

    @Test("enqueue --wait without a daemon exits 4 and says to start one")
    func waitNeedsDaemon() async throws {
        let path = try sandbox.makeFile(sandbox.root + "/w.bin", size: 10, seed: 5)
        let output = try await uploadq("enqueue", path, "--wait")
        #expect(output.status == 4)
        #expect(output.stderr.contains("uploadq daemon"))
    }

    @Test("a missing file is refused with its path, exit 1, and nothing is queued")
    func missingFile() async throws {
        let output = try await uploadq("enqueue", sandbox.root + "/nope.jpg")
        #expect(output.status == 1)
        #expect(output.stderr.contains("nope.jpg"))
        let list = try await #require(try uploadq("list", "--json").json() as? [Any])
        #expect(list.isEmpty)
    }

    @Test("cancel of a pending job removes it and keeps the queue's copy under cancelled/")
    func cancelPending() async throws {
        let id = try await enqueue(500, seed: 6)
        let cancel = try await uploadq("cancel", id)
        #expect(cancel.status == 0, "\(cancel.stderr)")
        await #expect(try uploadq("show", id).status == 3)
        let kept = try FileManager.default.contentsOfDirectory(atPath: sandbox.state + "/cancelled")
        #expect(kept.contains { $0.hasPrefix(id) })
        let original = sandbox.root + "/in-6.bin"
        #expect(FileManager.default.fileExists(atPath: original), "copy mode must leave the original alone")
    }

    @Test("a config error names the file, the line and the key, and exits 1")
    func configError() async throws {
        try "state_dir = \"s\"\n[limits]\nconcurrency = \"many\"\n".write(toFile: sandbox.configPath, atomically: true, encoding: .utf8)
        let output = try await uploadq("status")
        #expect(output.status == 1)
        #expect(output.stderr.contains("\(sandbox.configPath):3: key `limits.concurrency`"))
    }

    @Test("help lists every subcommand")
    func help() async throws {
        let output = try await BinaryRunner.run(["--help"])
        #expect(output.status == 0)
        for command in ["daemon", "enqueue", "status", "list", "show", "retry", "cancel", "link"] {
            #expect(output.stdout.contains(command))
        }
    }

    @Test("enqueue --files-from - --null takes thousands of names from standard input in one batch")
    func filesFrom() async throws {
        let sandbox = try Sandbox()
        var names: [String] = []
        for index in 0..<1200 {
            names.append(try sandbox.makeFile(sandbox.root + "/many/f \(index).jpg", size: 100 + index, seed: UInt64(index)))
        }
        let list = sandbox.root + "/list"
        try Data((names.joined(separator: "\0") + "\0").utf8).write(to: URL(fileURLWithPath: list))
        let (exitCode, output, _) = try await ChildProcess.run(
            [BinaryRunner.path, "enqueue", "--files-from", "-", "--null", "--config", sandbox.configPath],
            executable: BinaryRunner.path, environment: ProcessInfo.processInfo.environment,
            input: .file(list))
        let printed = String(decoding: output, as: UTF8.self)
        #expect(exitCode == 0)
        #expect(printed.split(separator: "\n").count == 1200)
        let status = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        #expect(((try status.json() as? [String: Any])?["counts"] as? [String: Int])?["pending"] == 1200)
        let usage = try await BinaryRunner.run(["enqueue", "--null", "--config", sandbox.configPath])
        #expect(usage.status == 2)
    }

    @Test("contrib/install-cli-extras.sh installs man pages (one per command, uploadq.toml(5)) and completions")
    func manPageAndCompletions() async throws {
        let sandbox = try Sandbox()
        let prefix = sandbox.root + "/prefix"
        // `swift build --product generate-manual` names it generate-manual; the plugin, generate-manual-tool.
        let tool = ["generate-manual", "generate-manual-tool"].map { ConfigurationTests.repositoryRoot + "/.build/debug/" + $0 }
            .first { FileManager.default.isExecutableFile(atPath: $0) } ?? "generate-manual"
        #expect(FileManager.default.isExecutableFile(atPath: tool), "build it first: swift build --product generate-manual")
        let result = try await BinaryRunner.run(["bash", ConfigurationTests.repositoryRoot + "/contrib/install-cli-extras.sh", prefix],
                                          environment: ["UPLOADQ_BINARY": BinaryRunner.path, "GENERATE_MANUAL": tool],
                                          executable: "/bin/bash")
        #expect(result.status == 0, "\(result.stderr)")
        let manual = try String(contentsOfFile: prefix + "/share/man/man1/uploadq.1", encoding: .utf8)
        let bash = try String(contentsOfFile: prefix + "/share/bash-completion/completions/uploadq", encoding: .utf8)
        let zsh = try String(contentsOfFile: prefix + "/share/zsh/site-functions/_uploadq", encoding: .utf8)
        let fish = try String(contentsOfFile: prefix + "/share/fish/vendor_completions.d/uploadq.fish", encoding: .utf8)
        #expect(manual.contains(".Dt UPLOADQ 1"))
        for command in ["daemon", "enqueue", "status", "list", "show", "retry", "cancel", "link", "watch", "prune",
                        "events", "config", "doctor"] {
            #expect(manual.contains(".It Em \(command)"), "man page lacks \(command)")
            #expect(bash.contains(command) && zsh.contains(command) && fish.contains(command), "\(command)")
        }
        #expect(manual.contains("--patch-url") || manual.contains("patch-url"))
        // One page per subcommand, as git's: named uploadq-COMMAND, pointing at each other by those names.
        let pages = try FileManager.default.contentsOfDirectory(atPath: prefix + "/share/man/man1").sorted()
        for command in ["daemon", "enqueue", "status", "list", "show", "retry", "cancel", "link", "watch", "prune",
                        "events", "config", "config-check", "config-show", "config-reference", "doctor"] {
            #expect(pages.contains("uploadq-\(command).1"), "no page for \(command): \(pages)")
        }
        #expect(!pages.contains { $0.contains("help") || $0.hasPrefix("uploadq.") && $0 != "uploadq.1" }, "\(pages)")
        let config = try String(contentsOfFile: prefix + "/share/man/man1/uploadq-config.1", encoding: .utf8)
        #expect(config.contains(".Dt UPLOADQ-CONFIG 1") && config.contains(".Xr uploadq-config-check 1"), "\(config)")
        let keys = try String(contentsOfFile: prefix + "/share/man/man5/uploadq.toml.5", encoding: .utf8)
        #expect(keys == ConfigurationManual.manPage(version: UploadQueueVersion.current))
    }
}
