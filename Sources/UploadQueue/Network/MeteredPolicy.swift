/// What a job may do on a metered link: wait, go, or go only when small.
public enum MeteredPolicy: Sendable, Equatable {
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
}
