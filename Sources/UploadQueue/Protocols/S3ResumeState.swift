import Foundation

/// What an S3 multipart job remembers between attempts: the object key, the UploadId (persisted before any part
/// is sent), the part size it was planned with, and every part the store confirmed with its ETag.
struct S3ResumeState: Sendable, Equatable, ResumeRecord {
    var key: String
    var uploadID: String
    var partSize: Int64
    var parts: [Part]
    /// Set before CompleteMultipartUpload is sent: from then on a missing upload may mean it completed.
    var completing: Bool

    /// One confirmed part.
    struct Part: Sendable, Equatable, Codable {
        var number: Int
        /// As the store sent it, quotes included (opaque, except that a plain MD5 can be checked).
        var etag: String
        var size: Int64
        /// Whether the ETag is the MD5 of the bytes sent (false with SSE-KMS or SSE-C); nil when unknown.
        var md5: Bool?

        init(number: Int, etag: String, size: Int64, md5: Bool? = nil) {
            self.number = number
            self.etag = etag
            self.size = size
            self.md5 = md5
        }
    }

    /// Whether this store's part ETags are MD5s of the bytes: known from the parts sent in this upload.
    var etagsAreMD5: Bool? {
        let known = parts.compactMap(\.md5)
        if known.contains(false) { return false }
        return known.isEmpty ? nil : true
    }

    enum CodingKeys: String, CodingKey {
        case key
        case uploadID = "upload_id"
        case partSize = "part_size"
        case parts
        case completing
    }

    init(key: String, uploadID: String, partSize: Int64, parts: [Part] = [], completing: Bool = false) {
        self.key = key
        self.uploadID = uploadID
        self.partSize = partSize
        self.parts = parts
        self.completing = completing
    }


    /// A record without an UploadId or part size cannot be resumed from.
    var isUsable: Bool { !uploadID.isEmpty && partSize > 0 }

    /// Bytes of the parts confirmed so far.
    var confirmedBytes: Int64 { parts.reduce(0) { $0 + $1.size } }

    /// Records a part (replacing an earlier record of the same number), keeping the list in part order.
    mutating func record(_ part: Part) {
        parts.removeAll { $0.number == part.number }
        parts.append(part)
        parts.sort { $0.number < $1.number }
    }
}

/// How a file is cut into parts: the part size and count, within S3's limits (5 MiB to 5 GiB per part, at most
/// 10,000 parts).
struct S3PartPlan: Sendable, Equatable {
    let size: Int64
    let partSize: Int64

    /// The plan for `size` bytes: `max(requested, ceil(size / 10,000))`, at least 5 MiB; nil when even 5 GiB
    /// parts would need more than 10,000.
    init?(size: Int64, requestedPartSize: Int64) {
        let needed = (size + S3Settings.maximumPartCount - 1) / S3Settings.maximumPartCount
        let partSize = max(requestedPartSize, needed, S3Settings.minimumPartSize)
        guard partSize <= S3Settings.maximumPartSize else { return nil }
        self.size = size
        self.partSize = partSize
    }

    /// A plan with a part size chosen earlier (read back from a resume record).
    init(size: Int64, fixedPartSize: Int64) {
        self.size = size
        partSize = fixedPartSize
    }

    /// Number of parts; a zero-byte file still has one (empty) part.
    var count: Int { size == 0 ? 1 : Int((size + partSize - 1) / partSize) }

    /// Where part `number` (from 1) starts in the file.
    func offset(of number: Int) -> Int64 { Int64(number - 1) * partSize }

    /// How long part `number` is (the last one may be shorter).
    func length(of number: Int) -> Int64 { min(partSize, size - offset(of: number)) }
}
