import Foundation
@testable import UploadQueue

/// What uploadq reads in a server's headers: Location against the endpoint, Retry-After (seconds or an HTTP
/// date), a tus OPTIONS answer, the IETF resumable-upload fields (`Upload-Limit`, `Upload-Offset`,
/// `Upload-Complete`, RFC 9651) and a 409's problem document. Header lines come from the input, one per 0x00-separated field ("Name: value").
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTPHeaders(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let fields = FuzzInput(data, size).fields(1)
    let headers = fields.compactMap { line -> HTTPHeader? in
        guard let colon = line.firstIndex(of: ":") else { return nil }
        return HTTPHeader(String(line[..<colon]), String(line[line.index(after: colon)...]))
    }
    let response = HTTPResponse(status: 201, headers: headers, body: Array(fields.last!.utf8), bytesSent: 0)
    if let location = response.location(resolvedAgainst: "https://tus.example.com/files/") {
        // What the uploader then does with it: keep it, or refuse it (never a crash either way).
        let scope = CredentialScope.origins([URLOrigin(url: "https://tus.example.com")!], secure: true)
        _ = scope.verdict(for: location)
    }
    if let wait = response.retryAfter(now: Date(timeIntervalSince1970: 1_800_000_000)) {
        precondition(wait >= .zero, "a negative Retry-After: \(wait)")
    }
    _ = TusServer(response: response)
    if let limit = UploadLimit(response) {
        for value in [limit.maximumSize, limit.minimumSize, limit.maximumAppendSize, limit.minimumAppendSize, limit.lifetime] {
            precondition(value.map { $0 >= 0 } ?? true, "a negative limit: \(limit)")
        }
        // What the uploader cuts with it: a length within what remains, never negative.
        let length = limit.appendLength(remaining: 10_000_000, preferred: 8 << 20)
        precondition(length >= 0 && length <= 10_000_000, "append length \(length) from \(limit)")
    }
    precondition(StructuredField.integer(response.header("Upload-Offset")).map { $0 >= 0 } ?? true)
    _ = StructuredField.boolean(response.header("Upload-Complete"))
    precondition(RUFHUploader.expectedOffset(problem: response.body).map { $0 >= 0 } ?? true)
    _ = HTTPResponse.parseHTTPDate(fields[0])
    return 0
}
