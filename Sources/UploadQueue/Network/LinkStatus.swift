/// How the link to the destinations is classified, and who decided.
public struct LinkStatus: Sendable, Equatable {
    /// The link class that policies act on.
    public enum LinkClass: String, Sendable, Equatable, CaseIterable {
        case unmetered, metered, offline
    }

    /// Where the classification came from.
    public enum Source: String, Sendable, Equatable, CaseIterable {
        case override
        case networkmanager
        case interfaceRule = "interface-rule"
        case `default`
    }

    public var linkClass: LinkClass
    public var source: Source
    /// The interface that carries the traffic, when known.
    public var interface: String?

    /// Until link detection exists every link counts as unmetered, by default.
    public static let assumedUnmetered = LinkStatus(linkClass: .unmetered, source: .default, interface: nil)
}
