extension QueueStatus {
    /// How the link to the destinations is classified, and who decided.
    public struct LinkStatus: Sendable, Equatable {
        /// The link class that policies act on.
        public enum LinkClass: String, Sendable, Equatable, CaseIterable {
            case unmetered, metered, offline
            /// A captive portal (or a network without the internet) is in the way: nothing goes out until it is gone,
            /// as when offline, and nothing fails for it.
            case portal
        }

        /// Where the classification came from.
        public enum Source: String, Sendable, Equatable, CaseIterable {
            case override
            case networkmanager
            case interfaceRule = "interface-rule"
            /// `[link] connectivity_check`.
            case connectivityCheck = "connectivity-check"
            case `default`
        }

        public var linkClass: LinkClass
        public var source: Source
        /// The interface that carries the traffic, when known.
        public var interface: String?
        /// NetworkManager's `Metered` value for that interface (or its global one): `yes`, `no`, `guess-yes`,
        /// `guess-no`, `unknown`; nil when NetworkManager is not running.
        public var networkManager: String?
        /// Why, in words (`name matches wwan*`, `no route`, `set by uploadq link`).
        public var reason: String?

        /// A classification with its source.
        public init(linkClass: LinkClass, source: Source, interface: String? = nil, networkManager: String? = nil,
                    reason: String? = nil) {
            self.linkClass = linkClass
            self.source = source
            self.interface = interface
            self.networkManager = networkManager
            self.reason = reason
        }

        /// What is assumed when nothing says otherwise.
        public static let assumedUnmetered = LinkStatus(linkClass: .unmetered, source: .default)
    }
}

extension Configuration {
    /// A hand-set link class (`uploadq link metered|unmetered|offline|auto`, or `[link] mode`); `auto` detects.
    public enum LinkOverride: String, Sendable, Equatable, CaseIterable {
        case auto, metered, unmetered, offline

        /// The class it forces, nil for `auto`.
        var linkClass: LinkStatus.LinkClass? { LinkStatus.LinkClass(rawValue: rawValue) }
    }
}
