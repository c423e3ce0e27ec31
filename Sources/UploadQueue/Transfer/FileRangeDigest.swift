import CUploadQueueSystem
import Foundation

/// A digest of one byte range of a source file (a tus chunk's `Upload-Checksum`, an S3 part's `Content-MD5`),
/// read in 1 MiB blocks on a blocking-work thread.
enum FileRangeDigest {
    /// The digest algorithms the protocols ask for.
    enum Algorithm: Sendable {
        case sha1, md5

        var length: Int { self == .sha1 ? 20 : 16 }
    }

    /// The raw digest of `length` bytes of `source` from `offset`.
    static func digest(_ algorithm: Algorithm, of source: SourceFile, offset: Int64, length: Int64)
        async throws(TransferFailure) -> [UInt8]
    {
        try await BlockingWork.runResult { () throws(TransferFailure) -> [UInt8] in
            try compute(algorithm, source, offset: offset, length: length)
        }.get()
    }

    /// tus `Upload-Checksum`: `sha1 BASE64`.
    static func tusChecksum(of source: SourceFile, offset: Int64, length: Int64) async throws(TransferFailure)
        -> String
    {
        "sha1 " + Data(try await digest(.sha1, of: source, offset: offset, length: length)).base64EncodedString()
    }

    private static func compute(_ algorithm: Algorithm, _ source: SourceFile, offset: Int64, length: Int64)
        throws(TransferFailure) -> [UInt8]
    {
        guard let context = algorithm == .sha1 ? uploadq_sha1_new() : uploadq_md5_new() else {
            throw .transient("io", "libcrypto could not create a digest context")
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
        var digest = [UInt8](repeating: 0, count: algorithm.length)
        let finished = algorithm == .sha1 ? uploadq_sha1_finish(context, &digest) : uploadq_md5_finish(context, &digest)
        guard finished == 0 else { throw .transient("io", "libcrypto could not finish a digest") }
        return digest
    }
}
