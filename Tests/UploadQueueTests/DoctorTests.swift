import Foundation
import Testing
@testable import UploadQueue

/// `uploadq doctor` against the running test servers: all well when all is, and each kind of trouble reported
/// with what fixes it; nothing changed on the way.
@Suite(.serialized)
struct DoctorTests {
    /// The doctor's JSON findings and exit status.
    struct Report {
        var status: Int32
        var healthy: Bool
        var findings: [[String: String]]
        var text: String

        func findings(_ check: String) -> [[String: String]] { findings.filter { $0["check"] == check } }
    }

    func doctor(_ sandbox: Sandbox, environment: [String: String] = [:]) async throws -> Report {
        var env = S3TestBucket.environment
        env.merge(environment) { $1 }
        let output = try await BinaryRunner.run(["doctor", "--json", "--config", sandbox.configPath], environment: env)
        let object = try output.json() as? [String: Any]
        let findings = (object?["findings"] as? [[String: Any]] ?? []).map { finding in
            finding.compactMapValues { $0 as? String }
        }
        return Report(status: output.status, healthy: object?["healthy"] as? Bool ?? false, findings: findings,
                      text: output.stdout + output.stderr)
    }

    /// A sandbox whose destinations are the test servers, each set up right, with a queue and a droppers' spool.
    func healthySandbox() async throws -> Sandbox {
        let bucket = try await S3TestBucket.make()
        let tls = try TestServers.address("UPLOADQ_TEST_DAV_TLS_URL")
        let caFile = try TestServers.address("UPLOADQ_TEST_CA_FILE")
        let sandbox = try Sandbox(config: """
            [destinations.tus]
            protocol = "tus"
            url = "\(try TestServers.tusEndpoint())"
            [destinations.bucket]
            \(bucket.destination())
            [destinations.dav]
            protocol = "http-put"
            url = "\(try TestServers.davURL())/doctor/{job_id}"
            [destinations.tls]
            protocol = "http-put"
            url = "\(tls)/doctor/{job_id}"
            ca_file = "\(caFile)"
            [destinations.secure]
            protocol = "s3"
            endpoint = "\(try TestServers.address("UPLOADQ_TEST_S3_AUTH_ENDPOINT"))"
            bucket = "secure"
            access_key_env = "UPLOADQ_TEST_S3_AUTH_ACCESS_KEY"
            secret_key_env = "UPLOADQ_TEST_S3_AUTH_SECRET_KEY"
            """)
        // A queue with a job in it (the CLI makes the state directory 0700), and a spool droppers may write to.
        try sandbox.makeFile(sandbox.root + "/a.jpg", size: 1000, seed: 1)
        let enqueued = try await BinaryRunner.run(["enqueue", sandbox.root + "/a.jpg", "--config", sandbox.configPath])
        #expect(enqueued.status == 0, "\(enqueued.stderr)")
        try FileManager.default.createDirectory(atPath: sandbox.spool, withIntermediateDirectories: true)
        #expect(chmod(sandbox.spool, 0o3770) == 0)
        return sandbox
    }

