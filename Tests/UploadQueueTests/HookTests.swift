import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// `[hooks]` as durable outbox consumers, run by the real daemon: once per job, again after a crash during the run,
/// killed at the deadline and retried, output capped, never changing the job; and the v12 migration of patches.
@Suite(.serialized)
struct HookTests {
    /// A sandbox whose hooks run `script` (written as an executable shell script), with `extra` [hooks] keys.
    func sandbox(onUploaded script: String? = nil, onFailed: String? = nil, extra: String = "",
                 destination: String = "") throws -> (Sandbox, String) {
        let probe = try Sandbox()
        let dir = probe.root
        var keys = ""
        for (key, body) in [("on_uploaded", script), ("on_failed", onFailed)] {
            guard let body else { continue }
            let path = "\(dir)/\(key).sh"
            try "#!/bin/sh\n\(body)\n".write(toFile: path, atomically: true, encoding: .utf8)
            #expect(chmod(path, 0o755) == 0)
            keys += "\(key) = [\"\(path)\", \"--from-config\"]\n"
        }
        let sandbox = try Sandbox(config: "\(destination)\n[hooks]\n\(keys)\(extra)", retryInterval: "1s")
        // The scripts live beside the sandbox's own files: keep the probe's folder alive with it.
        try FileManager.default.moveItem(atPath: dir, toPath: sandbox.root + "/hooks")
        let config = try String(contentsOfFile: sandbox.configPath, encoding: .utf8)
            .replacingOccurrences(of: dir + "/", with: sandbox.root + "/hooks/")
        try config.write(toFile: sandbox.configPath, atomically: true, encoding: .utf8)
        return (sandbox, sandbox.root + "/hooks")
    }

    func store(_ sandbox: Sandbox) throws -> QueueStore {
        QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
    }

    func hookEntries(_ store: QueueStore, _ id: JobID) throws -> [OutboxEntry] {
        try store.outboxEntries(id).filter { $0.consumer != .patch }
    }

    @Test("on_uploaded runs exactly once per job, with the job's JSON, a scrubbed environment and no descriptors")
    func oncePerJob() async throws {
        let (sandbox, hooks) = try sandbox(onUploaded: """
            here="$(dirname "$0")"
            ls -l /proc/$$/fd > "$here/fds-$UPLOADQ_JOB_ID"
            json="$(tr -d '\\n')"
            line="run $UPLOADQ_JOB_ID $UPLOADQ_EVENT $UPLOADQ_HOOK_ATTEMPT $1 secret=${UPLOADQ_HOOK_TEST_SECRET:-none} json=$json"
            echo "$line" >> "$here/runs"
            """)
        let daemon = try DaemonProcess(sandbox: sandbox, environment: ["UPLOADQ_HOOK_TEST_SECRET": "do-not-pass"])
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        for index in 0..<5 {
            try sandbox.makeFile(sandbox.root + "/f\(index)", size: 3000 + index, seed: UInt64(index + 1))
            #expect(rename(sandbox.root + "/f\(index)", sandbox.spool + "/photo\(index).jpg") == 0)
        }
        let store = try store(sandbox)
        let settled = try await eventually(timeout: .seconds(30)) {
            let jobs = try store.jobs()
            let done = try store.outboxCounts()[.hook(.uploaded)]?[.done] ?? 0
            return jobs.count == 5 && jobs.allSatisfy { $0.state == .uploaded } && done == 5
        }
        #expect(settled, "daemon log:\n\(daemon.log.suffix(3000))")
        // A moment more: a second run would show now.
        try await Task.sleep(for: .milliseconds(1500))
        #expect(await daemon.terminate() < .seconds(5))
        let runs = try String(contentsOfFile: hooks + "/runs", encoding: .utf8).split(separator: "\n")
        let jobs = try store.jobs()
        #expect(runs.count == 5, "\(runs)")
        for job in jobs {
            let lines = runs.filter { $0.hasPrefix("run \(job.id.rawValue) ") }
            #expect(lines.count == 1, "job \(job.id): \(lines)")
            guard let line = lines.first else { continue }
            #expect(line.contains(" uploaded 1 --from-config secret=none "), "\(line)")
            // Its descriptors: its standard input, output and error (pipes), and nothing of the daemon's.
            let fds = try String(contentsOfFile: hooks + "/fds-\(job.id.rawValue)", encoding: .utf8)
            for name in ["queue.sqlite", "daemon.lock", "socket:", sandbox.state, sandbox.spool] {
                #expect(!fds.contains(name), "the hook inherited a descriptor of the daemon (\(name)):\n\(fds)")
            }
            let json = try #require(line.range(of: "json=").map { String(line[$0.upperBound...]) })
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
            #expect(object["event"] as? String == "uploaded")
            #expect(object["id"] as? String == job.id.rawValue)
            #expect(object["state"] as? String == "uploaded")
            #expect(object["remote_url"] as? String == job.remoteURL)
            #expect(object["sha256"] as? String == job.sha256)
            #expect(try hookEntries(store, job.id).map(\.attempts) == [1])
        }
        let status = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let counts = ((try status.json() as? [String: Any])?["hooks"] as? [String: Any])?["on_uploaded"] as? [String: Int]
        #expect(counts?["done"] == 5, "\(status.stdout)")
    }

