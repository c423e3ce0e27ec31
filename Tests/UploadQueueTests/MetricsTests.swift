import Foundation
import Testing
@testable import UploadQueue

/// The Prometheus text the daemon writes for node_exporter and `status --prometheus` prints, read back by the
/// reference parser (`prometheus_client` in the test virtualenv).
struct MetricsTests {
    /// The samples of a Prometheus text, as the Python client parses them: "name{labels}" → value.
    static func parse(_ text: String) async throws -> [String: Double] {
        let python = ConfigurationTests.repositoryRoot + "/.build-venv/bin/python"
        let script = """
            import json, sys
            from prometheus_client.parser import text_string_to_metric_families
            out = {}
            for family in text_string_to_metric_families(sys.stdin.read()):
                for sample in family.samples:
                    labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                    out[sample.name + ("{" + labels + "}" if labels else "")] = sample.value
            print(json.dumps(out))
            """
        let (status, data, errors) = try await ChildProcess.run([python, "-c", script], executable: python,
                                                          environment: ProcessInfo.processInfo.environment,
                                                          input: .bytes(Data(text.utf8)))
        let problem = String(decoding: errors, as: UTF8.self)
        #expect(status == 0, "the parser refused the text: \(problem)")
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Double])
    }

    @Test("[metrics] textfile is rewritten while the queue runs and parses; status --prometheus prints the same")
    func textfile() async throws {
        let sandbox = try Sandbox(config: """
            [metrics]
            textfile = "metrics.prom"
            interval = "200ms"
            """)
        let running = try RunningQueue(sandbox)
        for seed in 90..<93 {
            _ = try await running.enqueue(try sandbox.makeFile(sandbox.root + "/m\(seed).jpg", size: 10_000, seed: UInt64(seed)),
                                          to: "default")
        }
        let path = sandbox.root + "/metrics.prom"
        let written = await eventually(timeout: .seconds(20)) {
            ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").contains("uploadq_jobs{state=\"uploaded\"} 3")
        }
        #expect(written)
        let samples = try await Self.parse(try String(contentsOfFile: path, encoding: .utf8))
        await running.stop()
        #expect(samples["uploadq_up"] == 1)
        #expect(samples["uploadq_jobs{state=\"uploaded\"}"] == 3)
        #expect(samples["uploadq_job_bytes{state=\"uploaded\"}"] == 30_000)
        #expect(samples["uploadq_link_class{class=\"unmetered\"}"] != nil)
        #expect(samples["uploadq_failed_attempts"] == 0)
        #expect(samples["uploadq_patches{state=\"pending\"}"] == 0)
        let final = try await Self.parse(try String(contentsOfFile: path, encoding: .utf8))
        #expect(final["uploadq_up"] == 0, "the last write after the stop says nobody runs the queue")
        let cli = try await BinaryRunner.run(["status", "--prometheus", "--config", sandbox.configPath])
        #expect(cli.status == 0)
        let printed = try await Self.parse(cli.stdout)
        #expect(printed["uploadq_jobs{state=\"uploaded\"}"] == 3)
    }

    @Test("label values with quotes, backslashes and newlines stay parseable")
    func escaping() async throws {
        var summary = QueueSummary(counts: [:], bytes: [:], waiting: [:], permanentFailures: 0, active: [],
                                   nextAttemptAt: nil, patches: [:])
        summary.openCircuits = ["odd \"name\"\\\nx"]
        let status = QueueStatus(runnerPID: nil, link: .assumedUnmetered, summary: summary,
                                 traffic: ["odd \"name\"\\\nx": ["metered": 5]])
        let samples = try await Self.parse(PrometheusText.render(status))
        #expect(samples.keys.contains { $0.hasPrefix("uploadq_sent_bytes_total{") && $0.contains("metered") })
        #expect(samples.values.contains(5))
    }

    @Test("a link planted where the temporary would go is neither followed nor replaced; no temporary is left")
    func plantedLinks() throws {
        let directory = FileManager.default.temporaryDirectory.path + "/uploadq-textfile-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let victim = directory + "/victim"
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: victim))
        // The names a group member could guess: the old fixed one, and the new pattern's fixed part.
        #expect(symlink(victim, directory + "/uploadq.prom.tmp") == 0)
        #expect(symlink(victim, directory + "/.uploadq.prom.tmp") == 0)
        try PrometheusText.write("uploadq_up 1\n", to: directory + "/uploadq.prom")
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "keep me")
        #expect(try String(contentsOfFile: directory + "/uploadq.prom", encoding: .utf8) == "uploadq_up 1\n")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        #expect(names == [".uploadq.prom.tmp", "uploadq.prom", "uploadq.prom.tmp", "victim"], "\(names)")
    }
}
