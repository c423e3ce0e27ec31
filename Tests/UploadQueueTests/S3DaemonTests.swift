import CUploadQueueSystem
import Foundation
import Testing
@testable import UploadQueue

/// The real `uploadq daemon` uploading to moto_server: killed with SIGKILL mid-upload and between an UploadPart
/// and the saving of its ETag, and a batch of photos through one daemon.
@Suite(.serialized)
struct S3DaemonTests {
    static let part = 5 << 20

    func destination(_ bucket: S3TestBucket, endpoint: String) -> String {
        bucket.destination(endpoint: endpoint, """
            part_size = "5MiB"
            key_template = "{date}/{job_id}-{name}"
            """)
    }

    @Test("kill -9 after confirmed parts and between UploadPart and its ETag: ListParts resumes, bytes identical")
    func killDuringMultipart() async throws {
        let bucket = try await S3TestBucket.make()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(bucket.endpoint))
        // Part 9 reaches the store, but its answer is held back long enough to kill the daemon first.
        try await proxy.add(["method": "PUT", "target": "partNumber=9&", "action": "hold", "seconds": 120])
        // 8 MiB/s: seconds between the third part and the ninth, room for a loaded machine to see the first and kill.
        let sandbox = try Sandbox(destination: "s3", destination(bucket, endpoint: proxy.url("")), bandwidth: 8 << 20)
        let size = 100 << 20
        let source = try sandbox.makeRandomFile(sandbox.root + "/survey.bin", size: size)
        let expected = try sha256(ofFile: source)
        let id = try await BinaryRunner.enqueue([source, "--destination", "s3", "--config", sandbox.configPath])
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        func job() throws -> Job { try #require(try store.job(id)) }
        func state() throws -> S3ResumeState? { S3ResumeState(json: try job().resumeState) }

        // 1. After some parts were confirmed.
        var daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-1", environment: S3TestBucket.environment)
        let someParts = try await eventually(timeout: .seconds(60)) { try job().bytesConfirmed >= Int64(3 * Self.part) }
        #expect(someParts, "daemon log:\n\(daemon.log.suffix(2000))")
        await daemon.kill9()
        let first = try #require(try state())
        #expect(first.parts.count >= 3 && first.parts.count < 9)

        // 2. Part 9 is stored, its ETag not saved yet.
        daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-2", environment: S3TestBucket.environment)
        let held = try await eventually(timeout: .seconds(60)) {
            try await proxy.requests().contains { $0["held"] as? Bool == true && $0["upstream_status"] as? Int == 200 }
        }
        #expect(held, "daemon log:\n\(daemon.log.suffix(2000))")
        await daemon.kill9()
        let second = try #require(try state())
        #expect(second.uploadID == first.uploadID, "the restart resumed the same upload")
        #expect(second.parts.map(\.number) == Array(1...8), "part 9 was stored but not saved")

        // 3. To the end.
        daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-3", environment: S3TestBucket.environment)
        let finished = try await eventually(timeout: .seconds(120)) { try job().state == .uploaded }
        #expect(finished, "daemon log:\n\(daemon.log.suffix(3000))")
        let done = try job()
        let key = "\(PathTemplate.utcDay(done.createdAt))/\(id)-survey.bin"
        #expect(done.remoteURL == "\(proxy.url(""))/\(bucket.name)/\(key)")
        await #expect(try sha256(ofFile: try bucket.download(key, to: sandbox.root + "/downloaded")) == expected)
        #expect(try await bucket.openUploads().isEmpty)

        let requests = try await proxy.requests()
        let partNine = requests.filter { ($0["path"] as? String)?.contains("partNumber=9&") == true }
        #expect(partNine.count == 1, "ListParts found part 9: it was not sent again")
        let listings = requests.filter { $0["method"] as? String == "GET" }
        #expect(listings.count == 2, "one ListParts per restart")
        let creates = requests.filter { ($0["path"] as? String)?.hasSuffix("?uploads=") == true }
        #expect(creates.count == 1)
        let attempts = try store.attempts(of: id)
        let story = attempts.map { "\($0.number): \($0.startOffset)→\($0.endOffset ?? -1) \($0.outcome ?? "-")" }
        #expect(attempts.count == 3, "\(story)")
        #expect(attempts.prefix(2).allSatisfy { $0.outcome == "interrupted" } && attempts.last?.outcome == "uploaded")
        #expect(attempts.dropFirst().allSatisfy { $0.startOffset >= Int64(3 * Self.part) }, "\(story)")
        let sent = try await proxy.bodyBytes()
        print("s3 crash test: \(sent) bytes sent through the proxy for a \(size)-byte file with 2 kills "
            + "(\(String(format: "%.2f", Double(sent - size) / Double(Self.part))) parts re-sent)")
        #expect(sent <= size + 2 * Self.part * 2, "sent \(sent) bytes for a \(size)-byte file and 2 kills")
        let status = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let counts = try #require((try status.json() as? [String: Any])?["counts"] as? [String: Int])
        #expect(counts["uploaded"] == 1 && counts["uploading"] == 0)
        #expect(await daemon.terminate() < .seconds(5))
        let secret = try #require(S3TestBucket.environment["UPLOADQ_TEST_MOTO_SECRET"])
        for name in ["daemon-1", "daemon-2", "daemon-3"] {
            let log = try String(contentsOfFile: sandbox.root + "/\(name).log", encoding: .utf8)
            #expect(!log.contains(secret) && !log.contains("Signature="), "\(name) logged a secret")
        }
        #expect(!status.stdout.contains(secret))
    }