    @Test("all well against the running test servers: every destination reached with its credentials; nothing changed")
    func healthy() async throws {
        let sandbox = try await healthySandbox()
        let before = try FileManager.default.subpathsOfDirectory(atPath: sandbox.root).sorted()
        let report = try await doctor(sandbox)
        #expect(report.status == 0, "\(report.text)")
        #expect(report.healthy)
        #expect(report.findings.allSatisfy { $0["severity"] != "failure" }, "\(report.findings)")
        for name in ["tus", "bucket", "dav", "tls", "secure"] {
            let found = report.findings("destination \(name)")
            #expect(found.count == 1 && found.first?["severity"] == "ok", "\(name): \(found)")
        }
        #expect(report.findings("destination tls").first?["message"]?.contains("TLS (ca_file") == true)
        #expect(report.findings("destination secure").first?["message"]?.contains("answered 200") == true)
        #expect(report.findings("database").first?["message"]?.contains("quick_check ok; jobs: 1 pending or uploading") == true,
                "\(report.findings("database"))")
        #expect(report.findings("spool").first?["severity"] == "ok", "\(report.findings("spool"))")
        for check in ["config", "state", "limits", "link", "networkmanager", "power"] {
            #expect(!report.findings(check).isEmpty, "no \(check) finding")
        }
        let after = try FileManager.default.subpathsOfDirectory(atPath: sandbox.root).sorted()
        #expect(before == after, "the doctor changed the sandbox")
        // The text form says the same, and ends with the verdict.
        let text = try await BinaryRunner.run(["doctor", "--config", sandbox.configPath], environment: S3TestBucket.environment)
        #expect(text.status == 0)
        #expect(text.stdout.hasSuffix("all well\n") || text.stdout.contains("all well ("), "\(text.stdout)")
    }

    @Test("each trouble is reported with its fix: wrong S3 secret, tus down, untrusted CA, spool modes, corrupt database")
    func troubles() async throws {
        let good = try await healthySandbox()
        let tls = try TestServers.address("UPLOADQ_TEST_DAV_TLS_URL")
        setenv("UPLOADQ_TEST_S3_WRONG_SECRET", "not/the+secret", 1)
        let sandbox = try Sandbox(config: """
            [destinations.down]
            protocol = "tus"
            url = "http://127.0.0.1:1/files/"
            [destinations.untrusted]
            protocol = "http-put"
            url = "\(tls)/doctor/{job_id}"
            [destinations.secure]
            protocol = "s3"
            endpoint = "\(try TestServers.address("UPLOADQ_TEST_S3_AUTH_ENDPOINT"))"
            bucket = "secure"
            access_key_env = "UPLOADQ_TEST_S3_AUTH_ACCESS_KEY"
            secret_key_env = "UPLOADQ_TEST_S3_WRONG_SECRET"
            """)
        // A copy of a real queue, damaged.
        try FileManager.default.createDirectory(atPath: sandbox.state, withIntermediateDirectories: true)
        #expect(chmod(sandbox.state, 0o700) == 0)
        let copy = sandbox.state + "/queue.sqlite"
        // All of it in the main file: the CLI's last commits may still be in the WAL when it exits.
        let original = try QueueDatabase.open(path: good.state + "/queue.sqlite")
        try await original.writer.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        try FileManager.default.copyItem(atPath: good.state + "/queue.sqlite", toPath: copy)
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: copy))
        let size = try handle.seekToEnd()
        #expect(size > 8192)
        try handle.seek(toOffset: 4096)
        try handle.write(contentsOf: Data(repeating: 0xA5, count: Int(size) - 4096))
        try handle.close()
        // A spool anyone may write to, without the sticky bit.
        try FileManager.default.createDirectory(atPath: sandbox.spool, withIntermediateDirectories: true)
        #expect(chmod(sandbox.spool, 0o777) == 0)

        let report = try await doctor(sandbox)
        #expect(report.status == 1, "\(report.text)")
        #expect(!report.healthy)
        func expectFailure(_ check: String, says: String, fix: String, sourceLocation: SourceLocation = #_sourceLocation) {
            let found = report.findings(check).filter { $0["severity"] == "failure" }
            #expect(found.contains { ($0["message"] ?? "").contains(says) && ($0["fix"] ?? "").contains(fix) },
                    "\(check): \(report.findings(check))", sourceLocation: sourceLocation)
        }
        expectFailure("destination down", says: "TCP: 127.0.0.1:1 does not accept connections", fix: "server running")
        expectFailure("destination untrusted", says: "certificate is not trusted by the system CAs", fix: "ca_file")
        expectFailure("destination secure", says: "SignatureDoesNotMatch", fix: "secret key")
        expectFailure("spool", says: "writable by every user", fix: "chmod 3770 \(sandbox.spool)")
        expectFailure("database", says: sandbox.state + "/queue.sqlite", fix: ".recover")
        // Nothing secret in what it says.
        #expect(!report.text.contains("not/the+secret"))

        // A spool only its owner can write to is a warning with its fix, not a failure.
        #expect(chmod(sandbox.spool, 0o755) == 0)
        let owned = try await doctor(sandbox)
        #expect(owned.findings("spool").contains { $0["severity"] == "warning" && ($0["fix"] ?? "").contains("chmod 3770") },
                "\(owned.findings("spool"))")
    }

    @Test("a clock 10 minutes ahead (the wall-clock shim) is reported for each server, with the fix")
    func clockSkew() async throws {
        let sandbox = try await healthySandbox()
        let clock = try ClockShim(file: sandbox.root + "/clock-offset", offset: 600)
        let report = try await doctor(sandbox, environment: clock.environment)
        #expect(report.status == 1, "\(report.text)")
        for name in ["tus", "bucket", "dav"] {
            #expect(report.findings("destination \(name)").contains {
                $0["severity"] == "failure" && ($0["message"] ?? "").contains("clock is 10 minutes ahead of")
                    && ($0["fix"] ?? "").contains("timedatectl set-ntp true")
            }, "\(name): \(report.findings("destination \(name)"))")
        }
    }

    @Test("a config that does not load is the one finding, with file and line, and exit 1")
    func brokenConfig() async throws {
        let sandbox = try Sandbox()
        try "[limits]\nconcurrency = \"many\"\n".write(toFile: sandbox.configPath, atomically: true, encoding: .utf8)
        let report = try await doctor(sandbox)
        #expect(report.status == 1)
        #expect(report.findings.count == 1)
        #expect(report.findings.first?["check"] == "config")
        #expect(report.findings.first?["message"]?.contains("\(sandbox.configPath):2: key `limits.concurrency`") == true)
        #expect(report.findings.first?["fix"]?.contains("edit \(sandbox.configPath):2") == true)
    }
}

extension DoctorTests {
    @Test("while the daemon runs, the doctor reads the queue beside it and reports the daemon's link")
    func besideDaemon() async throws {
        let sandbox = try Sandbox()
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let report = try await doctor(sandbox)
        #expect(report.findings("database").first?["severity"] == "ok", "\(report.findings("database"))")
        #expect(report.findings("destination default").first?["severity"] != "failure")
        #expect(await daemon.terminate() < .seconds(5))
    }
}
