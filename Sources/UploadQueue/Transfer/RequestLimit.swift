import Foundation

extension Destination {
    /// What a destination's server, or a proxy in front of it, taught uploadq with `413 Content Too Large`: shown by
    /// `status`, kept across restarts, and forgotten after a while (`chunkCapLifetime`, `refusalLifetime`), so a limit
    /// the admin raised is found out without anyone clearing it.
    public struct RequestLimit: Sendable, Equatable, Codable {
        /// How long a learnt chunk cap holds: smaller chunks cost little, a day of them is fine.
        public static let chunkCapLifetime: TimeInterval = 24 * 3600
        /// How long a whole-file refusal fails larger files without sending them: an hour, after which one is tried.
        public static let refusalLifetime: TimeInterval = 3600

        /// The largest request body chunked uploads (tus, rufh, S3 parts) send to it: they were refused above it.
        public var chunkCap: Int64?
        /// When `chunkCap` was learnt (its lifetime runs from then).
        public var chunkCapLearntAt: Date?
        /// The smallest whole-file body (http-put, http-post) it refused; larger files wait without a byte sent.
        public var refusedAt: Int64?
        /// When `refusedAt` was learnt.
        public var refusalLearntAt: Date?

        enum CodingKeys: String, CodingKey {
            case chunkCap = "chunk_cap"
            case chunkCapLearntAt = "chunk_cap_learnt_at"
            case refusedAt = "refused_at"
            case refusalLearntAt = "refusal_learnt_at"
        }

        /// What was learnt, and when; nothing by default. A number without its time does not expire.
        public init(chunkCap: Int64? = nil, chunkCapLearntAt: Date? = nil, refusedAt: Int64? = nil,
                    refusalLearntAt: Date? = nil) {
            self.chunkCap = chunkCap
            self.chunkCapLearntAt = chunkCapLearntAt
            self.refusedAt = refusedAt
            self.refusalLearntAt = refusalLearntAt
        }

        /// What still holds at `now`: each number is dropped once its own lifetime is over.
        public func current(at now: Date = Date()) -> RequestLimit {
            var limit = self
            if let learnt = chunkCapLearntAt, now.timeIntervalSince(learnt) > Self.chunkCapLifetime {
                limit.chunkCap = nil
                limit.chunkCapLearntAt = nil
            }
            if let learnt = refusalLearntAt, now.timeIntervalSince(learnt) > Self.refusalLifetime {
                limit.refusedAt = nil
                limit.refusalLearntAt = nil
            }
            return limit
        }
    }
}