    @Test("200 photos of 50–500 KiB through the daemon: every one arrives whole; status counts match")
    func manyPhotos() async throws {
        let bucket = try await S3TestBucket.make()
        let sandbox = try Sandbox(destination: "s3", destination(bucket, endpoint: bucket.endpoint))
        var generator = SeededGenerator(seed: 60)
        var files: [String: (size: Int, md5: String)] = [:]
        for index in 0..<200 {
            let size = Int.random(in: 50 << 10...500 << 10, using: &generator)
            let path = try sandbox.makeFile(sandbox.root + "/photos/IMG_\(1000 + index).jpg", size: size,
                                            seed: UInt64(1000 + index))
            files[(path as NSString).lastPathComponent] = (size, try md5(ofFile: path))
        }
        let paths = files.keys.sorted().map { sandbox.root + "/photos/" + $0 }
        let enqueued = try await BinaryRunner.run(["enqueue"] + paths + ["--destination", "s3", "--config", sandbox.configPath])
        #expect(enqueued.status == 0, "\(enqueued.stderr)")
        let daemon = try DaemonProcess(sandbox: sandbox, environment: S3TestBucket.environment)
        var counts: [String: Int] = [:]
        let done = try await eventually(timeout: .seconds(120)) {
            let status = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
            counts = (try status.json() as? [String: Any])?["counts"] as? [String: Int] ?? [:]
            return counts["uploaded"] == 200
        }
        #expect(done, "counts \(counts); daemon log:\n\(daemon.log.suffix(2000))")
        #expect(counts["pending"] == 0 && counts["uploading"] == 0 && counts["failed"] == 0)
        #expect(await daemon.terminate() < .seconds(5))

        let (status, body) = try await TestHTTP.request("GET", "\(bucket.endpoint)/\(bucket.name)?list-type=2&max-keys=1000")
        #expect(status == 200)
        let objects = try #require(S3XMLElement.parse(Array(body))).children("Contents")
        #expect(objects.count == 200)
        for object in objects {
            let key = try #require(object.value("Key"))
            let name = String(try #require(key.split(separator: "/").last).split(separator: "-").last ?? "")
            let file = try #require(files[name], "unexpected key \(key)")
            #expect(object.value("Size") == String(file.size), "\(key)")
            #expect(object.value("ETag") == "\"\(file.md5)\"", "\(key)")
        }
    }

    /// Hex MD5 of a file (what a PutObject's ETag is), through libcrypto.
    func md5(ofFile path: String) throws -> String {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let context = try #require(uploadq_md5_new())
        data.withUnsafeBytes { _ = uploadq_sha256_update(context, $0.baseAddress, $0.count) }
        var digest = [UInt8](repeating: 0, count: 16)
        #expect(uploadq_md5_finish(context, &digest) == 0)
        return digest.map { String(format: "%02x", $0) }.joined()
    }
}
