/// What a job may do on a metered link: wait, go, or go only when small.
public enum MeteredPolicy: Sendable, Equatable, CustomStringConvertible {
    case `defer`
    case allow
    case allowBelow(Int64)

    /// Parses `defer`, `allow` or `allow-below:SIZE` (e.g. `allow-below:1MiB`).
    public init?(_ text: String) {
        switch text {
        case "defer": self = .defer
        case "allow": self = .allow
        default:
            guard text.hasPrefix("allow-below:"),
                  let size = ConfigurationValues.byteCount(String(text.dropFirst("allow-below:".count))) else { return nil }
            self = .allowBelow(size)
        }
    }

    /// Whether a transfer of `size` bytes may go on a metered link.
    func allows(size: Int64) -> Bool {
        size < sizeLimit
    }

    /// The policy as one number: files smaller than it may go on a metered link (0: none; `Int64.max`: all).
    /// What the queue stores and compares in SQL, so a claim filters by the link without decoding rows.
    var sizeLimit: Int64 {
        switch self {
        case .defer: 0
        case .allow: .max
        case .allowBelow(let limit): max(limit, 0)
        }
    }

    /// `defer`, `allow` or `allow-below:BYTES`, as the config and sidecars write it.
    public var description: String {
        switch self {
        case .defer: "defer"
        case .allow: "allow"
        case .allowBelow(let size): "allow-below:\(size)B"
        }
    }
}

/// Whether a job may move bytes on its destination's link now, and if not, why it waits.
enum LinkPolicy {
    /// nil when the job may go; otherwise `metered-link` or `offline`.
    static func waitingReason(for job: Job, destination: Destination, link: LinkStatus) -> WaitingReason? {
        guard destination.isNetwork else { return nil }
        switch link.linkClass {
        case .unmetered:
            return nil
        case .offline:
            return .offline
        case .metered:
            // The number the claim compares in SQL, so the two never disagree about a job.
            let limit = job.meteredBelow ?? destination.onMetered.sizeLimit
            return job.size < limit ? nil : .meteredLink
        }
    }
}
