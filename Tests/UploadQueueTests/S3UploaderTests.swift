import Foundation
import Testing
@testable import UploadQueue

/// S3 destinations against moto_server: PutObject and multipart uploads, resume from ListParts, the answers S3
/// gives when things go wrong (conformance 16–18, 21 of PROTOCOLS.md), abort on cancel, and signatures checked by
/// a moto that enforces them (20).
struct S3UploaderTests {
    static let mebibyte = 1 << 20

    func sandbox(_ bucket: S3TestBucket, endpoint: String? = nil, extra: String = "", retry: String = "300ms",
                 bandwidth: Int64 = 0) throws -> Sandbox {
        try Sandbox(destination: "s3", bucket.destination(endpoint: endpoint, """
            key_template = "{meta.album}/{job_id}-{name}"
            part_size = "5MiB"
            multipart_threshold = "6MiB"
            \(extra)
            """), retry: retry, bandwidth: bandwidth)
    }

    @Test("a small file is one PutObject: key from the template, content type and meta stored, remote_url set")
    func putObject() async throws {
        let bucket = try await S3TestBucket.make()
        let sandbox = try sandbox(bucket, extra: #"public_url_template = "https://cdn.example.com/{key}?u={url}""#)
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/Été 2026 (1).jpg", size: 300_000, seed: 40)
        let id = try await running.enqueue(path, to: "s3", meta: ["album": "../trip/x", "Caption": "Plage à Nice",
                                                                   "bad key": "dropped"])
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let key = "_._trip_x/\(id)-Été 2026 (1).jpg"
        #expect(try await bucket.keys() == [key])
        let objectURL = "\(bucket.endpoint)/\(bucket.name)/_._trip_x/\(id)-%C3%89t%C3%A9%202026%20%281%29.jpg"
        #expect(job.remoteURL == "https://cdn.example.com/_._trip_x/\(id)-%C3%89t%C3%A9%202026%20%281%29.jpg?u=\(objectURL)")
        let (status, headers) = try await bucket.head(key)
        #expect(status == 200)
        #expect(headers["content-length"] == "300000")
        #expect(headers["content-type"] == job.contentType)
        #expect(headers["x-amz-meta-album"] == "../trip/x")
        #expect(headers["x-amz-meta-caption"] == "=?UTF-8?B?\(Data("Plage à Nice".utf8).base64EncodedString())?=")
        #expect(headers["x-amz-meta-bad key"] == nil)
        let copy = try bucket.download(key, to: sandbox.root + "/downloaded")
        #expect(try sha256(ofFile: copy) == job.sha256)
    }

    @Test("a zero-byte file is an empty object")
    func zeroBytes() async throws {
        let bucket = try await S3TestBucket.make()
        let sandbox = try sandbox(bucket)
        let (job, _) = try await sandbox.uploadOne("empty.txt", size: 0, seed: 0, to: "s3")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let (status, headers) = try await bucket.head("\(job.id)-empty.txt")
        #expect(status == 200)
        #expect(headers["content-length"] == "0")
    }

    @Test("a file above the threshold goes up in 5 MiB parts and completes with a multipart ETag")
    func multipart() async throws {
        let bucket = try await S3TestBucket.make()
        let proxy = try await FaultProxy.start(upstream: try TestServers.authority(bucket.endpoint))
        let sandbox = try sandbox(bucket, endpoint: proxy.url(""))
        let (job, attempts) = try await sandbox.uploadOne("video.bin", size: 12 * Self.mebibyte + 123, seed: 41,
                                                          to: "s3")
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(attempts.count == 1)
        let key = "\(job.id)-video.bin"
        let (_, headers) = try await bucket.head(key)
        #expect(headers["etag"]?.hasSuffix("-3\"") == true, "\(headers)")
        #expect(try sha256(ofFile: try bucket.download(key, to: sandbox.root + "/copy")) == job.sha256)
        let parts = try await proxy.requests().filter { ($0["path"] as? String)?.contains("partNumber=") == true }
        #expect(parts.count == 3)
        for part in parts {
            let headers = try #require(part["headers"] as? [String: String])
            #expect(headers["content-md5"] != nil)
            #expect(headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD")
            #expect(headers["authorization"]?.hasPrefix("AWS4-HMAC-SHA256 Credential=AKIDTESTUPLOADQ/") == true)
        }
        #expect(try await bucket.openUploads().isEmpty)
    }
}
