import Foundation
import Testing
@testable import UploadQueue

/// tus 1.0 against tuspyserver (directly, or through the fault proxy for what a healthy server never does):
/// the conformance cases of PROTOCOLS.md.
@Suite(.serialized)
struct TusUploaderTests {
    func tusSandbox(endpoint: String, extra: String = "", chunk: String = "256KiB") throws -> Sandbox {
        try Sandbox(destination: "tus", """
            protocol = "tus"
            url = "\(endpoint)"
            chunk_size = "\(chunk)"
            stall_timeout = "2s"
            \(extra)
            """)
    }

    @Test("a file goes up in chunks and arrives byte-identical; remote_url is the upload URL")
    func basicUpload() async throws {
        let sandbox = try tusSandbox(endpoint: try TestServers.tusEndpoint())
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 1_000_000, seed: 1)
        let id = try await running.enqueue(path, to: "tus")
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let remote = try #require(job.remoteURL)
        #expect(remote.hasPrefix(try TestServers.tusEndpoint()))
        #expect(try sha256(ofFile: try TestServers.tusStoredFile(uploadURL: remote)) == job.sha256)
        #expect(job.bytesConfirmed == 1_000_000)
    }
}
