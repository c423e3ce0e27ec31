import Foundation
import Testing
@testable import UploadQueue

/// The metadata patch against the recording server: retried through 5xx until one 2xx, the same idempotency key
/// every time, permanent on 404 (the job stays uploaded), delivered after a kill -9 that lost its answer, driven
/// from a spool sidecar; and the library's completions, delivered again after a restart until acknowledged.
@Suite(.serialized)
struct PatchTests {
    func sandbox(_ extra: String = "", retry: String = "300ms", patch patchKeys: String = "",
                 spool: String = "") throws -> Sandbox {
        try Sandbox(config: """
            \(extra)
            [patch]
            method = "PATCH"
            body = '{"photo_url": "{{url}}", "sha256": "{{sha256}}", "size": {{size}}, "note": "{{meta.note}}"}'
            headers = { "X-Client" = "uploadq-test" }
            \(patchKeys)
            """, retryInterval: retry, spool: spool)
    }

    @Test("500, 500, then 200: one patch in effect, body with the remote URL, Idempotency-Key = job id, done")
    func retriedUntilAccepted() async throws {
        let recorder = try RecorderSession()
        try await recorder.script([["status": 500, "body": "busy"], ["status": 503, "headers": ["Retry-After": "0"]],
                                   ["status": 200, "body": "{}"]])
        let sandbox = try sandbox()
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/pic \"1\".jpg", size: 50_000, seed: 80)
        let id = try await running.queue.enqueue(path, metadata: ["note": "line\nwith \"quotes\""],
                                                 patch: PatchTarget(url: recorder.url("/records/r-1")))
        let uploaded = try await running.settled(id)
        #expect(uploaded.state == .uploaded)
        let patched = try await running.wait(id, timeout: .seconds(20)) { $0.patchState != .pending }
        await running.stop()
        let record = try running.queue.store.patchRecord(id)
        #expect(patched.patchState == .done, "\(String(describing: record))")
        #expect(patched.state == .uploaded)
        let requests = try await recorder.requests()
        #expect(requests.count == 3)
        for request in requests {
            let headers = try #require(request["headers"] as? [String: String])
            #expect(request["method"] as? String == "PATCH")
            #expect(headers["idempotency-key"] == id.rawValue)
            #expect(headers["content-type"] == "application/json")
            #expect(headers["x-client"] == "uploadq-test")
        }
        let body = try #require((requests.last?["body"] as? String)?.data(using: .utf8))
        let fields = try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any])
        #expect(fields["photo_url"] as? String == uploaded.remoteURL)
        #expect(fields["sha256"] as? String == uploaded.sha256)
        #expect(fields["size"] as? Int == 50_000)
        #expect(fields["note"] as? String == "line\nwith \"quotes\"")
        #expect(record?.attempts == 3 && record?.lastError == nil)
    }

    @Test("404 from the patch server: patch failed with the status in the error; the job stays uploaded")
    func notFoundIsPermanent() async throws {
        let recorder = try RecorderSession()
        try await recorder.script([["status": 404, "body": "no such record"]])
        let sandbox = try sandbox()
        let running = try RunningQueue(sandbox)
        let id = try await running.queue.enqueue(try sandbox.makeFile(sandbox.root + "/a.jpg", size: 1000, seed: 81),
                                                 patch: PatchTarget(url: recorder.url("/records/missing")))
        let job = try await running.wait(id, timeout: .seconds(20)) { $0.patchState == .failed }
        await running.stop()
        #expect(job.state == .uploaded && job.patchState == .failed)
        let record = try #require(try running.queue.store.patchRecord(id))
        #expect(record.lastError?.contains("HTTP 404") == true, "\(record.lastError ?? "")")
        #expect(record.lastError?.contains("no such record") == true)
        let show = try await BinaryRunner.run(["show", id.rawValue, "--json", "--config", sandbox.configPath])
        let patch = try #require((try show.json() as? [String: Any])?["patch"] as? [String: Any])
        #expect(patch["state"] as? String == "failed")
        #expect((patch["last_error"] as? String)?.contains("HTTP 404") == true)
        let status = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let patches = try #require((try status.json() as? [String: Any])?["patches"] as? [String: Int])
        #expect(patches["failed"] == 1)
    }

    @Test("retry of an uploaded job whose patch failed sends the patch again; the same photo for another record is a job of its own")
    func retryFailedPatch() async throws {
        let recorder = try RecorderSession()
        try await recorder.script([["status": 422, "body": "record locked"]])
        let sandbox = try sandbox()
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/h.jpg", size: 5000, seed: 88)
        let id = try await running.queue.enqueue(path, patch: PatchTarget(url: recorder.url("/records/r-5")))
        _ = try await running.wait(id, timeout: .seconds(20)) { $0.patchState == .failed }
        let other = try await running.queue.enqueue(path, patch: PatchTarget(url: recorder.url("/records/r-6")))
        #expect(other != id, "another record's patch is not folded into the first job")
        let retried = try await BinaryRunner.run(["retry", id.rawValue, "--config", sandbox.configPath])
        #expect(retried.status == 0, "\(retried.stderr)")
        let done = try await running.wait(id, timeout: .seconds(20)) { $0.patchState == .done }
        let second = try await running.wait(other, timeout: .seconds(20)) { $0.patchState == .done }
        await running.stop()
        #expect(done.patchState == .done && done.state == .uploaded)
        #expect(second.patchState == .done)
        let paths = try await recorder.requests().compactMap { $0["path"] as? String }
        #expect(paths.filter { $0.hasSuffix("/records/r-5") }.count == 2)
        #expect(paths.filter { $0.hasSuffix("/records/r-6") }.count == 1)
    }

    @Test("a patch template with an unknown placeholder is refused at enqueue, not at delivery")
    func templateCheckedAtEnqueue() async throws {
        let sandbox = try sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/b.jpg", size: 100, seed: 82)
        await #expect(throws: UploadQueueError.self) {
            _ = try await queue.enqueue(path, patch: PatchTarget(url: "https://api.example.com/r/1",
                                                                 body: #"{"u": "{{photo_url}}"}"#))
        }
        let cli = try await BinaryRunner.run(["enqueue", path, "--patch-url", "https://api.example.com/r/1",
                                        "--patch-body", #"{"u": "{{remote}}"}"#, "--config", sandbox.configPath])
        #expect(cli.status != 0 && cli.stderr.contains("{{remote}}"), "\(cli.stderr)")
        #expect(try queue.store.jobs().isEmpty)
    }

    @Test("kill -9 while the patch's answer is held: after the restart it is delivered again, same key")
    func patchSurvivesKill() async throws {
        let recorder = try RecorderSession()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.recorderURL()))
        try await proxy.add(["method": "PATCH", "action": "hold", "seconds": 60])
        let sandbox = try sandbox()
        let path = try sandbox.makeFile(sandbox.root + "/c.jpg", size: 20_000, seed: 83)
        let url = proxy.url("/record/\(recorder.name)/records/r-3")
        let id = try await BinaryRunner.enqueue([path, "--patch-url", url, "--config", sandbox.configPath])
        var daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-1")
        let held = try await eventually(timeout: .seconds(30)) {
            try await proxy.requests().contains { $0["held"] as? Bool == true }
        }
        #expect(held, "daemon log:\n\(daemon.log.suffix(2000))")
        await daemon.kill9()
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let before = try #require(try store.job(id))
        #expect(before.state == .uploaded && before.patchState == .pending)

        daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-2")
        let done = try await eventually(timeout: .seconds(30)) { try store.job(id)?.patchState == .done }
        #expect(done, "daemon log:\n\(daemon.log.suffix(2000))")
        #expect(await daemon.terminate() < .seconds(5))
        let requests = try await recorder.requests()
        #expect(requests.count == 2, "the held one and the one after the restart")
        #expect(requests.allSatisfy { ($0["headers"] as? [String: String])?["idempotency-key"] == id.rawValue })
    }

    @Test("a sidecar with a patch target drives spool → upload → PATCH, with the config's body and listed headers")
    func sidecarPatch() async throws {
        let recorder = try RecorderSession()
        // A sidecar may name a patch target only under a prefix the admin allowed, set the headers and meta keys
        // the admin listed, and never the body.
        let sandbox = try sandbox(patch: """
            allowed_urls = ["\(recorder.url("/records/"))"]
            sidecar_headers = ["X-Record"]
            """, spool: "sidecar_meta_keys = [\"note\"]")
        try FileManager.default.createDirectory(atPath: sandbox.spool, withIntermediateDirectories: true)
        let sidecar: [String: Any] = ["meta": ["note": "from the field"],
                                      "patch": ["url": recorder.url("/records/r-9"), "method": "PUT",
                                                "headers": ["X-Record": "r-9"]]]
        try JSONSerialization.data(withJSONObject: sidecar).write(to: URL(fileURLWithPath: sandbox.spool + "/d.jpg.uploadq.json"))
        try sandbox.makeFile(sandbox.spool + "/d.jpg", size: 30_000, seed: 84)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let done = try await eventually(timeout: .seconds(30)) {
            try store.jobs().first?.patchState == .done
        }
        #expect(done, "daemon log:\n\(daemon.log.suffix(2000))")
        #expect(await daemon.terminate() < .seconds(5))
        let job = try #require(try store.jobs().first)
        let request = try #require(try await recorder.requests().first)
        #expect(request["method"] as? String == "PUT")
        #expect((request["headers"] as? [String: String])?["x-record"] == "r-9")
        let body = try #require((request["body"] as? String)?.data(using: .utf8))
        let fields = try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any])
        #expect(fields["photo_url"] as? String == job.remoteURL && fields["note"] as? String == "from the field"
                && fields["sha256"] as? String == job.sha256, "the config's template, filled: \(fields)")
    }

    @Test("completions: delivered, acknowledged ones not again after reopening, unacknowledged ones again")
    func completions() async throws {
        let sandbox = try sandbox()
        var running = try RunningQueue(sandbox)
        let first = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/e.jpg", size: 1000, seed: 85),
                                              to: "default", meta: ["record": "r-1"])
        let second = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/f.jpg", size: 2000, seed: 86),
                                               to: "default", meta: ["record": "r-2"])
        _ = try await running.settled(first)
        _ = try await running.settled(second)
        let delivered = try await Self.take(2, from: running.queue.completions())
        #expect(Set(delivered.map(\.jobID)) == [first, second])
        let one = try #require(delivered.first { $0.jobID == first })
        #expect(one.meta == ["record": "r-1"] && one.size == 1000 && one.remoteURL.hasPrefix("file://"))
        try running.queue.acknowledge(first)
        await running.stop()

        running = try RunningQueue(sandbox)
        let again = try await Self.take(1, from: running.queue.completions())
        #expect(again.map(\.jobID) == [second], "only the unacknowledged completion comes back")
        let third = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/g.jpg", size: 3000, seed: 87),
                                              to: "default")
        let stream = running.queue.completions()
        let live = try await Self.take(2, from: stream)
        #expect(Set(live.map(\.jobID)) == [second, third], "a job uploaded while listening is delivered too")
        await running.stop()
    }

    /// The first `count` elements of `stream`, or a failure after 20 s.
    static func take(_ count: Int, from stream: AsyncStream<Completion>) async throws -> [Completion] {
        try await withThrowingTaskGroup(of: [Completion].self) { group in
            group.addTask {
                var items: [Completion] = []
                for await item in stream {
                    items.append(item)
                    if items.count == count { break }
                }
                return items
            }
            group.addTask {
                try await Task.sleep(for: .seconds(20))
                Issue.record("fewer than \(count) completions within 20 s")
                return []
            }
            let first = try await group.next() ?? []
            group.cancelAll()
            return first
        }
    }
}
