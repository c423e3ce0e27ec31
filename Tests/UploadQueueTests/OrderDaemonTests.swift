import Foundation
import Testing
@testable import UploadQueue

/// Lanes, `after` and groups end to end, with the real daemon and the recording server: what the server got, in
/// the order it got it, through a kill -9; a manifest after its parts; a group's one completion reaching the event
/// log, its hook and its patch.
@Suite(.serialized)
struct OrderDaemonTests {
    /// A sandbox whose destination `rec` PUTs each file to the recorder under its name.
    func sandbox(_ recorder: RecorderSession, bandwidth: Int64 = 0, extra: String = "") throws -> Sandbox {
        try Sandbox(config: """
            [destinations.rec]
            protocol = "http-put"
            url = "\(recorder.url("/{name}"))"
            \(extra)
            """, bandwidth: bandwidth, concurrency: 4)
    }

    func store(_ sandbox: Sandbox) throws -> QueueStore {
        QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
    }

    /// Runs `uploadq enqueue ARGS FILES…`; the job ids it printed, one per file in order.
    func enqueue(_ files: [String], _ arguments: [String], _ sandbox: Sandbox) async throws -> [JobID] {
        let output = try await BinaryRunner.run(["enqueue"] + files + arguments + ["--config", sandbox.configPath])
        #expect(output.status == 0, "enqueue: \(output.stderr)")
        let ids = output.stdout.split(separator: "\n").compactMap { JobID(String($0.split(separator: " ").first ?? "")) }
        #expect(ids.count == files.count, "enqueue printed: \(output.stdout)")
        return ids
    }

    /// The file names of the PUTs the recorder got, in the order it got them (every try, whole or cut short).
    func puts(_ recorder: RecorderSession) async throws -> [String] {
        try await recorder.requests().filter { $0["method"] as? String == "PUT" }.compactMap {
            ($0["path"] as? String)?.split(separator: "/").last.map(String.init)
        }
    }

    @Test("three lanes through a kill -9: every try of a lane's job reaches the server before any of the next one's")
    func laneOrderThroughKill() async throws {
        let recorder = try RecorderSession()
        let sandbox = try sandbox(recorder, bandwidth: 768 << 10)
        var names: [[String]] = []
        for lane in 0..<3 {
            var files: [String] = []
            for index in 0..<5 {
                files.append(try sandbox.makeFile(sandbox.root + "/in/L\(lane)-\(index).bin", size: 150_000,
                                                  seed: UInt64(lane * 10 + index)))
            }
            _ = try await enqueue(files, ["--destination", "rec", "--lane", "lane-\(lane)"], sandbox)
            names.append(files.map { ($0 as NSString).lastPathComponent })
        }
        let store = try store(sandbox)
        let daemon = try DaemonProcess(sandbox: sandbox)
        let some = try await eventually(timeout: .seconds(60)) { try store.summary().counts[.uploaded] ?? 0 >= 5 }
        #expect(some, "daemon log:\n\(daemon.log.suffix(3000))")
        await daemon.kill9()
        let restarted = try DaemonProcess(sandbox: sandbox, name: "daemon2")
        let all = try await eventually(timeout: .seconds(90)) { try store.summary().counts[.uploaded] ?? 0 == 15 }
        #expect(all, "daemon log:\n\(restarted.log.suffix(3000))")
        #expect(await restarted.terminate() < .seconds(10))
        let received = try await puts(recorder)
        for lane in names {
            let order = received.compactMap { lane.firstIndex(of: $0) }
            #expect(order == order.sorted(), "lane \(lane.first ?? "") reached the server as \(order)")
            #expect(Set(order) == Set(0..<5))
        }
        #expect(try store.lanes(owner: nil).isEmpty, "no lane has work left")
    }

    @Test("a manifest enqueued after its parts reaches the server after every one of them, also after a part's failure")
    func manifestAfterParts() async throws {
        let recorder = try RecorderSession()
        try await recorder.script([["status": 503, "body": "busy"]])
        let sandbox = try sandbox(recorder)
        let parts = try (0..<3).map { try sandbox.makeFile(sandbox.root + "/in/part-\($0).bin", size: 40_000, seed: UInt64(50 + $0)) }
        let ids = try await enqueue(parts, ["--destination", "rec"], sandbox)
        let manifest = try sandbox.makeFile(sandbox.root + "/in/manifest.json", size: 300, seed: 60)
        _ = try await enqueue([manifest], ["--destination", "rec"] + ids.flatMap { ["--after", $0.rawValue] }, sandbox)
        let store = try store(sandbox)
        let daemon = try DaemonProcess(sandbox: sandbox)
        let all = try await eventually(timeout: .seconds(60)) { try store.summary().counts[.uploaded] ?? 0 == 4 }
        #expect(all, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(10))
        let received = try await puts(recorder)
        let last = try #require(received.lastIndex { $0.hasPrefix("part-") })
        #expect(received.filter { $0.hasPrefix("part-") }.count == 4, "a part failed once and went again: \(received)")
        #expect(received.firstIndex(of: "manifest.json").map { $0 > last } == true, "\(received)")
    }

