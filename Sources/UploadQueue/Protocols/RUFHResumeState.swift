import Foundation

/// What an IETF resumable-upload job remembers between attempts: the upload URL (persisted before any data is
/// sent), the limits the server announced, when the server forgets the upload, and a body size the server
/// refused (413) so the next attempt starts below it.
struct RUFHResumeState: Sendable, Equatable, ResumeRecord {
    var uploadURL: String
    /// The interop version the upload was made with: an upload of another version is not continued.
    var interopVersion: Int
    /// The server's `Upload-Limit`, as last seen.
    var limit: UploadLimit?
    /// When the server said it would forget the upload (`max-age`/`expires` counted from the answer that gave
    /// it), in seconds since 1970; nil when it did not say. A resume asks the server anyway (`HEAD`): only it
    /// knows whether the upload completed just before.
    var expiresAt: Double?
    /// The largest request body known to pass, after a 413.
    var appendCap: Int64?
    /// Set before the completing append is sent: from then on an upload the server no longer knows may have
    /// completed (a server may forget completed uploads), so it is not simply made again.
    var completing: Bool?

    enum CodingKeys: String, CodingKey {
        case uploadURL = "upload_url"
        case interopVersion = "interop_version"
        case limit
        case expiresAt = "expires_at"
        case appendCap = "append_cap"
        case completing
    }

    init(uploadURL: String, interopVersion: Int, limit: UploadLimit? = nil, now: Date = Date()) {
        self.uploadURL = uploadURL
        self.interopVersion = interopVersion
        note(limit, now: now)
    }

    /// Takes the limits of a newer answer (limits may only grow, `max-age` restarts from it).
    mutating func note(_ newer: UploadLimit?, now: Date = Date()) {
        guard let newer else { return }
        limit = newer
        if let lifetime = newer.lifetime { expiresAt = now.timeIntervalSince1970 + Double(lifetime) }
    }

}
