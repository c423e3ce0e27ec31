import Foundation
import Testing
@testable import UploadQueue

/// A tus server that answers nonsense: each reply ends in a clear `last_error`, never a crash, and never a job
/// left `uploading`; an answer that proves nothing (no Location, not 201, no Tus-Resumable) fails nothing for
/// good: the job waits and goes once the server answers as tus does.
struct BadReplyTests {
    @Test("bad tus replies end in a clear last_error and a settled job", arguments: [
        ("garbage Upload-Offset", ["method": "PATCH", "action": "rewrite", "set_headers": ["Upload-Offset": "banana"]],
         false, "Upload-Offset \"banana\" is not a number"),
        ("offset beyond the file", ["method": "PATCH", "action": "rewrite", "set_headers": ["Upload-Offset": "9000000"]],
         true, "offset 9000000"),
        ("offset beyond what was sent", ["method": "PATCH", "action": "rewrite", "set_headers": ["Upload-Offset": "500000"]],
         false, "acknowledged offset 500000"),
        ("missing Location", ["method": "POST", "action": "rewrite", "remove_headers": ["Location"]],
         false, "answered HTTP 201 without a Location"),
        ("a creation answered 200, not 201", ["method": "POST", "action": "rewrite", "set_status": 200],
         false, "answered HTTP 200 where a tus server answers 201 Created"),
        ("an answer without Tus-Resumable", ["method": "PATCH", "action": "rewrite", "remove_headers": ["Tus-Resumable"]],
         false, "without Tus-Resumable"),
        ("HTML error page", ["method": "PATCH", "action": "respond", "status": 502,
                             "body": "<html><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>"],
         false, "HTTP 502 from PATCH"),
        ("connection closed before headers", ["method": "PATCH", "action": "close", "times": 2],
         false, "closed the connection without an answer"),
        ("a server that keeps nothing it is sent", ["method": "PATCH", "action": "truncate", "after_bytes": 0, "times": 3],
         false, "kept none of the last 3 chunks"),
    ] as [(String, [String: any Sendable], Bool, String)])
    func badReply(name: String, rule: [String: any Sendable], permanent: Bool, text: String) async throws {
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(try TestServers.tusEndpoint()))
        try await proxy.add(rule.mapValues { $0 as Any })
        let sandbox = try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(proxy.url("/files/"))"
            chunk_size = "256KiB"
            circuit_probe_interval = "500ms"
            """, retry: "300ms")
        let (job, attempts) = try await sandbox.uploadOne("f.bin", size: 700_000, seed: 80, to: "tus")
        #expect(job.state != .uploading)
        let first = try #require(attempts.first?.error, "\(name): no error recorded")
        #expect(first.contains(text), "\(name): \(first)")
        #expect(!first.contains("<h1>"))
        if permanent {
            #expect(job.state == .failed && job.permanent, "\(name)")
        } else {
            #expect(job.state == .uploaded, "\(name): a transient bad reply is retried: \(job.lastError ?? "")")
            #expect(try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: try #require(job.remoteURL))) == job.sha256)
        }
    }
}