    @Test("a hook runs again after the daemon is killed while it runs (at least once)")
    func killedDuringHook() async throws {
        let (sandbox, hooks) = try sandbox(onUploaded: """
            here="$(dirname "$0")"
            echo "start $UPLOADQ_JOB_ID $UPLOADQ_HOOK_ATTEMPT" >> "$here/runs"
            if [ ! -e "$here/first" ]; then touch "$here/first"; sleep 20; fi
            echo "end $UPLOADQ_JOB_ID" >> "$here/runs"
            """)
        let first = try DaemonProcess(sandbox: sandbox)
        #expect(await first.waitUntilReady(sandbox))
        try sandbox.makeFile(sandbox.root + "/x", size: 5000, seed: 9)
        #expect(rename(sandbox.root + "/x", sandbox.spool + "/x.jpg") == 0)
        let running = await eventually(timeout: .seconds(30)) { FileManager.default.fileExists(atPath: hooks + "/first") }
        #expect(running, "daemon log:\n\(first.log.suffix(3000))")
        await first.kill9()
        // The killed run is still asleep in its own process group: stopped here, as a reboot would.
        _ = try? await BinaryRunner.run(["pkill", "-f", hooks + "/on_uploaded.sh"], executable: "/usr/bin/pkill")

        let second = try DaemonProcess(sandbox: sandbox, name: "second")
        #expect(await second.waitUntilReady(sandbox))
        let store = try store(sandbox)
        let id = try #require(try store.jobs().first?.id)
        let done = try await eventually(timeout: .seconds(30)) { try hookEntries(store, id).first?.state == .done }
        #expect(done, "second daemon log:\n\(second.log.suffix(3000))")
        #expect(await second.terminate() < .seconds(5))
        let runs = try String(contentsOfFile: hooks + "/runs", encoding: .utf8).split(separator: "\n")
        #expect(runs.filter { $0.hasPrefix("start \(id.rawValue)") }.count == 2, "\(runs)")
        #expect(runs.filter { $0 == "end \(id.rawValue)" }.count == 1, "\(runs)")
        #expect(try store.job(id)?.state == .uploaded)
    }

