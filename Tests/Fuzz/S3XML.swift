@testable import UploadQueue

/// S3's XML replies, read by our own small reader: any bytes give an element or nil, never a crash or a hang; an
/// error document gives an error reply or nil.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzS3XML(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = FuzzInput(data, size).bytes
    guard let root = S3XMLElement.parse(bytes) else { return 0 }
    _ = S3ErrorReply(root)
    _ = root.value("UploadId")
    for part in root.children("Part") { _ = part.value("ETag") }
    return 0
}
