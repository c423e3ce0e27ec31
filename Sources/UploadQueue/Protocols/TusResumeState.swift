import Foundation

/// What a tus job remembers between attempts: the upload URL (persisted before any data is sent) and its expiry.
struct TusResumeState: Sendable, Equatable, ResumeRecord {
    var uploadURL: String
    /// The server's `Upload-Expires`, as sent.
    var expires: String?

    enum CodingKeys: String, CodingKey {
        case uploadURL = "upload_url"
        case expires
    }

    init(uploadURL: String, expires: String? = nil) {
        self.uploadURL = uploadURL
        self.expires = expires
    }

}

/// `Upload-Metadata`: comma-separated `key base64(value)` pairs (a key alone for an empty value).
enum TusMetadata {
    /// `filename` and `filetype` first (tuspyserver refuses HEAD without them), then the job's meta in key order;
    /// keys that tus cannot carry (empty, spaces, commas, non-ASCII) are left out.
    static func header(for job: Job) -> String {
        var pairs: [(String, String)] = [("filename", job.originalName), ("filetype", job.contentType)]
        for key in job.meta.keys.sorted() where key != "filename" && key != "filetype" && isValidKey(key) {
            pairs.append((key, job.meta[key] ?? ""))
        }
        return pairs.map { key, value in
            value.isEmpty ? key : "\(key) \(Data(value.utf8).base64EncodedString())"
        }.joined(separator: ",")
    }

    static func isValidKey(_ key: String) -> Bool {
        !key.isEmpty && key.unicodeScalars.allSatisfy { $0.isASCII && $0.value > 0x20 && $0 != "," && $0.value < 0x7F }
    }
}