    @Test("a hook that hangs is killed at its deadline, its processes with it (one in a session of its own too), and retried")
    func hangingHook() async throws {
        // The first run leaves a process in a session of its own (setsid: out of its group) and hangs; the second
        // leaves one the same way and ends.
        let (sandbox, hooks) = try sandbox(onUploaded: """
            here="$(dirname "$0")"
            echo "start $UPLOADQ_HOOK_ATTEMPT" >> "$here/runs"
            if [ ! -e "$here/first" ]; then
                touch "$here/first"; setsid sleep 6011 > /dev/null 2>&1 & sleep 600 & wait
            fi
            setsid sleep 6022 > /dev/null 2>&1 &
            """, extra: "timeout = \"1s\"\n")
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox))
        try sandbox.makeFile(sandbox.root + "/x", size: 5000, seed: 10)
        #expect(rename(sandbox.root + "/x", sandbox.spool + "/x.jpg") == 0)
        let store = try store(sandbox)
        let done = try await eventually(timeout: .seconds(30)) {
            guard let id = try store.jobs().first?.id else { return false }
            return try hookEntries(store, id).first?.state == .done
        }
        #expect(done, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(5))
        let id = try #require(try store.jobs().first?.id)
        #expect(try hookEntries(store, id).first?.attempts == 2)
        #expect(daemon.log.contains("did not finish within 1s and was killed"), "\(daemon.log.suffix(2000))")
        let runs = try String(contentsOfFile: hooks + "/runs", encoding: .utf8).split(separator: "\n")
        #expect(runs == ["start 1", "start 2"], "\(runs)")
        // The sleep it started went with it (the hook's whole process group is killed), and so did those it left in
        // sessions of their own (found through /proc at the deadline; handed to the daemon, its subreaper, after).
        let left = try await BinaryRunner.run(["pgrep", "-f", "sleep (600|6011|6022)"], executable: "/usr/bin/pgrep")
        #expect(left.stdout.isEmpty, "left running: \(left.stdout)")
    }

    @Test("a hook printing 100 MiB does not grow the daemon; the log keeps 1 KiB of it")
    func floodingHook() async throws {
        // The first job's hook is quiet (the daemon's peak with an upload and a hook run), the second's floods.
        let (sandbox, _) = try sandbox(onUploaded: """
            here="$(dirname "$0")"
            if [ -e "$here/quiet-done" ]; then head -c 104857600 /dev/zero | tr '\\0' 'x'; else touch "$here/quiet-done"; fi
            """)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox))
        let store = try store(sandbox)
        var peaks: [Int] = []
        for index in 0..<2 {
            try sandbox.makeFile(sandbox.root + "/x", size: 5000, seed: UInt64(11 + index))
            #expect(rename(sandbox.root + "/x", sandbox.spool + "/x\(index).jpg") == 0)
            let done = try await eventually(timeout: .seconds(60)) {
                (try store.outboxCounts()[.hook(.uploaded)]?[.done] ?? 0) == index + 1
            }
            #expect(done, "daemon log:\n\(daemon.log.suffix(2000))")
            peaks.append(Self.peakResident(daemon.pid))
        }
        print("hook printing 100 MiB: daemon peak resident \(peaks[0]) KiB after a quiet hook, \(peaks[1]) KiB after the flood")
        #expect(peaks[1] - peaks[0] < 4 * 1024, "the daemon's peak resident memory grew by \((peaks[1] - peaks[0]) / 1024) MiB")
        #expect(await daemon.terminate() < .seconds(5))
        let line = try #require(daemon.log.split(separator: "\n").last { $0.contains("hook on_uploaded ran") })
        #expect(line.contains("stdout=" + String(repeating: "x", count: 1024)) && line.count < 1400,
                "the log line holds \(line.count) characters")
    }

    @Test("on_failed runs for a permanent failure only; a failing hook is retried, then failed, and never moves its job")
    func failures() async throws {
        let recorder = try RecorderSession()
        try await recorder.script([["status": 503], ["status": 403, "body": "no"]])
        let (sandbox, hooks) = try sandbox(onUploaded: "exit 3", onFailed: """
            echo "$UPLOADQ_EVENT $UPLOADQ_JOB_ID" >> "$(dirname "$0")/failed-runs"
            """, extra: "max_attempts = 2\n", destination: """
            [destinations.web]
            protocol = "http-put"
            url = "\(recorder.url("/{name}"))"
            """)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox))
        let web = try await BinaryRunner.run(["enqueue", "--destination", "web", try sandbox.makeFile(sandbox.root + "/w.jpg", size: 100, seed: 12),
                                        "--config", sandbox.configPath])
        let webID = try #require(JobID(web.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        let local = try await BinaryRunner.run(["enqueue", try sandbox.makeFile(sandbox.root + "/l.jpg", size: 100, seed: 13),
                                          "--config", sandbox.configPath])
        let localID = try #require(JobID(local.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        let store = try store(sandbox)
        let settled = try await eventually(timeout: .seconds(40)) {
            let failed = try store.job(webID)
            let uploadedHook = try hookEntries(store, localID).first
            let failedHook = try hookEntries(store, webID).first
            return failed?.state == .failed && failed?.permanent == true && failedHook?.state == .done
                && uploadedHook?.state == .failed
        }
        #expect(settled, "daemon log:\n\(daemon.log.suffix(3000))")
        // The transient 503 owed no hook; the 403 owed one run.
        let failedRuns = try String(contentsOfFile: hooks + "/failed-runs", encoding: .utf8).split(separator: "\n")
        #expect(failedRuns == ["failed \(webID.rawValue)"], "\(failedRuns)")
        // The failing on_uploaded hook: two attempts, then failed for good; its job stays uploaded.
        let entry = try #require(try hookEntries(store, localID).first)
        #expect(entry.attempts == 2 && entry.lastError?.contains("exited with status 3") == true, "\(entry)")
        #expect(try store.job(localID)?.state == .uploaded)
        let shown = try await BinaryRunner.run(["show", localID.rawValue, "--config", sandbox.configPath])
        #expect(shown.stdout.contains("hook:         on_uploaded failed, 2 attempt(s)"), "\(shown.stdout)")
        // `uploadq retry --hooks` runs it again.
        let retried = try await BinaryRunner.run(["retry", "--hooks", localID.rawValue, "--config", sandbox.configPath])
        #expect(retried.status == 0, "\(retried.stderr)")
        let again = try await eventually(timeout: .seconds(20)) {
            let entry = try hookEntries(store, localID).first
            return entry?.attempts == 2 && entry?.state == .failed
                && daemon.log.components(separatedBy: "exited with status 3").count >= 5
        }
        #expect(again, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("the v12 migration moves patch rows into the outbox with their state; triggers owe hooks on any path")
    func migration() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        let path = sandbox.state + "/queue.sqlite"
        let database = try DatabaseQueue(path: path)
        try QueueDatabase.migrator.migrate(database, upTo: "v11-device-constraints")
        let base = Date(timeIntervalSince1970: 1_800_000_000)
        let ids = (0..<4).map { JobID.generate(at: base.addingTimeInterval(Double($0))) }
        try database.write { db in
            for (index, id) in ids.enumerated() {
                try db.execute(sql: """
                    INSERT INTO job (id, state, permanent, file, source_path, original_name, mode, size, sha256,
                    content_type, mtime_ns, inode, device, destination, meta, intake_complete, patch_state,
                    created_at, updated_at)
                    VALUES (?, ?, 0, '/tmp/f', '/tmp/f', 'f.jpg', 'copy', 10, 'sha', 'image/jpeg', 0, 1, 1, 'default',
                    '{}', 1, ?, ?, ?)
                    """, arguments: [id.rawValue, index == 2 ? "pending" : "uploaded",
                                     ["failed", "done", "none", "pending"][index], base, base])
            }
            for id in ids.prefix(2) + [ids[3]] {
                try db.execute(sql: """
                    INSERT INTO patch_outbox (job_id, attempts, last_error, next_attempt_at, created_at, updated_at)
                    VALUES (?, 3, 'HTTP 404', ?, ?, ?)
                    """, arguments: [id.rawValue, base, base, base])
            }
        }
        try database.close()
        let store = QueueStore(database: try QueueDatabase.open(path: path))
        #expect(try store.outboxEntries(ids[0]).map(\.state) == [.failed])
        #expect(try store.outboxEntries(ids[1]).map(\.state) == [.done])
        #expect(try store.patchRecord(ids[0])?.attempts == 3)
        // A patch still owed stays owed, due when it was.
        #expect(try store.outboxEntries(ids[3]).map(\.state) == [.pending])
        #expect(try store.dueOutbox(of: [.patch], now: base, limit: 10).map(\.entry.jobID) == [ids[3]])
        // A hook configured now is owed by whatever makes a job end, here a plain state change.
        try store.setHookConsumers({ var hooks = HookSettings(); hooks.onFailed = ["/bin/true"]; return hooks }())
        _ = try store.apply(.failPermanent(error: "gone"), to: ids[2])
        #expect(try store.outboxEntries(ids[2]).map(\.consumer) == [.hook(.failed)])
        #expect(try store.outboxEntries(ids[2]).first?.state == .pending)
    }

    @Test("a hook taken out of the config holds up no other entry; a job failing for good again owes on_failed again")
    func outboxRules() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        var hooks = HookSettings()
        hooks.onFailed = ["/bin/true"]
        hooks.onUploaded = ["/bin/true"]
        try store.setHookConsumers(hooks)
        // The same hooks again (a restart with the same config) write nothing: a start on a full disk gets past it.
        let changes = store.writer.writeWithoutTransaction { $0.totalChangesCount }
        try store.setHookConsumers(hooks)
        #expect(store.writer.writeWithoutTransaction { $0.totalChangesCount } == changes)
        let events = { try store.writer.read { try String.fetchAll($0, sql: "SELECT event FROM outbox_consumer ORDER BY event") } }
        #expect(try events() == ["failed", "uploaded"])
        // A hook taken out is no longer owed; none at all, nothing.
        var fewer = hooks
        fewer.onFailed = nil
        try store.setHookConsumers(fewer)
        #expect(try events() == ["uploaded"])
        try store.setHookConsumers(HookSettings())
        #expect(try events() == [])
        try store.setHookConsumers(hooks)
        let base = Date(timeIntervalSince1970: 1_800_000_000)
        let ids = (0..<6).map { JobID.generate(at: base.addingTimeInterval(Double($0))) }
        try store.writer.write { db in
            for (index, id) in ids.enumerated() {
                try db.execute(sql: """
                    INSERT INTO job (id, state, permanent, file, source_path, original_name, mode, size, sha256,
                    content_type, mtime_ns, inode, device, destination, meta, intake_complete, patch_state,
                    created_at, updated_at)
                    VALUES (?, 'pending', 0, '/tmp/f', '/tmp/f', 'f.jpg', 'copy', 10, 'sha', 'image/jpeg', 0, 1, 1,
                    'default', '{}', 1, 'none', ?, ?)
                    """, arguments: [id.rawValue, base.addingTimeInterval(Double(index)), base.addingTimeInterval(Double(index))])
            }
        }
        // Five on_failed runs owed first, then one on_uploaded run.
        for id in ids.prefix(5) { _ = try store.apply(.failPermanent(error: "gone"), to: id, now: base.addingTimeInterval(10)) }
        _ = try store.apply(.claim, to: ids[5], now: base.addingTimeInterval(20))
        _ = try store.apply(.succeed, to: ids[5], now: base.addingTimeInterval(20))
        // A daemon whose config has only on_uploaded takes that one, not the older on_failed ones.
        let due = try store.dueOutbox(of: [.hook(.uploaded)], now: base.addingTimeInterval(30), limit: 4)
        #expect(due.map(\.entry.jobID) == [ids[5]])
        // The owed-work loop's one read: the first entry not under way, and the first release.
        let releaseDue = try store.nextReleaseDue()
        let owed = try store.nextOwedDue(of: [.hook(.uploaded)], excluding: [])
        #expect(owed.outbox == base.addingTimeInterval(20) && owed.release == releaseDue)
        #expect(try store.nextOwedDue(of: [.hook(.uploaded)], excluding: [(ids[5], .hook(.uploaded))]).outbox == nil,
                "under way: not due again")
        #expect(try store.nextOwedDue(of: [.hook(.failed)], excluding: [(ids[5], .hook(.uploaded))]).outbox
                == base.addingTimeInterval(10))
        let failedHooks = ids.prefix(5).map { ($0, OutboxConsumer.hook(.failed)) }
        #expect(try store.nextOwedDue(of: [.hook(.failed)], excluding: Array(failedHooks.prefix(4))).outbox
                == base.addingTimeInterval(10), "the fifth, past four under way")
        #expect(try store.nextOwedDue(of: [.hook(.failed)], excluding: failedHooks).outbox == nil, "all five under way")

        // on_failed ran; the job is retried by hand and fails for good again: the hook is owed again.
        try store.finishOutbox(ids[0], .hook(.failed), outcome: .done, now: base.addingTimeInterval(40))
        #expect(try store.outboxEntries(ids[0]).first?.state == .done)
        _ = try store.apply(.retryNow, to: ids[0], now: base.addingTimeInterval(50))
        _ = try store.apply(.failPermanent(error: "gone again"), to: ids[0], now: base.addingTimeInterval(60))
        let again = try #require(try store.outboxEntries(ids[0]).first)
        #expect(again.state == .pending && again.attempts == 0, "\(again)")
        // Retried by hand before that run: the job is not failed any more, and owes it no longer.
        _ = try store.apply(.retryNow, to: ids[0], now: base.addingTimeInterval(70))
        #expect(try store.outboxEntries(ids[0]).isEmpty)
        // An on_failed run that failed for good is run again by `retry --hooks`, the job left as it is.
        try store.finishOutbox(ids[1], .hook(.failed), outcome: .failed(error: "exit 1"), now: base.addingTimeInterval(80))
        #expect(try store.retryOutbox(ids[1], now: base.addingTimeInterval(90)))
        #expect(try store.outboxEntries(ids[1]).first?.state == .pending)
        #expect(try store.job(ids[1])?.state == .failed)
        // The tally `status` reads follows every change, a job's removal with its entries included.
        try store.writer.write { db in try db.execute(sql: "DELETE FROM job WHERE id = ?", arguments: [ids[2].rawValue]) }
        let counted = try store.writer.read { db in
            try Row.fetchAll(db, sql: "SELECT consumer, state, COUNT(*) AS n FROM outbox GROUP BY consumer, state")
                .reduce(into: [OutboxConsumer: [OutboxState: Int]]()) { counts, row in
                    if let consumer = OutboxConsumer(stored: row["consumer"]), let state = OutboxState(rawValue: row["state"]) {
                        counts[consumer, default: [:]][state] = row["n"]
                    }
                }
        }
        #expect(try store.outboxCounts() == counted)
        #expect(counted[.hook(.failed)]?[.pending] == 3, "\(counted)")
    }

    @Test("[hooks] mistakes name their key: a program without a path, an empty command, a bad pass_env")
    func configErrors() throws {
        let cases: [(String, String, String)] = [
            ("on_uploaded = [\"notify\"]", "hooks.on_uploaded", "absolute path"),
            ("on_failed = []", "hooks.on_failed", "must name a program"),
            ("pass_env = [\"A=B\"]", "hooks.pass_env", "not an environment variable"),
            ("max_attempts = -1", "hooks.max_attempts", "out of range"),
            ("on_success = [\"/bin/true\"]", "hooks.on_success", "unknown"),
        ]
        for (line, key, says) in cases {
            do {
                _ = try ConfigurationLoader.parse("[hooks]\n\(line)\n", file: "/etc/uploadq/t.toml", baseDirectory: "/etc/uploadq")
                Issue.record("\(line) was accepted")
            } catch {
                #expect(error.key == key && error.line == 2, "\(line): \(error)")
                #expect(error.message.contains(says), "\(line): \(error)")
            }
        }
        let relative = try ConfigurationLoader.parse("[hooks]\non_uploaded = [\"bin/notify\", \"-v\"]\n",
                                                     file: "/etc/uploadq/t.toml", baseDirectory: "/etc/uploadq")
        #expect(relative.hooks.onUploaded == ["/etc/uploadq/bin/notify", "-v"])
    }

    @Test("what a hook prints is logged with URLs, bearer tokens and secret-looking values redacted")
    func outputRedaction() {
        let printed = """
            uploaded to https://bucket.s3.amazonaws.com/a.jpg?X-Amz-Signature=abc123&X-Amz-Credential=AKIA
            Authorization: Bearer eyJhbGciOi.secret token=t0ps3cret {"api_key": "k3y-value", "ok": true}
            X-Api-Key: header-secret password=hunter2
            """
        let shown = SecretRedaction.redacted(printed)
        for secret in ["abc123", "AKIA", "eyJhbGciOi.secret", "t0ps3cret", "k3y-value", "header-secret", "hunter2"] {
            #expect(!shown.contains(secret), "\(secret) in: \(shown)")
        }
        #expect(shown.contains("uploaded to https://bucket.s3.amazonaws.com/a.jpg"))
        #expect(shown.contains("\"ok\": true") && !shown.contains("\n"))
    }

    /// The process's peak resident memory (VmHWM), in KiB.
    static func peakResident(_ pid: Int32) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
}
