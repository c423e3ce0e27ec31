import Foundation

/// What a destination's server, or a proxy in front of it, taught uploadq with `413 Content Too Large`: shown by
/// `status`, kept across restarts.
public struct RequestLimit: Sendable, Equatable, Codable {
    /// The largest request body chunked uploads (tus, rufh) send to it: they were refused above it.
    public var chunkCap: Int64?
    /// The smallest whole-file body (http-put, http-post) it refused; larger files fail before a byte is sent.
    public var refusedAt: Int64?

    enum CodingKeys: String, CodingKey {
        case chunkCap = "chunk_cap"
        case refusedAt = "refused_at"
    }

    /// What was learnt; nothing by default.
    public init(chunkCap: Int64? = nil, refusedAt: Int64? = nil) {
        self.chunkCap = chunkCap
        self.refusedAt = refusedAt
    }
}
