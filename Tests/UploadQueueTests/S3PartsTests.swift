import Foundation
import Testing
@testable import UploadQueue

/// The S3 pieces that need no server: part math (conformance 19), reading S3's XML (a 200 can carry an
/// `<Error>`, conformance 16), error verdicts, multipart ETags, credentials files and the `[destinations]` keys.
struct S3PartsTests {
    static let sizes: [Int64] = [0, 1, 5 << 20, (5 << 20) + 1, 100 << 20, 48 << 30, 80 << 30, 1 << 40, 5 << 40,
                                 48_828_125 << 20]

    @Test("part math keeps every upload within 10,000 parts of 5 MiB to 5 GiB (19)", arguments: sizes)
    func partMath(size: Int64) throws {
        let plan = try #require(S3PartPlan(size: size, requestedPartSize: 8 << 20))
        #expect(plan.count <= 10_000)
        #expect(plan.partSize >= 5 << 20 && plan.partSize <= 5 << 30)
        #expect(plan.partSize >= 8 << 20)
        let last = plan.count
        #expect(plan.offset(of: last) + plan.length(of: last) == size)
        #expect(plan.length(of: last) > 0 || size == 0)
        if last > 1 { #expect(plan.length(of: 1) == plan.partSize) }
    }

    @Test("part math: the configured size when it fits, ceil(size/10,000) when it does not, nil beyond 5 GiB parts")
    func partSizeChoice() {
        #expect(S3PartPlan(size: 100 << 20, requestedPartSize: 5 << 20)?.count == 20)
        #expect(S3PartPlan(size: 100 << 20, requestedPartSize: 1 << 20)?.partSize == 5 << 20)
        let big = S3PartPlan(size: 100 << 30, requestedPartSize: 8 << 20)
        let needed: Int64 = ((100 << 30) + 9_999) / 10_000
        #expect(big?.partSize == needed)
        #expect(big?.count == 10_000)
        #expect(S3PartPlan(size: (5 << 30) * 10_000 + 1, requestedPartSize: 8 << 20) == nil)
    }

    @Test("ListPartsResult: namespaces, entities in ETags, self-closing elements, truncation markers")
    func listPartsXML() throws {
        let xml = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!-- a comment -->
            <ListPartsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
              <Bucket>photos</Bucket><Key>a &amp; b/é.jpg</Key><UploadId>XXBsb2FkIElE</UploadId>
              <PartNumberMarker/><NextPartNumberMarker>2</NextPartNumberMarker><IsTruncated>true</IsTruncated>
              <Part><PartNumber>1</PartNumber><ETag>&quot;7778aef83f66abc1fa1e8477f296d394&quot;</ETag><Size>5242880</Size></Part>
              <Part><PartNumber>2</PartNumber><ETag>"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"</ETag><Size>&#53;</Size></Part>
            </ListPartsResult>
            """
        let root = try #require(S3XMLElement.parse(Array(xml.utf8)))
        #expect(root.name == "ListPartsResult")
        #expect(root.value("Key") == "a & b/é.jpg")
        #expect(root.value("PartNumberMarker") == "")
        #expect(root.value("IsTruncated") == "true")
        let parts = root.children("Part")
        #expect(parts.count == 2)
        #expect(parts[0].value("ETag") == "\"7778aef83f66abc1fa1e8477f296d394\"")
        #expect(parts[1].value("Size") == "5")
    }

    @Test("malformed or hostile XML is refused, never a crash")
    func badXML() {
        for text in ["", "not xml", "<a><b></a>", "<a>", "<a>&bogus;</a>", "<a></a><b></b>",
                     String(repeating: "<a>", count: 10_000) + String(repeating: "</a>", count: 10_000)] {
            #expect(S3XMLElement.parse(Array(text.utf8)) == nil, "\(text.prefix(30))")
        }
    }

    @Test("a 200 whose body is an <Error> after whitespace is read as that error (16)")
    func errorInside200() throws {
        let body = "\n\n   <Error><Code>InternalError</Code><Message>We encountered an internal error. Please try "
            + "again.</Message><RequestId>1</RequestId></Error>"
        let response = HTTPResponse(status: 200, headers: [], body: Array(body.utf8), bytesSent: 0)
        let reply = try #require(S3ErrorReply(response))
        #expect(reply.code == "InternalError")
        #expect(reply.summary == "InternalError: We encountered an internal error. Please try again.")
    }

    @Test("S3 error codes: credentials and buckets need a person, throttling and timeouts are retried")
    func verdicts() {
        func verdict(_ status: Int, _ code: String) -> TransferFailure {
            let body = "<Error><Code>\(code)</Code><Message>m</Message></Error>"
            return S3ErrorReply.failure(for: HTTPResponse(status: status, headers: [], body: Array(body.utf8),
                                                          bytesSent: 0),
                                        request: "PUT http://s3/b/k", destination: "archive", bucket: "b")
        }
        let signature = verdict(403, "SignatureDoesNotMatch")
        #expect(signature.kind == .permanent && signature.code == "signature")
        #expect(signature.message.contains("secret key of destination \"archive\""))
        #expect(verdict(403, "InvalidAccessKeyId").code == "credentials")
        #expect(verdict(403, "AccessDenied").code == "forbidden")
        #expect(verdict(404, "NoSuchBucket").code == "no-such-bucket")
        #expect(verdict(400, "AuthorizationHeaderMalformed").code == "region")
        #expect(verdict(400, "EntityTooLarge").kind == .permanent)
        let timeout = verdict(400, "RequestTimeout")
        #expect(timeout.kind == .transient(retryAfter: nil) && timeout.destinationFault)
        #expect(verdict(503, "SlowDown").destinationFault)
        #expect(verdict(400, "BadDigest").kind == .transient(retryAfter: nil))
        let other = verdict(400, "InvalidArgument")
        #expect(other.kind == .permanent && other.message.contains("InvalidArgument: m"))
        #expect(!other.message.contains("<Code>"))
    }

    @Test("the multipart ETag is the MD5 of the parts' MD5s with the part count; unknown with KMS ETags")
    func multipartETag() {
        // Two parts whose MD5s are those of "a" and "b"; MD5(0cc175b9…‖92eb5ffe…) computed independently.
        let parts = [S3ResumeState.Part(number: 1, etag: "\"0cc175b9c0f1b6a831c399e269772661\"", size: 1),
                     S3ResumeState.Part(number: 2, etag: "\"92eb5ffee6ae2fec3ad71c777531578f\"", size: 1)]
        #expect(S3ETag.multipart(parts, count: 2) == "96e024ba2074fe77e8e965ba43a704be-2")
        #expect(S3ETag.multipart(parts, count: 3) == nil)
        let kms = [S3ResumeState.Part(number: 1, etag: "\"7b0d4ad1d9c1c3a0-kms\"", size: 1)]
        #expect(S3ETag.multipart(kms, count: 1) == nil)
        #expect(S3ETag.plainMD5("\"0CC175B9C0F1B6A831C399E269772661\"") == "0cc175b9c0f1b6a831c399e269772661")
        #expect(S3ETag.plainMD5("\"d4c3f3f0b4a4cc5cbc3b3f0dde6d7286-2\"") == nil)
    }

    @Test("object keys: values stay in their segment, spaces and Unicode stay readable, empty segments go")
    func keySegments() {
        #expect(S3ObjectHeaders.keySegment("../../etc/passwd") == "_._.._etc_passwd")
        #expect(S3ObjectHeaders.keySegment("a\\b\u{7}c") == "a_b_c")
        #expect(S3ObjectHeaders.keySegment("Été (1).jpg") == "Été (1).jpg")
        #expect(S3ObjectHeaders.keySegment(".hidden") == "_hidden")
    }

    @Test("shared credentials file: the chosen profile, `profile NAME` sections, comments; errors name no secret")
    func sharedCredentials() throws {
        let path = FileManager.default.temporaryDirectory.path + "/uploadq-creds-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try """
            # comment
            [default]
            aws_access_key_id = AKIDDEFAULT
            aws_secret_access_key = secret/default+1

            [profile field]
            aws_access_key_id=AKIDFIELD
            aws_secret_access_key=secret-field
            aws_session_token = token-field
            [broken]
            aws_access_key_id = AKIDBROKEN
            """.write(toFile: path, atomically: true, encoding: .utf8)
        let standard = try S3Credentials.load(.sharedFile(path: path, profile: "default"), destination: "d")
        #expect(standard == S3Credentials(accessKey: "AKIDDEFAULT", secretKey: "secret/default+1"))
        let field = try S3Credentials.load(.sharedFile(path: path, profile: "field"), destination: "d")
        #expect(field.sessionToken == "token-field")
        let chain = try S3Credentials.load(.standard(profile: nil), destination: "d",
                                           environment: ["AWS_SHARED_CREDENTIALS_FILE": path, "AWS_PROFILE": "field"])
        #expect(chain.accessKey == "AKIDFIELD")
        let fromEnvironment = try S3Credentials.load(.standard(profile: "field"), destination: "d",
            environment: ["AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SHARED_CREDENTIALS_FILE": path])
        #expect(fromEnvironment.accessKey == "AKIDENV")
        #expect(throws: TransferFailure.self) {
            try S3Credentials.load(.sharedFile(path: path, profile: "broken"), destination: "d")
        }
        do {
            _ = try S3Credentials.load(.environment(accessKey: "MY_KEY", secretKey: "MY_SECRET", sessionToken: nil),
                                       destination: "archive", environment: ["MY_KEY": "AKIDONLY"])
            Issue.record("missing secret accepted")
        } catch {
            #expect(error.kind == .permanent && error.code == "credentials")
            #expect(error.message.contains("MY_SECRET") && !error.message.contains("AKIDONLY"))
        }
    }

    @Test("addresses: path style under an endpoint's path, virtual host, default ports left out of Host")
    func addresses() {
        let engine = TransferEngine()
        defer { engine.shutdown() }
        func client(_ endpoint: String, pathStyle: Bool) -> S3Client {
            let settings = S3Settings(endpoint: endpoint, bucket: "photos", pathStyle: pathStyle)
            return S3Client(destination: .s3(name: "s", settings: settings), settings: settings, engine: engine)
        }
        let supabase = client("https://p.supabase.co/storage/v1/s3/", pathStyle: true).target(key: "a b/c.jpg")
        #expect(supabase.host == "p.supabase.co")
        #expect(supabase.path == "/storage/v1/s3/photos/a%20b/c.jpg")
        #expect(supabase.url == "https://p.supabase.co/storage/v1/s3/photos/a%20b/c.jpg")
        let aws = client("https://s3.eu-west-1.amazonaws.com:443", pathStyle: false)
            .target(key: "a b/c.jpg", query: [("uploads", "")])
        #expect(aws.host == "photos.s3.eu-west-1.amazonaws.com")
        #expect(aws.url == "https://photos.s3.eu-west-1.amazonaws.com/a%20b/c.jpg?uploads=")
        let bucket = client("http://127.0.0.1:9000", pathStyle: true).target(key: nil)
        #expect(bucket.host == "127.0.0.1:9000" && bucket.url == "http://127.0.0.1:9000/photos")
    }

    @Test("whether part ETags are MD5s is learnt from the parts sent (false with SSE-KMS), unknown until then")
    func etagKind() {
        var state = S3ResumeState(key: "k", uploadID: "u", partSize: 5 << 20)
        #expect(state.etagsAreMD5 == nil)
        state.record(.init(number: 1, etag: "\"0cc175b9c0f1b6a831c399e269772661\"", size: 1, md5: true))
        #expect(state.etagsAreMD5 == true)
        state.record(.init(number: 2, etag: "\"ffffffffffffffffffffffffffffffff\"", size: 1, md5: false))
        #expect(state.etagsAreMD5 == false)
        let decoded = S3ResumeState(json: state.json)
        #expect(decoded == state)
    }
}
