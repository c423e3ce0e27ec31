extension Destination {
    /// What a job may do on a metered link: wait, go, go only when small, or go even once the metered budget is spent.
    public enum MeteredPolicy: Sendable, Equatable, CustomStringConvertible {
        case `defer`
        case allow
        case allowBelow(Int64)
        /// Goes on a metered link even when `[link] metered_budget` is spent (its bytes still count): for small,
        /// event-like uploads that must not wait for the next period.
        case always

        /// Parses `defer`, `allow`, `always` or `allow-below:SIZE` (e.g. `allow-below:1MiB`).
        public init?(_ text: String) {
            switch text {
            case "defer": self = .defer
            case "allow": self = .allow
            case "always": self = .always
            default:
                guard text.hasPrefix("allow-below:"),
                      let size = ConfigurationValues.byteCount(String(text.dropFirst("allow-below:".count))) else { return nil }
                self = .allowBelow(size)
            }
        }

        /// Whether this lets more go on a metered link than `other` does (a larger size limit, or `always` where the
        /// other is not): what a sidecar may not do unless the config says so.
        func isLooser(than other: MeteredPolicy) -> Bool {
            sizeLimit > other.sizeLimit || (self == .always && other != .always)
        }

        /// Whether the metered budget leaves it alone (`always`).
        var ignoresBudget: Bool { self == .always }

        /// Whether a transfer of `size` bytes may go on a metered link.
        func allows(size: Int64) -> Bool {
            size < sizeLimit
        }

        /// The policy as one number: files smaller than it may go on a metered link (0: none; `Int64.max`: all).
        /// What the queue stores and compares in SQL, so a claim filters by the link without decoding rows.
        var sizeLimit: Int64 {
            switch self {
            case .defer: 0
            case .allow, .always: .max
            case .allowBelow(let limit): max(limit, 0)
            }
        }

        /// `defer`, `allow` or `allow-below:BYTES`, as the config and sidecars write it.
        public var description: String {
            switch self {
            case .defer: "defer"
            case .allow: "allow"
            case .always: "always"
            case .allowBelow(let size): "allow-below:\(size)B"
            }
        }
    }
}

/// Whether a job may move bytes on its destination's link now, and if not, why it waits.
enum LinkPolicy {
    /// nil when the job may go; otherwise `metered-link`, `offline` or `portal`.
    static func waitingReason(for job: Job, destination: Destination, link: LinkStatus) -> WaitingReason? {
        guard destination.isNetwork else { return nil }
        switch link.linkClass {
        case .unmetered:
            return nil
        case .offline:
            return .offline
        case .portal:
            return .portal
        case .metered:
            // The number the claim compares in SQL, so the two never disagree about a job.
            let limit = job.meteredBelow ?? destination.onMetered.sizeLimit
            return job.size < limit ? nil : .meteredLink
        }
    }
}
