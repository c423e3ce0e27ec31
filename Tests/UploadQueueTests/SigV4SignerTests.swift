import Foundation
import Testing
@testable import UploadQueue

/// SigV4 for S3 against published values: the four examples of AWS's "Signature Calculations for the
/// Authorization Header" page (S3 API reference), and three requests signed by botocore 1.43.11's S3SigV4Auth
/// (keys with spaces, `+`, Unicode and reserved characters, an UNSIGNED-PAYLOAD part, a session token, a
/// virtual-host bucket, a multi-parameter query). The code is ours; the expected values are theirs.
struct SigV4SignerTests {
    static let awsExample = S3Credentials(accessKey: "AKIAIOSFODNN7EXAMPLE",
                                          secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    static let may2013 = Date(timeIntervalSince1970: 1_369_353_600)  // 2013-05-24T00:00:00Z
    static let botocore = S3Credentials(accessKey: "AKIDEXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    static let november2026 = Date(timeIntervalSince1970: 1_795_415_415)  // 2026-11-23T06:30:15Z

    func authorization(_ request: SigV4Signer.Request, _ credentials: S3Credentials, _ date: Date,
                       region: String = "us-east-1") -> String? {
        SigV4Signer(region: region).sign(request, credentials: credentials, date: date)
            .first { $0.name == "Authorization" }?.value
    }

    @Test("AWS example: GET object with a Range header")
    func getObject() {
        let request = SigV4Signer.Request(method: "GET", host: "examplebucket.s3.amazonaws.com", path: "/test.txt",
                                          query: [], headers: [HTTPHeader("Range", "bytes=0-9")],
                                          payloadHash: SigV4Signer.emptyPayloadHash)
        #expect(authorization(request, Self.awsExample, Self.may2013) == "AWS4-HMAC-SHA256 Credential="
            + "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;"
            + "x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test("AWS example: PUT object whose key has a `$`, with a Date header and a storage class")
    func putObject() {
        #expect(SigV4Signer.encodePath("test$file.text") == "test%24file.text")
        let request = SigV4Signer.Request(
            method: "PUT", host: "examplebucket.s3.amazonaws.com", path: "/" + SigV4Signer.encodePath("test$file.text"),
            query: [], headers: [HTTPHeader("Date", "Fri, 24 May 2013 00:00:00 GMT"),
                                 HTTPHeader("x-amz-storage-class", "REDUCED_REDUNDANCY")],
            payloadHash: "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let value = authorization(request, Self.awsExample, Self.may2013)
        #expect(value?.contains("SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,") == true)
        #expect(value?.hasSuffix("Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd") == true)
    }

    @Test("AWS example: GET bucket lifecycle (a parameter without value is signed as `lifecycle=`)")
    func lifecycle() {
        let request = SigV4Signer.Request(method: "GET", host: "examplebucket.s3.amazonaws.com", path: "/",
                                          query: [("lifecycle", "")], headers: [],
                                          payloadHash: SigV4Signer.emptyPayloadHash)
        #expect(authorization(request, Self.awsExample, Self.may2013)?
            .hasSuffix("Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543") == true)
    }

    @Test("AWS example: list objects, query parameters sorted")
    func listObjects() {
        let request = SigV4Signer.Request(method: "GET", host: "examplebucket.s3.amazonaws.com", path: "/",
                                          query: [("prefix", "J"), ("max-keys", "2")], headers: [],
                                          payloadHash: SigV4Signer.emptyPayloadHash)
        #expect(SigV4Signer.canonicalQuery(request.query) == "max-keys=2&prefix=J")
        #expect(authorization(request, Self.awsExample, Self.may2013)?
            .hasSuffix("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7") == true)
    }

    @Test("botocore: UploadPart of a key with space, `+`, Unicode and `()*'!~`, UNSIGNED-PAYLOAD, Content-MD5")
    func uploadPartReservedCharacters() {
        let key = "photos/a b+c/ü (1)*~'!.jpg"
        let path = "/" + SigV4Signer.encodePath(key)
        #expect(path == "/photos/a%20b%2Bc/%C3%BC%20%281%29%2A~%27%21.jpg")
        let query = [("partNumber", "2"), ("uploadId", "abc+/=def")]
        #expect(SigV4Signer.canonicalQuery(query) == "partNumber=2&uploadId=abc%2B%2F%3Ddef")
        let request = SigV4Signer.Request(method: "PUT", host: "127.0.0.1:9000", path: path, query: query,
                                          headers: [HTTPHeader("Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg==")],
                                          payloadHash: SigV4Signer.unsignedPayload)
        #expect(authorization(request, Self.botocore, Self.november2026) == "AWS4-HMAC-SHA256 Credential="
            + "AKIDEXAMPLE/20261123/us-east-1/s3/aws4_request, SignedHeaders=content-md5;host;x-amz-content-sha256;"
            + "x-amz-date, Signature=141cd0fb5a6b99d689528635b79ecc0aafbf89152da11747b26186b936dd6ff1")
    }

    @Test("botocore: CreateMultipartUpload on a virtual-host bucket with a session token and a spaced meta value")
    func createWithSessionToken() {
        var credentials = Self.botocore
        credentials.sessionToken = "FQoGZXIvYXdzEBYaDH+token/="
        let request = SigV4Signer.Request(
            method: "POST", host: "photos.s3.eu-west-1.amazonaws.com",
            path: "/" + SigV4Signer.encodePath("2026-11-23/été.jpg"), query: [("uploads", "")],
            headers: [HTTPHeader("Content-Type", "image/jpeg"), HTTPHeader("x-amz-meta-caption", "  two  spaces  ")],
            payloadHash: SigV4Signer.emptyPayloadHash)
        let signed = SigV4Signer(region: "eu-west-1").sign(request, credentials: credentials, date: Self.november2026)
        #expect(signed.contains(HTTPHeader("x-amz-security-token", "FQoGZXIvYXdzEBYaDH+token/=")))
        #expect(signed.contains(HTTPHeader("x-amz-date", "20261123T063015Z")))
        #expect(signed.last == HTTPHeader("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261123/"
            + "eu-west-1/s3/aws4_request, SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;"
            + "x-amz-meta-caption;x-amz-security-token, "
            + "Signature=7e0e9ca8a13400469d619ff133f196a843257101b66d97fd151ae2d6e71d195a"))
    }

    @Test("botocore: ListParts with `%`, `=`, `&` in the key, a spaced value and region auto (R2)")
    func listPartsQuery() {
        let path = "/" + SigV4Signer.encodePath("bucket/k%ey=1&x")
        #expect(path == "/bucket/k%25ey%3D1%26x")
        let request = SigV4Signer.Request(method: "GET", host: "127.0.0.1:9000", path: path,
                                          query: [("uploadId", "U P"), ("max-parts", "1000"),
                                                  ("part-number-marker", "7")],
                                          headers: [], payloadHash: SigV4Signer.emptyPayloadHash)
        let (canonical, signed) = SigV4Signer.canonicalRequest(request, extra: [
            HTTPHeader("x-amz-date", "20261123T063015Z"),
            HTTPHeader("x-amz-content-sha256", SigV4Signer.emptyPayloadHash),
        ])
        #expect(signed == "host;x-amz-content-sha256;x-amz-date")
        #expect(canonical == """
            GET
            /bucket/k%25ey%3D1%26x
            max-parts=1000&part-number-marker=7&uploadId=U%20P
            host:127.0.0.1:9000
            x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            x-amz-date:20261123T063015Z

            host;x-amz-content-sha256;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        #expect(authorization(request, Self.botocore, Self.november2026, region: "auto")?
            .hasSuffix("Signature=3d69d679c152f589b1122eef107100072f9a34a77012631a003ecee2a00168bb") == true)
    }

    @Test("every request is signed afresh: another second, another signature")
    func resignedPerRequest() {
        let request = SigV4Signer.Request(method: "GET", host: "h", path: "/", query: [], headers: [],
                                          payloadHash: SigV4Signer.emptyPayloadHash)
        let first = authorization(request, Self.botocore, Self.november2026)
        let later = authorization(request, Self.botocore, Self.november2026.addingTimeInterval(1))
        #expect(first != nil && first != later)
    }

    @Test("credentials print without their secret")
    func credentialsRedacted() {
        var credentials = Self.botocore
        credentials.sessionToken = "token-value"
        let printed = "\(credentials) \(String(describing: credentials)) \(String(reflecting: credentials))"
        #expect(!printed.contains("wJalrXUtnFEMI"))
        #expect(!printed.contains("token-value"))
    }
}
