import Foundation

/// What a destination's server, or a proxy in front of it, taught uploadq with `413 Content Too Large`: shown by
/// `status`, kept across restarts, and forgotten after a while (`chunkCapLifetime`, `refusalLifetime`), so a limit
/// the admin raised is found out without anyone clearing it.
public struct RequestLimit: Sendable, Equatable, Codable {
    /// How long a learnt chunk cap holds: smaller chunks cost little, a day of them is fine.
    public static let chunkCapLifetime: TimeInterval = 24 * 3600
    /// How long a whole-file refusal fails larger files without sending them: an hour, after which one is tried.
    public static let refusalLifetime: TimeInterval = 3600

    /// The largest request body chunked uploads (tus, rufh) send to it: they were refused above it.
    public var chunkCap: Int64?
    /// The smallest whole-file body (http-put, http-post) it refused; larger files fail before a byte is sent.
    public var refusedAt: Int64?
    /// When it was last learnt (either number).
    public var learntAt: Date?

    enum CodingKeys: String, CodingKey {
        case chunkCap = "chunk_cap"
        case refusedAt = "refused_at"
        case learntAt = "learnt_at"
    }

    /// What was learnt; nothing by default.
    public init(chunkCap: Int64? = nil, refusedAt: Int64? = nil, learntAt: Date? = nil) {
        self.chunkCap = chunkCap
        self.refusedAt = refusedAt
        self.learntAt = learntAt
    }

    /// What still holds at `now`: each number is dropped once its lifetime since `learntAt` is over.
    public func current(at now: Date = Date()) -> RequestLimit {
        guard let learntAt else { return self }
        let age = now.timeIntervalSince(learntAt)
        var limit = self
        if age > Self.chunkCapLifetime { limit.chunkCap = nil }
        if age > Self.refusalLifetime { limit.refusedAt = nil }
        return limit
    }
}
