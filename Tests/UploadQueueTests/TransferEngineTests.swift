import Foundation
import Synchronization
import Testing
@testable import UploadQueue

/// The libcurl engine on its own (against nginx DAV and the recorder), and the pure pieces around it: body
/// reading, Retry-After, redaction, error classification, URL templates, tus metadata.
struct TransferEngineTests {
    @Test("a body made of bytes and file ranges is read in order, and rewinds when libcurl seeks")
    func bodyReader() throws {
        let sandbox = try Sandbox()
        let path = try sandbox.makeFile(sandbox.root + "/f.bin", size: 1000, seed: 60)
        let descriptor = open(path, O_RDONLY)
        defer { close(descriptor) }
        let file = try Data(contentsOf: URL(fileURLWithPath: path))
        let body = RequestBody.sequence([.bytes(Array("head".utf8)), .empty,
                                         .file(descriptor: descriptor, offset: 100, length: 300), .bytes(Array("tail".utf8))])
        #expect(body.length == 308)
        let reader = RequestBodyReader(body)
        func readAll(step: Int) -> [UInt8] {
            var out: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: step)
            while true {
                let count = buffer.withUnsafeMutableBytes { reader.read(into: $0) } ?? -1
                if count <= 0 { break }
                out += buffer[0..<count]
            }
            return out
        }
        let expected = Array("head".utf8) + Array(file[100..<400]) + Array("tail".utf8)
        #expect(readAll(step: 7) == expected)
        #expect(reader.seek(to: 2))
        #expect(readAll(step: 1000) == Array(expected.dropFirst(2)))
        #expect(!reader.seek(to: 309))

