import Foundation
import Testing
@testable import UploadQueue

/// Names that do not fit their target: S3 keys past 1,024 bytes, URL path segments past 255 bytes, URLs past a
/// server's request line. Shortened by the one rule, or failed for good with the reason: never retried for ever.
struct NameLimitTests {
    let id = JobID.generate(at: Date(timeIntervalSince1970: 1_800_000_000))

    @Test("a name that starts with a combining mark: the slash before it still cuts (found by the templates fuzzer)")
    func combiningMarkAfterSlash() {
        let name = "\u{301}" + String(repeating: "é", count: 200) + ".jpg"  // 406 bytes, a mark first
        let fitted = FileName.fittingPath("2026-11-24/" + name, under: "/srv/photos", jobID: id)
        let parts = fitted.utf8.split(separator: UInt8(ascii: "/")).map { Array($0) }
        #expect(parts.count == 4 && parts.allSatisfy { $0.count <= FileName.componentLimit }, "\(parts.map(\.count))")
        #expect(fitted.hasPrefix("/srv/photos/2026-11-24/\u{301}"))
        #expect(SigV4Signer.encodePath("a/\u{301}b") == "a/%CC%81b", "the slash is not encoded into the key")
        #expect(PathSegments.split("a/\u{301}b//c", omittingEmpty: false) == ["a", "\u{301}b", "", "c"])
    }

    @Test("an S3 key past 1,024 bytes keeps its folders and has its last segment shortened; folders that leave no room are refused")
    func objectKeys() throws {
        let folders = String(repeating: "album-é ", count: 60) + "/"
        let key = folders + "\(id)-" + String(repeating: "très long titre ", count: 60) + ".jpg"
        #expect(key.utf8.count > FileName.objectKeyLimit)
        let fitted = try #require(FileName.fittingKey(key, jobID: id))
        #expect(fitted.utf8.count <= FileName.objectKeyLimit)
        #expect(fitted.hasPrefix(folders) && fitted.hasSuffix(".jpg") && fitted.contains(id.rawValue))
        #expect(FileName.fittingKey(fitted, jobID: id) == fitted, "the same key every time")
        #expect(FileName.fittingKey("short/\(id).jpg", jobID: id) == "short/\(id).jpg")
        #expect(FileName.fittingKey(String(repeating: "f", count: 1010) + "/\(id)-picture.jpg", jobID: id) == nil)
    }

    @Test("a URL path segment past 255 decoded bytes is shortened and encoded again; the query stays; a URL past 8,000 bytes is refused")
    func requestURLs() throws {
        let title = PercentEncoding.unreserved(String(repeating: "Été à Nice ", count: 30))
        let url = "https://h.example/up/\(id)-\(title).jpg?sig=abc"
        let fitted = try #require(FileName.fittingURL(url, jobID: id))
        let segment = try #require(fitted.split(separator: "?").first?.split(separator: "/").last)
        let decoded = try #require(String(segment).removingPercentEncoding)
        #expect(decoded.utf8.count <= FileName.componentLimit)
        #expect(decoded.hasPrefix(id.rawValue) && decoded.hasSuffix(".jpg"))
        #expect(fitted.hasPrefix("https://h.example/up/") && fitted.hasSuffix("?sig=abc"))
        #expect(FileName.fittingURL("https://h.example/a/b.jpg?x=1", jobID: id) == "https://h.example/a/b.jpg?x=1")
        let huge = "https://h.example/up/x.jpg?q=" + String(repeating: "a", count: FileName.urlLimit)
        #expect(FileName.fittingURL(huge, jobID: id) == nil)
    }

    @Test("file destination: a template result past 255 bytes is delivered under the shortened name, whole")
    func fileDestination() async throws {
        let sandbox = try Sandbox(config: """
            [destinations.long]
            protocol = "file"
            url = "file://uploaded"
            name_template = "{date}/{job_id}-{meta.title}-{name}"
            """)
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 40_000, seed: 501)
        let title = String(repeating: "très long titre ", count: 25)
        let id = try await running.enqueue(path, to: "long", meta: ["title": title])
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        let day = try #require(try FileManager.default.contentsOfDirectory(atPath: sandbox.target).first)
        let names = try FileManager.default.contentsOfDirectory(atPath: sandbox.target + "/" + day)
        let name = try #require(names.first)
        #expect(names.count == 1 && name.utf8.count <= 255 && name.hasPrefix(id.rawValue) && name.hasSuffix(".jpg"), "\(names)")
        #expect(try sha256(ofFile: sandbox.target + "/\(day)/\(name)") == job.sha256)
    }

    @Test("S3: a key past 1,024 bytes is stored shortened; a key whose folders alone are too long fails for good")
    func s3Keys() async throws {
        let bucket = try await S3TestBucket.make()
        let sandbox = try Sandbox(destination: "s3", bucket.destination("""
            key_template = "{meta.album}/{job_id}-{meta.title}-{name}"
            """), retry: "300ms")
        let running = try RunningQueue(sandbox)
        let first = try sandbox.makeFile(sandbox.root + "/a.jpg", size: 20_000, seed: 502)
        let second = try sandbox.makeFile(sandbox.root + "/b.jpg", size: 20_000, seed: 503)
        let album = String(repeating: "album ", count: 100)
        let title = String(repeating: "titre ", count: 90)
        let stored = try await running.enqueue(first, to: "s3", meta: ["album": album, "title": title])
        let refused = try await running.enqueue(second, to: "s3", meta: ["album": String(repeating: "x", count: 1100),
                                                                         "title": "t"])
        let ok = try await running.settled(stored)
        let failed = try await running.settled(refused)
        await running.stop()
        #expect(ok.state == .uploaded, "\(ok.lastError ?? "")")
        let keys = try await bucket.keys()
        #expect(keys.count == 1)
        let key = try #require(keys.first)
        #expect(key.utf8.count <= 1024 && key.hasPrefix(album + "/\(stored)-") && key.hasSuffix(".jpg"), "\(key)")
        #expect(failed.state == .failed && failed.permanent, "\(failed.state)")
        #expect(failed.lastError?.contains("S3 takes at most 1024") == true, "\(failed.lastError ?? "")")
        #expect(try running.attempts(refused).count == 1, "refused once, not retried")
    }

    @Test("HTTP PUT to nginx DAV: a URL segment past 255 bytes is shortened, so the server can store it")
    func davSegments() async throws {
        let sandbox = try Sandbox(destination: "dav", """
            protocol = "http-put"
            url = "\(try TestServers.davURL())/names/{job_id}-{meta.title}-{name}"
            """, retry: "300ms")
        let running = try RunningQueue(sandbox)
        let path = try sandbox.makeFile(sandbox.root + "/c.jpg", size: 30_000, seed: 504)
        let id = try await running.enqueue(path, to: "dav", meta: ["title": String(repeating: "Été à Nice ", count: 30)])
        let job = try await running.settled(id)
        await running.stop()
        #expect(job.state == .uploaded, "\(job.lastError ?? "")")
        #expect(try running.attempts(id).count == 1)
        let names = try FileManager.default.contentsOfDirectory(atPath: try TestServers.davRoot() + "/names")
        let name = try #require(names.first { $0.hasPrefix(id.rawValue) })
        #expect(name.utf8.count <= 255 && name.hasSuffix(".jpg"))
        #expect(try sha256(ofFile: try TestServers.davRoot() + "/names/" + name) == job.sha256)
    }
}
