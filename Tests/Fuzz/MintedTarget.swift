import Foundation
@testable import UploadQueue

/// What an app's minting backend answers (a target: method, URL, headers, form fields, expiry) and the resume
/// records uploadq reads back from its own jobs: any bytes give a target or a reason, never a crash; a target
/// read is one uploadq may send (PUT or POST to an http(s) URL, no header that belongs to the transfer), and its
/// shown form carries no query.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMintedTarget(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = FuzzInput(data, size).bytes
    if let target = try? MintedTarget(json: bytes) {
        precondition(target.method == "PUT" || target.method == "POST", "method \(target.method)")
        precondition(URLOrigin(url: target.url) != nil, "a target URL without an origin")
        precondition(!target.publicURL.contains("?"), "a shown URL with its query")
        for header in target.headers {
            precondition(!MintedTarget.reservedHeaders.contains(header.name.lowercased()), "header \(header.name)")
            precondition(!header.value.contains(where: \.isNewline), "a header value over two lines")
        }
        precondition(target.method == "POST" || target.fields.isEmpty, "fields on a PUT")
    }
    let text = String(decoding: bytes, as: UTF8.self)
    _ = RUFHResumeState(json: text)
    _ = S3ResumeState(json: text)
    _ = TusResumeState(json: text)
    return 0
}
