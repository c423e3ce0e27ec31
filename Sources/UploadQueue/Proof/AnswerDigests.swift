import Foundation
import RawStructuredFieldValues

/// The digests an answer may carry of the bytes a server stored, read so they can be compared with the file's:
/// `Repr-Digest` (RFC 9530: `sha-256`, `md5`), `Content-MD5`, `x-goog-hash: md5=…` (Google Cloud Storage) and,
/// where the storage's ETags are MD5s (S3 and its presigned targets), a plain-MD5 `ETag`.
struct AnswerDigests: Sendable, Equatable {
    /// The SHA-256 the answer names, if any.
    var sha256: [UInt8]?
    /// The MD5 the answer names, with the field that named it.
    var md5: (bytes: [UInt8], field: String)?

    static func == (lhs: AnswerDigests, rhs: AnswerDigests) -> Bool {
        lhs.sha256 == rhs.sha256 && lhs.md5?.bytes == rhs.md5?.bytes && lhs.md5?.field == rhs.md5?.field
    }

    /// The digests in `response`; an ETag counts as an MD5 only with `etagIsMD5` (ETags are opaque in HTTP).
    init(_ response: HTTPResponse, etagIsMD5: Bool) {
        if let field = response.header("Repr-Digest") {
            var parser = StructuredFieldValueParser(Array(field.utf8))
            if let dictionary = try? parser.parseDictionaryFieldValue() {
                for (key, member) in dictionary {
                    guard case .item(let item) = member, case .undecodedByteSequence(let text) = item.rfc9651BareItem,
                          let bytes = Data(base64Encoded: String(text)).map(Array.init) else { continue }
                    if key == "sha-256", bytes.count == 32 { sha256 = bytes }
                    if key == "md5", bytes.count == 16 { md5 = (bytes, "Repr-Digest") }
                }
            }
        }
        if md5 == nil, let text = response.header("Content-MD5"),
           let bytes = Data(base64Encoded: text.trimmingCharacters(in: .whitespaces)).map(Array.init), bytes.count == 16 {
            md5 = (bytes, "Content-MD5")
        }
        if md5 == nil, let text = response.header("x-goog-hash") {
            for part in text.split(separator: ",") {
                let pair = part.trimmingCharacters(in: .whitespaces)
                guard pair.hasPrefix("md5="), let bytes = Data(base64Encoded: String(pair.dropFirst(4))).map(Array.init),
                      bytes.count == 16 else { continue }
                md5 = (bytes, "x-goog-hash")
            }
        }
        if md5 == nil, etagIsMD5, let etag = response.header("ETag"), let hex = S3ETag.plainMD5(etag),
           let bytes = SHA256Digest.bytes(hex: hex) {
            md5 = (bytes, "ETag")
        }
    }

    /// Whether the answer names any digest at all.
    var isEmpty: Bool { sha256 == nil && md5 == nil }

    /// What the digests say of a file whose SHA-256 is `sha256` (hex): `true` when one matches (and none
    /// contradicts), `false` when one contradicts, nil when there is none to compare. `fileMD5` is read only
    /// when the answer names an MD5 and no SHA-256.
    func agree(sha256 hex: String, fileMD5: () async throws(TransferFailure) -> [UInt8]) async throws(TransferFailure)
        -> (Bool, String)?
    {
        if let sha256 {
            let same = SHA256Digest.bytes(hex: hex) == sha256
            return (same, same ? "Repr-Digest sha-256" : "Repr-Digest sha-256 \(Data(sha256).base64EncodedString())")
        }
        if let md5 {
            let same = try await fileMD5() == md5.bytes
            return (same, same ? md5.field : "\(md5.field) \(SHA256Digest.hex(md5.bytes))")
        }
        return nil
    }
}