    @Test("a closed group's completion: one group.uploaded, its hook with every member's URL, its patch; a late member is refused")
    func groupCompletion() async throws {
        let recorder = try RecorderSession()
        let probe = try Sandbox()
        let hook = probe.root + "/group-hook.sh"
        try "#!/bin/sh\ncat > \"$(dirname \"$0\")/group-$UPLOADQ_GROUP.json\"\n".write(toFile: hook, atomically: true,
                                                                                          encoding: .utf8)
        #expect(chmod(hook, 0o755) == 0)
        let sandbox = try Sandbox(config: "[hooks]\non_group_uploaded = [\"\(hook)\"]\n", bandwidth: 256 << 10)
        let members = try (0..<3).map { try sandbox.makeFile(sandbox.root + "/in/p\($0).jpg", size: 60_000, seed: UInt64(70 + $0)) }
        let ids = try await enqueue(members, ["--group", "survey-42"], sandbox)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox))
        let closed = try await BinaryRunner.run(["group", "close", "survey-42", "--patch-url", recorder.url("/surveys/42"),
                                                 "--config", sandbox.configPath])
        #expect(closed.status == 0, "\(closed.stderr)")
        let late = try await BinaryRunner.run(["enqueue", members[0], "--group", "survey-42", "--config", sandbox.configPath])
        // Refused whether the group is still closed or already uploaded (the three may be sent by now).
        #expect(late.status != 0 && late.stderr.contains("no member joins it after `uploadq group close`"),
                "\(late.stdout) \(late.stderr)")
        let store = try store(sandbox)
        let done = try await eventually(timeout: .seconds(60)) { try store.group("survey-42", owner: nil)?.state == .uploaded }
        #expect(done, "daemon log:\n\(daemon.log.suffix(3000))")
        let hooked = await eventually(timeout: .seconds(30)) {
            FileManager.default.fileExists(atPath: probe.root + "/group-survey-42.json")
        }
        let patched = try await eventually(timeout: .seconds(30)) {
            try await recorder.requests().contains { $0["method"] as? String == "PATCH" }
        }
        #expect(hooked && patched, "daemon log:\n\(daemon.log.suffix(3000))")
        // The Swift client reads the same through the control API.
        let client = UploadQueueClient(configuration: try sandbox.configuration())
        let seen = try #require(try await client.group("survey-42"))
        #expect(seen.state == .uploaded && seen.completion.map(\.jobID) == ids && seen.completedAt != nil)
        #expect(try await client.groups().map(\.name) == ["survey-42"])
        #expect(try await client.lanes().isEmpty)
        try await client.acknowledgeGroup("survey-42")
        #expect(try await client.group("survey-42")?.acknowledgedAt != nil)
        #expect(await daemon.terminate() < .seconds(10))

        let group = try #require(try store.group("survey-42", owner: nil))
        let urls = group.completion.map(\.remoteURL)
        #expect(group.completion.map(\.jobID) == ids && urls.allSatisfy { $0.hasPrefix("file://") })
        let payload = try #require(FileManager.default.contents(atPath: probe.root + "/group-survey-42.json"))
        let object = try #require(try JSONSerialization.jsonObject(with: payload) as? [String: Any])
        #expect(object["group"] as? String == "survey-42" && object["event"] as? String == "group_uploaded")
        #expect((object["members"] as? [[String: Any]])?.compactMap { $0["remote_url"] as? String } == urls)
        let patch = try #require(try await recorder.requests().first { $0["method"] as? String == "PATCH" })
        let body = try #require(try JSONSerialization.jsonObject(with: Data((patch["body"] as? String ?? "").utf8)) as? [String: Any])
        #expect(body["group"] as? String == "survey-42" && body["remote_urls"] as? [String] == urls)
        let made = Int64((group.createdAt.timeIntervalSince1970 * 1000).rounded())
        #expect((patch["headers"] as? [String: String])?["idempotency-key"] == "group:-:survey-42:\(made)")
        let logged = try store.loggedEvents(after: 0, owner: nil, limit: 1000).events.filter { $0.kind == .groupUploaded }
        #expect(logged.count == 1 && logged.first?.fields["members"] == .integer(3))
        let listed = try await BinaryRunner.run(["groups", "survey-42", "--json", "--config", sandbox.configPath])
        let shown = try #require(try listed.json() as? [String: Any])
        #expect(shown["state"] as? String == "uploaded" && (shown["completion"] as? [Any])?.count == 3)
    }
}