        let short = RequestBodyReader(.file(descriptor: descriptor, offset: 900, length: 300))
        var buffer = [UInt8](repeating: 0, count: 512)
        let first = buffer.withUnsafeMutableBytes { short.read(into: $0) }
        #expect(first == 100)
        let second = buffer.withUnsafeMutableBytes { short.read(into: $0) }
        #expect(second == nil)
        #expect(short.failure?.contains("shrank") == true)
    }

    @Test("the engine's inbox: a request handed over while its thread waits wakes it, one handed over while it runs does not, and a thread about to wait goes round again for one that came")
    func inboxWakeUps() {
        let inbox = EngineInbox()
        func transfer() -> EasyTransfer {
            EasyTransfer(request: HTTPRequest(method: "HEAD", url: "http://127.0.0.1:9/x"), progress: nil)
        }
        // Running (it has taken what waited): nothing to wake.
        _ = inbox.take()
        #expect(inbox.submit(transfer()) == .awake)
        #expect(!inbox.goingToWait(), "a request came since the take: the thread goes round at once")
        #expect(inbox.take().transfers.count == 1)
        #expect(inbox.goingToWait())
        #expect(inbox.submit(transfer()) == .asleep, "the thread waits: it must be woken up")
        #expect(inbox.submit(transfer()) == .asleep)
        #expect(inbox.take().transfers.count == 2)
        #expect(inbox.submit(transfer()) == .awake)
        inbox.close()
        #expect(inbox.submit(transfer()) == .closed)
        #expect(!inbox.goingToWait(), "a closed engine does not wait: it stops")
        #expect(inbox.take().closed)
    }

    @Test("Retry-After takes seconds or an HTTP date, and is capped at a day")
    func retryAfter() {
        let now = Date(timeIntervalSince1970: 1_784_000_000)
        #expect(HTTPResponse.parseRetryAfter("7", now: now) == .seconds(7))
        #expect(HTTPResponse.parseRetryAfter("999999", now: now) == .seconds(86_400))
        let date = HTTPResponse.parseRetryAfter("Tue, 14 Jul 2026 03:33:40 GMT", now: now)
        #expect(date == .milliseconds(20_000), "\(String(describing: date))")
        #expect(HTTPResponse.parseRetryAfter("soon", now: now) == nil)
    }

    @Test("URLs are logged without user info or credential-like query values")
    func redaction() {
        #expect(URLRedaction.redact("https://user:pw@host.example/a?b=1") == "https://host.example/a?b=1")
        #expect(URLRedaction.redact("https://s3.example/k?X-Amz-Signature=abc&partNumber=2&token=t")
            == "https://s3.example/k?X-Amz-Signature=REDACTED&partNumber=2&token=REDACTED")
    }

    @Test("failures are classified as the table of FailureClassifier says")
    func classification() {
        func response(_ status: Int, _ headers: [HTTPHeader] = [], body: String = "") -> HTTPResponse {
            HTTPResponse(status: status, headers: headers, body: Array(body.utf8), bytesSent: 0)
        }
        func verdict(_ status: Int, _ headers: [HTTPHeader] = []) -> TransferFailure {
            FailureClassifier.failure(for: response(status, headers), request: "PUT http://x/y", destination: "d")
        }
        for status in [408, 429, 500, 502, 503, 504] {
            #expect(verdict(status).destinationFault, "\(status)")
            guard case .transient = verdict(status).kind else { Issue.record("\(status) must be transient"); continue }
        }
        for status in [400, 401, 403, 404, 413, 422, 301] {
            #expect(verdict(status).kind == .permanent, "\(status)")
        }
        #expect(verdict(409).kind == .transient(retryAfter: nil) && !verdict(409).destinationFault)
        #expect(verdict(503, [HTTPHeader("Retry-After", "12")]).kind == .transient(retryAfter: .seconds(12)))
        #expect(verdict(301, [HTTPHeader("Location", "https://u:p@new.example/")]).message.contains("https://new.example/"))
        #expect(FailureClassifier.failure(for: TransferError(code: .cancelled, message: "", curlCode: 42), method: "PUT")
            == .interrupted)
        let untrusted = FailureClassifier.failure(for: TransferError(code: .tlsVerification, message: "bad cert",
                                                                     curlCode: 60), method: "PUT")
        #expect(untrusted.isUnverified && untrusted.bearsPortalMarks && untrusted.code == "tls-verification"
                && untrusted.message.contains("captive portal"), "a portal intercepting HTTPS: no verdict")
        let stall = FailureClassifier.failure(for: TransferError(code: .stall, message: "too slow", curlCode: 28), method: "PATCH")
        #expect(stall.destinationFault && stall.message.contains("resumes from the confirmed offset") && stall.code == "stall")
    }

    @Test("a status line's code, for HTTP/1.1 and HTTP/2, interim or final; none in anything else")
    func statusLines() {
        func code(_ line: String) -> Int { Array(line.utf8).withUnsafeBytes { EasyTransfer.statusCode($0[...]) } }
        #expect(code("HTTP/1.1 104 Upload Resumption Supported") == 104)
        #expect(code("HTTP/2 200") == 200)
        #expect(code("HTTP/1.1 201") == 201)
        #expect(code("HTTP/1.1 20") == 0 && code("HTTP/1.1 2x0 OK") == 0 && code("HTTP/1.1") == 0 && code("") == 0)
    }

    @Test("URL templates fill job values as single safe segments and find their fixed prefix")
    func urlTemplates() throws {
        let template = try URLTemplate("https://dav.example/p/{meta.album}/{job_id}-{name}")
        #expect(URLTemplate.encode("a/b\\c d") == "a_b_c%20d")
        #expect(URLTemplate.encode("..") == "_.")
        // A slash with a combining mark after it is still a slash (per scalar, not per character).
        #expect(URLTemplate.encode("a/\u{301}b") == "a_%CC%81b")
        #expect(URLTemplate.encode("ünï.jpg") == "%C3%BCn%C3%AF.jpg")
        #expect(template.staticPrefix == "https://dav.example/p/")
        #expect(try URLTemplate("https://h.example/files/").isConstant)
        #expect(throws: PathTemplateError.self) { try URLTemplate("ftp://h/x") }
        #expect(throws: PathTemplateError.self) { try URLTemplate("https:///x") }
        #expect(throws: PathTemplateError.self) { try URLTemplate("https://h/{nope}") }
        #expect(throws: PathTemplateError.self) { try URLTemplate("https://h/{url}") }
        #expect(try URLTemplate("https://cdn/{url}", extraPlaceholders: ["url"]).parts.count == 2)
    }

    @Test("tus metadata: filename and filetype first, keys tus cannot carry left out, values base64")
    func tusMetadata() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/a,b c.txt", size: 10, seed: 61)
        let id = try await queue.enqueue(path, metadata: ["z": "last", "a": "", "bad,key": "x", "filename": "spoof"])
        let job = try #require(try await queue.job(id))
        let header = TusMetadata.header(for: job)
        let pairs = header.split(separator: ",").map(String.init)
        #expect(pairs.first == "filename \(Data("a,b c.txt".utf8).base64EncodedString())")
        #expect(pairs[1].hasPrefix("filetype "))
        #expect(pairs.dropFirst(2) == ["a", "z \(Data("last".utf8).base64EncodedString())"])
    }

    @Test("the engine reports progress that never goes backwards, and a cancelled task aborts its upload at once")
    func progressAndCancel() async throws {
        let engine = TransferEngine()
        defer { engine.shutdown() }
        engine.setSendCap(2 << 20)
        let sandbox = try Sandbox()
        let path = try sandbox.makeRandomFile(sandbox.root + "/f.bin", size: 32 << 20)
        let descriptor = open(path, O_RDONLY)
        defer { close(descriptor) }
        let seen = Mutex<[Int64]>([])
        let url = try TestServers.davURL() + "/engine/\(UUID().uuidString).bin"
        let request = HTTPRequest(method: "PUT", url: url, body: .file(descriptor: descriptor, offset: 0, length: 32 << 20))
        let task = Task { try await engine.perform(request) { sent in seen.withLock { $0.append(sent) } } }
        #expect(await eventually(timeout: .seconds(10)) { seen.withLock { ($0.last ?? 0) > 1 << 20 } })
        let cancelledAt = ContinuousClock.now
        task.cancel()
        let outcome = await task.result
        // Uncancelled, the capped upload would need 16 s; the bound leaves room for a loaded machine.
        #expect(ContinuousClock.now - cancelledAt < .seconds(8), "a cancel does not wait for the transfer")
        #expect(throws: TransferError.self) { try outcome.get() }
        if case .failure(let error as TransferError) = outcome { #expect(error.code == .cancelled) }
        let values = seen.withLock { $0 }
        #expect(zip(values, values.dropFirst()).allSatisfy { $0 <= $1 })
        #expect((values.last ?? 0) < 32 << 20, "the cap kept the upload from finishing before the cancel")
    }

    @Test("HEAD, OPTIONS and DELETE get their answers; a refused connection is a connect error")
    func methodsAndErrors() async throws {
        let engine = TransferEngine()
        defer { engine.shutdown() }
        let url = try TestServers.davURL() + "/engine/\(UUID().uuidString).txt"
        let put = try await engine.perform(HTTPRequest(method: "PUT", url: url, body: .bytes(Array("hello".utf8))))
        #expect(put.status == 201 && put.bytesSent == 5)
        let head = try await engine.perform(HTTPRequest(method: "HEAD", url: url))
        #expect(head.status == 200 && head.header("content-length") == "5" && head.body.isEmpty)
        let get = try await engine.perform(HTTPRequest(method: "GET", url: url))
        #expect(get.bodyText == "hello")
        let delete = try await engine.perform(HTTPRequest(method: "DELETE", url: url))
        #expect(delete.status == 204)
        let options = try await engine.perform(HTTPRequest(method: "OPTIONS", url: try TestServers.tusEndpoint()))
        #expect(options.header("Tus-Version") == "1.0.0")

        let closed = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(closed, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(closed, $0, &length) } }
        let port = UInt16(bigEndian: address.sin_port)
        close(closed)
        do {
            _ = try await engine.perform(HTTPRequest(method: "PUT", url: "http://127.0.0.1:\(port)/x", body: .bytes([1])))
            Issue.record("a closed port answered")
        } catch {
            #expect(error.code == .connect, "\(error)")
            #expect(FailureClassifier.failure(for: error, method: "PUT").destinationFault)
        }
    }

    @Test("token_command: its first line is read, a hung program and its children are killed at the timeout")
    func tokenCommand() {
        #expect(BoundedCommand.run(["/bin/sh", "-c", "echo tok; echo second"], timeout: .seconds(5))
            == .exited(status: 0, stdout: "tok\nsecond\n", stderr: ""))
        var started = ContinuousClock.now
        let forked = BoundedCommand.run(["/bin/sh", "-c", "sleep 30 & echo tok"], timeout: .seconds(5))
        #expect(forked == .exited(status: 0, stdout: "tok\n", stderr: ""))
        #expect(ContinuousClock.now - started < .seconds(3), "a forked helper holding the pipe does not hold us up")
        started = ContinuousClock.now
        #expect(BoundedCommand.run(["/bin/sh", "-c", "sleep 30; echo late"], timeout: .seconds(1)) == .timedOut)
        #expect(ContinuousClock.now - started < .seconds(3))
        #expect(BoundedCommand.run(["/bin/sh", "-c", "echo no >&2; exit 3"], timeout: .seconds(5))
            == .exited(status: 3, stdout: "", stderr: "no\n"))
        if case .notStarted = BoundedCommand.run(["/nonexistent/get-token"], timeout: .seconds(1)) {} else {
            Issue.record("a missing program must not start")
        }
    }
}
