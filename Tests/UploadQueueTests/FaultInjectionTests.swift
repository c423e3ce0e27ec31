import Foundation
import Testing
@testable import UploadQueue

/// Many uploads through a hostile network: connections reset at random offsets, one 40 s stall, a burst of 503
/// with Retry-After. Every file must arrive intact, and each job's attempt history must say what happened.
@Suite(.serialized)
struct FaultInjectionTests {
    @Test("20 files of 1–30 MiB through resets, a 40 s stall and a 503 burst all arrive intact")
    func hostileNetwork() async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        var generator = SeededGenerator(seed: 2026)
        // First, so it sees every PATCH: the 31st long enough is stalled, whatever the resets do.
        try await proxy.add(["method": "PATCH", "skip": 30, "action": "stall", "after_bytes": 1000, "seconds": 40])
        for skip in stride(from: 4, to: 160, by: 13) {
            let offset = Int.random(in: 1...(1 << 20), using: &generator)
            // Twice: libcurl silently resends a request once when a reused connection dies before any answer.
            try await proxy.add(["method": "PATCH", "skip": skip, "times": 2, "action": "reset", "after_bytes": offset])
        }
        try await proxy.add(["method": "POST", "skip": 6, "times": 2, "action": "close"])
        try await proxy.add(["method": "PATCH", "skip": 60, "times": 6, "action": "respond", "status": 503,
                             "headers": ["Retry-After": "1"], "body": "overloaded"])
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(proxy.url("/files/"))"
            chunk_size = "1MiB"
            stall_timeout = "3s"
            circuit_probe_interval = "1s"
            """, retry: "300ms", concurrency: 4)
        let running = try RunningQueue(sandbox)
        var ids: [JobID] = []
        var total = 0
        for index in 0..<20 {
            let size = Int.random(in: (1 << 20)...(30 << 20), using: &generator)
            total += size
            let path = try sandbox.makeRandomFile(sandbox.root + "/in/file-\(index).bin", size: size)
            ids.append(try await running.enqueue(path, to: "tus", mode: .reference))
        }
        var histories: [String] = []
        var attemptsByUpload: [String: [JobAttempt]] = [:]
        for id in ids {
            let job = try await running.settled(id, timeout: .seconds(240))
            #expect(job.state == .uploaded, "\(job.lastError ?? "")")
            guard let remote = job.remoteURL else { continue }
            #expect(try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: remote)) == job.sha256)
            let attempts = try running.attempts(id)
            histories += attempts.compactMap(\.error)
            attemptsByUpload[URL(string: remote)?.lastPathComponent ?? remote] = attempts
        }
        await running.stop()
        let sent = try await proxy.bodyBytes()
        print("fault test: \(ids.count) files, \(total) bytes, \(sent) sent, \(histories.count) failed attempts")
        let requests = try await proxy.requests()
        let stalled = requests.filter { $0["action"] as? String == "stall" }
        #expect(stalled.count == 1)
        #expect(histories.contains { $0.contains("stalled") }, """
            \(histories)
            \(Self.story(of: stalled.first, requests: requests, attempts: attemptsByUpload))
            """)
        #expect(histories.contains { $0.contains("HTTP 503") && $0.contains("overloaded") }, "\(histories)")
        // A failure's own words, not the note of one libcurl recovered from by resending. A resend cut again has
        // no words of libcurl's (it writes a transfer's first error only): its receive failure is the reset.
        let causes = histories.map { $0.components(separatedBy: "; libcurl had resent").first ?? $0 }
        #expect(causes.filter { $0.localizedCaseInsensitiveContains("reset") || $0.contains("without an answer")
                                || $0.contains("Failure when receiving data") }.count >= 3, "\(histories)")
    }

    /// What happened to the upload the proxy stalled: every request the proxy saw for it and the job's attempts,
    /// for a failure message that shows where the stall went.
    private static func story(of stalled: [String: Any]?, requests: [[String: Any]],
                              attempts: [String: [JobAttempt]]) -> String {
        guard let path = stalled?["path"] as? String else { return "no request was stalled" }
        let upload = path.split(separator: "/").last.map(String.init) ?? path
        let seen = requests.filter { ($0["path"] as? String) == path }.map { request in
            let headers = request["headers"] as? [String: Any] ?? [:]
            return "\(request["method"] ?? "?") offset \(headers["upload-offset"] ?? "-") "
                + "action \(request["action"] ?? "-") body \(request["body_bytes"] ?? "?") "
                + "status \(request["status"] ?? "-") upstream \(request["upstream_status"] ?? "-")"
        }
        let tried = (attempts[upload] ?? []).map { attempt in
            "#\(attempt.number) \(attempt.startOffset)→\(attempt.endOffset.map(String.init) ?? "-") "
                + "\(attempt.outcome ?? "running"): \(attempt.error ?? "")"
        }
        return "requests for \(upload):\n  " + seen.joined(separator: "\n  ")
            + "\nits job's attempts:\n  " + tried.joined(separator: "\n  ")
    }
}
