import CUploadQueueSystem
import Foundation

/// What an S3 ETag says about the bytes behind it: a plain part or object ETag is their MD5 (not with SSE-KMS or
/// SSE-C), a completed multipart object's is the MD5 of its parts' MD5s with the part count.
enum S3ETag {
    /// The hex MD5 inside an ETag like `"9b2cf535f27731c974343645a3985328"`; nil for multipart or KMS ETags.
    static func plainMD5(_ etag: String) -> String? {
        let inner = unquoted(etag).lowercased()
        guard inner.count == 32, inner.allSatisfy(\.isHexDigit) else { return nil }
        return inner
    }

    /// What S3 names a completed multipart object: MD5 of the parts' binary MD5s, `-`, the part count; nil unless
    /// every one of the `count` parts has a plain MD5 ETag.
    static func multipart(_ parts: [S3ResumeState.Part], count: Int) -> String? {
        guard parts.count == count else { return nil }
        var joined: [UInt8] = []
        for part in parts {
            guard let hex = plainMD5(part.etag), let bytes = SHA256Digest.bytes(hex: hex) else { return nil }
            joined += bytes
        }
        guard let context = uploadq_md5_new() else { return nil }
        joined.withUnsafeBytes { _ = uploadq_sha256_update(context, $0.baseAddress, $0.count) }
        var digest = [UInt8](repeating: 0, count: 16)
        guard uploadq_md5_finish(context, &digest) == 0 else { return nil }
        return SigV4Signer.hex(digest) + "-\(count)"
    }

    /// The verdict on an answer whose ETag does not prove the bytes were stored (`etag = "md5"`): no verdict,
    /// the destination waits as `unverified-answer`; `what` names the object or part.
    static func unproven(_ etag: String, expected: String, what: String) -> TransferFailure {
        let shown = SafeText.escaped(String(unquoted(etag).prefix(80)))
        return .unverified("""
            the store answered \(what) with ETag "\(shown)", not the MD5 of the bytes sent (\(expected)): a proxy or a \
            portal answered, or the bytes were changed on the way; if the store's ETags are not MD5s (SSE-KMS, \
            SSE-C, some S3-compatible stores), set etag = "opaque" on the destination
            """)
    }

    /// The ETag without its quotes and weak marker.
    static func unquoted(_ etag: String) -> String {
        var text = etag.trimmingCharacters(in: .whitespaces)
        if text.hasPrefix("W/") { text.removeFirst(2) }
        if text.hasPrefix("\""), text.hasSuffix("\""), text.count >= 2 { text = String(text.dropFirst().dropLast()) }
        return text
    }

    /// Whether a stored object whose ETag is `etag` is what `parts` make: with MD5 ETags (`etagsAreMD5` true), only
    /// when it bears their multipart ETag; otherwise (not known, or not MD5s) its size has to do.
    static func matches(_ etag: String?, parts: [S3ResumeState.Part], count: Int, etagsAreMD5: Bool?) -> Bool {
        guard etagsAreMD5 == true else { return true }
        guard let expected = multipart(parts, count: count), let etag else { return false }
        return unquoted(etag).lowercased() == expected
    }
}
