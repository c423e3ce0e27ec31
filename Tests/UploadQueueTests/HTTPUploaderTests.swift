import Foundation
import Testing
@testable import UploadQueue

/// Plain HTTP destinations against real servers: whole-file PUT to nginx DAV, multipart POST to the recorder,
/// bearer tokens and their refresh, and how server errors end up in `last_error`.
struct HTTPUploaderTests {
    func putSandbox(url: String, extra: String = "", retry: String = "300ms") throws -> Sandbox {
        try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(url)"
            stall_timeout = "2s"
            \(extra)
            """, retry: retry)
    }

    func postSandbox(url: String, extra: String = "", retry: String = "300ms") throws -> Sandbox {
        try Sandbox(destination: "api", """
            protocol = "http-post"
            url = "\(url)"
            form_field = "photo"
            \(extra)
            """, retry: retry)
    }

    @Test("PUT stores the file under the URL template; values cannot climb out of the prefix even through nginx")
    func putToDAV() async throws {
        let dav = try TestServers.davURL()
        let sandbox = try putSandbox(url: "\(dav)/put-test/{meta.album}/{job_id}-{name}")
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/été à Paris.jpg", size: 300_000, seed: 30)
        let id = try await running.enqueue(path, to: "dav", meta: ["album": "../../escape"])
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let expected = "\(dav)/put-test/_._.._escape/\(id)-%C3%A9t%C3%A9%20%C3%A0%20Paris.jpg"
        #expect(job.remoteURL == expected)
        let stored = try TestServers.davRoot() + "/put-test/_._.._escape/\(id)-été à Paris.jpg"
        #expect(try sha256(ofFile: stored) == job.sha256)
    }

    @Test("small files to one server go over a few reused connections, not one connection each")
    func connectionsReused() async throws {
        let dav = try TestServers.davURL()
        let folder = "reuse-\(UInt32.random(in: 0...UInt32.max))"
        let sandbox = try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(dav)/\(folder)/{name}"
            """, concurrency: 2)
        let jobs = try await Self.uploadTwelve(sandbox, size: 8_192, seed: 500)
        #expect(jobs.allSatisfy { $0.state == .uploaded }, "\(jobs.map { $0.lastError ?? "" })")
        // "PUT /reuse-N/p3.jpg 201 17 4 HTTP/1.1": the connection's serial and the requests it has carried.
        let puts = try Self.loggedPuts(under: folder)
        #expect(puts.count == 12, "\(puts)")
        #expect(puts.allSatisfy { $0[5] == "HTTP/1.1" }, "\(puts)")
        let connections = Set(puts.map { $0[3] })
        let mostOnOne = puts.compactMap { Int($0[4]) }.max() ?? 0
        #expect(connections.count <= 4, "12 uploads, 2 at a time, over \(connections.count) connections: \(puts)")
        #expect(mostOnOne >= 4, "a connection carried several uploads: \(puts)")
    }

    /// Enqueues twelve files `p0.jpg`… of `size` bytes to the sandbox's `dav` destination, all before the queue
    /// starts (so that its slots fill at once, however slow the machine), waits until each is settled, stops the
    /// queue, and returns the jobs as they ended.
    static func uploadTwelve(_ sandbox: Sandbox, size: Int, seed: UInt64) async throws -> [Job] {
        let intake = try UploadQueue(configuration: try sandbox.configuration())
        var ids: [JobID] = []
        for index in 0..<12 {
            let path = try sandbox.makeFile(sandbox.root + "/p\(index).jpg", size: size, seed: seed + UInt64(index))
            ids.append(try await intake.enqueue(path, destination: "dav", metadata: [:], mode: .copy))
        }
        let running = try RunningQueue(sandbox)
        var jobs: [Job] = []
        for id in ids { jobs.append(try await running.settled(id)) }
        await running.stop()
        return jobs
    }

    /// The PUTs nginx logged under `/FOLDER/`: method, path, status, connection, its request count, protocol,
    /// end time and duration (seconds).
    static func loggedPuts(under folder: String) throws -> [[String]] {
        let log = try String(contentsOfFile: try TestServers.davAccessLog(), encoding: .utf8)
        return log.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
            .filter { $0.count == 8 && $0[0] == "PUT" && $0[1].hasPrefix("/\(folder)/") }
    }

    @Test("an HTTPS origin that offers HTTP/2 gets the uploads over it, several at once on one connection")
    func http2Multiplexed() async throws {
        let tls = try TestServers.address("UPLOADQ_TEST_DAV_TLS_URL")
        let caFile = try TestServers.address("UPLOADQ_TEST_CA_FILE")
        let folder = "h2-\(UInt32.random(in: 0...UInt32.max))"
        // A bandwidth cap keeps four uploads on the wire together for a while: a second or more each, even alone,
        // so a machine loaded by the rest of the suite, which starts them tenths of a second apart, still overlaps
        // them.
        let sandbox = try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(tls)/\(folder)/{name}"
            ca_file = "\(caFile)"
            """, concurrency: 4, bandwidth: 4 << 20)
        for job in try await Self.uploadTwelve(sandbox, size: 4_000_000, seed: 700) {
            #expect(job.state == .uploaded, "\(job.lastError ?? "")")
            #expect(try sha256(ofFile: try TestServers.davRoot() + "/\(folder)/\(job.originalName)") == job.sha256)
        }
        let puts = try Self.loggedPuts(under: folder)
        #expect(puts.count == 12, "\(puts)")
        #expect(puts.allSatisfy { $0[5] == "HTTP/2.0" }, "\(puts)")
        // Requests on one connection that were under way at the same moment: streams of one HTTP/2 connection
        // (without multiplexing each would have had a connection of its own).
        let spans = puts.compactMap { fields -> (connection: String, start: Double, end: Double)? in
            guard let end = Double(fields[6]), let took = Double(fields[7]) else { return nil }
            return (fields[3], end - took, end)
        }
        let shared = spans.contains { one in
            spans.contains { other in
                other.connection == one.connection && other.start < one.start && one.start < other.end - 0.05
            }
        }
        #expect(shared, "no two uploads overlapped on one connection: \(puts)")
        #expect(Set(puts.map { $0[3] }).count <= 2, "12 uploads, 4 at a time: \(puts)")
    }

    @Test("an interrupted PUT is sent again whole, with its Idempotency-Key and never Content-Range (22)")
    func putInterrupted() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.davURL()))
        try await proxy.add(["method": "PUT", "action": "reset", "after_bytes": 1_000_000, "times": 2])
        let sandbox = try putSandbox(url: proxy.url("/resend/{job_id}.bin"))
        let (job, attempts) = try await sandbox.uploadOne("big.bin", size: 3_000_000, seed: 31, to: "dav")
        let id = job.id
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try sha256(ofFile: try TestServers.davRoot() + "/resend/\(id).bin") == job.sha256)
        let puts = try await proxy.requests().filter { $0["method"] as? String == "PUT" }
        #expect(puts.count >= 2)
        for put in puts {
            let headers = try #require(put["headers"] as? [String: String])
            #expect(headers["content-length"] == "3000000")
            #expect(headers["content-range"] == nil)
            #expect(headers["idempotency-key"] == id.rawValue)
        }
        #expect(puts.last?["body_bytes"] as? Int == 3_000_000)
        #expect(attempts.count >= 2)
    }

    @Test("POST sends multipart/form-data: meta as fields, the file as its part; remote_url from Location")
    func postMultipart() async throws {
        let recorder = try RecorderSession()
        let sandbox = try postSandbox(url: recorder.url("/photos"), extra: #"headers = { "X-Client" = "uploadq-test" }"#)
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/snap \"1\".jpg", size: 200_000, seed: 32)
        let id = try await running.enqueue(path, to: "api", meta: ["record": "r-9", "note": "a, b; c"])
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(job.remoteURL == "\(try TestServers.recorderURL())/record/\(recorder.name)/objects/1")
        let request = try #require(try await recorder.requests().first)
        let headers = try #require(request["headers"] as? [String: String])
        #expect(headers["idempotency-key"] == id.rawValue)
        #expect(headers["x-client"] == "uploadq-test")
        #expect(headers["content-type"]?.hasPrefix("multipart/form-data; boundary=") == true)
        let form = try #require(request["form"] as? [String: Any])
        #expect(form["fields"] as? [String: String] == ["record": "r-9", "note": "a, b; c"])
        let file = try #require((form["files"] as? [[String: Any]])?.first)
        #expect(file["field"] as? String == "photo")
        #expect(file["filename"] as? String == "snap %221%22.jpg")
        #expect(file["sha256"] as? String == job.sha256)
        #expect(file["size"] as? Int == 200_000)
    }

    @Test("a bearer token from token_file is sent; after a 401 it is read again and the request resent once")
    func tokenFile() async throws {
        let recorder = try RecorderSession()
        try await recorder.script([["status": 401, "body": "token expired"]])
        let sandbox = try postSandbox(url: recorder.url(), extra: #"token_file = "token.txt""#)
        try "file-secret\nsecond line\n".write(toFile: sandbox.root + "/token.txt", atomically: true, encoding: .utf8)
        let (job, _) = try await sandbox.uploadOne("a.jpg", size: 1000, seed: 33, to: "api")
        #expect(job.state == .uploaded && job.attempts == 1, "\(job.lastError ?? "")")
        let sent = try await recorder.requests().map { ($0["headers"] as? [String: String])?["authorization"] }
        #expect(sent == ["Bearer file-secret", "Bearer file-secret"])
    }

    @Test("token_command runs without a shell; a second 401 fails for a person, and no token reaches an error")
    func tokenCommandRejected() async throws {
        let recorder = try RecorderSession()
        try await recorder.script([["status": 401], ["status": 401, "body": "<html><b>no</b> way</html>"]])
        let sandbox = try postSandbox(url: recorder.url(), extra: #"token_command = ["./token.sh", "a b"]"#)
        let script = sandbox.root + "/token.sh"
        try """
            #!/bin/sh
            n=$(cat "$0.count" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$0.count"
            echo "secret-$n-[$1]"
            """.write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        let (job, _) = try await sandbox.uploadOne("a.jpg", size: 1000, seed: 34, to: "api")
        #expect(job.state == .failed && job.permanent)
        let error = try #require(job.lastError)
        #expect(error.contains("HTTP 401") && error.contains("no way") && error.contains("token_"), "\(error)")
        #expect(!error.contains("secret"))
        let sent = try await recorder.requests().map { ($0["headers"] as? [String: String])?["authorization"] }
        #expect(sent == ["Bearer secret-1-[a b]", "Bearer secret-2-[a b]"])
    }

    @Test("a missing token_env fails permanently naming the variable, before anything is sent")
    func missingTokenEnvironment() async throws {
        let recorder = try RecorderSession()
        let sandbox = try postSandbox(url: recorder.url(), extra: #"token_env = "UPLOADQ_TEST_NO_SUCH_TOKEN""#)
        let (job, _) = try await sandbox.uploadOne("a.jpg", size: 1000, seed: 35, to: "api")
        #expect(job.state == .failed && job.permanent)
        #expect(job.lastError?.contains("UPLOADQ_TEST_NO_SUCH_TOKEN") == true, "\(job.lastError ?? "")")
        #expect(try await recorder.requests().isEmpty)
    }

    @Test("4xx is permanent with the status and the server's words; 5xx and a closed connection are retried",
          arguments: [
              (["status": 403, "body": "bucket is read-only"], true, "HTTP 403"),
              (["status": 422, "body": "{\"error\": \"bad photo\"}"], true, "bad photo"),
              (["status": 502, "body": "<html><head><style>x{}</style></head><body>upstream down</body></html>"], false,
               "upstream down"),
              (["close": true], false, "without an answer"),
          ] as [([String: any Sendable], Bool, String)])
    func serverAnswers(answer: [String: any Sendable], permanent: Bool, text: String) async throws {
        let recorder = try RecorderSession()
        try await recorder.script([answer.mapValues { $0 as Any }])
        let sandbox = try postSandbox(url: recorder.url())
        let (job, attempts) = try await sandbox.uploadOne("a.jpg", size: 1000, seed: 36, to: "api")
        let first = try #require(attempts.first?.error)
        #expect(first.contains(text), "\(first)")
        #expect(!first.contains("<"))
        if permanent {
            #expect(job.state == .failed && job.permanent && attempts.count == 1)
        } else {
            #expect(job.state == .uploaded && attempts.count == 2, "\(attempts.map { $0.error ?? "-" })")
        }
    }

    @Test("TLS is always verified: a private CA's server is never sent to, waits with a clear reason (a portal intercepting HTTPS looks the same), and works with ca_file")
    func privateCA() async throws {
        let tls = try TestServers.address("UPLOADQ_TEST_DAV_TLS_URL")
        let caFile = try TestServers.address("UPLOADQ_TEST_CA_FILE")
        let refused = try putSandbox(url: "\(tls)/tls/{job_id}.bin")
        var running = try RunningQueue(refused)
        let first = try await running.enqueue(try refused.makeFile(refused.root + "/a.bin", size: 5000, seed: 37), to: "dav")
        let held = try await running.wait(first, timeout: .seconds(20)) { $0.waitingReason == .unverifiedAnswer }
        await running.stop()
        #expect(held.state == .pending && !held.permanent && held.failures == 0)
        let reason = held.waitingHolds.first?.detail ?? ""
        #expect(reason.contains("TLS verification failed") && reason.contains("ca_file") && reason.contains("captive portal"),
                "\(reason)")
        #expect(!FileManager.default.fileExists(atPath: try TestServers.davRoot() + "/tls/\(first).bin"), "nothing was stored")

        let trusted = try putSandbox(url: "\(tls)/tls/{job_id}.bin", extra: "ca_file = \"\(caFile)\"")
        running = try RunningQueue(trusted)
        let second = try await running.enqueue(try trusted.makeFile(trusted.root + "/b.bin", size: 5000, seed: 38), to: "dav")
        let job = try await running.settled(second)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(job.remoteURL?.hasPrefix("https://") == true)
        #expect(try sha256(ofFile: try TestServers.davRoot() + "/tls/\(second).bin") == job.sha256)
    }
}
