import CUploadQueueSystem
import Foundation

/// The `Upload-Checksum` value of one chunk: `sha1 BASE64`, read from the file in 1 MiB blocks.
enum TusChecksum {
    /// Hashes the range on a blocking-work thread (a chunk is megabytes of file reads).
    static func sha1(of source: SourceFile, offset: Int64, length: Int64) async throws(TransferFailure) -> String {
        try await BlockingWork.runResult { () throws(TransferFailure) -> String in
            try digest(source, offset: offset, length: length)
        }.get()
    }

    private static func digest(_ source: SourceFile, offset: Int64, length: Int64) throws(TransferFailure) -> String {
        guard let context = uploadq_sha1_new() else {
            throw .transient("io", "libcrypto could not create a SHA-1 context")
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var position = offset
        let end = offset + length
        while position < end {
            let want = Int(min(Int64(buffer.count), end - position))
            let count: Int
            do {
                count = try source.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: position)
            } catch {
                uploadq_sha256_free(context)
                throw error
            }
            if count == 0 {
                uploadq_sha256_free(context)
                throw .permanent("source-changed", "source changed: \(source.path) ended at \(position) bytes")
            }
            _ = uploadq_sha256_update(context, buffer.baseAddress, count)
            position += Int64(count)
        }
        var digest = [UInt8](repeating: 0, count: 20)
        guard uploadq_sha1_finish(context, &digest) == 0 else {
            throw .transient("io", "libcrypto could not finish a SHA-1 digest")
        }
        return "sha1 " + Data(digest).base64EncodedString()
    }
}
