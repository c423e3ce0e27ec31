import CUploadQueueSystem
import Foundation
import Synchronization

/// Classifies the link to each destination as unmetered, metered or offline, with who decided, and says when
/// that changes.
///
/// Each look takes the routing table and NetworkManager's answer from caches, so the scheduler and the uploaders
/// (before every chunk) never wait for D-Bus nor parse the kernel's tables per file. The monitor's own thread
/// reads both again every two seconds and on netlink route, address and link changes; without it (the CLI), a
/// table older than `routeTableAge` is read again.
final class LinkMonitor: Sendable {
    private struct State {
        var override: LinkOverride
        var networkManager: [String: (value: (global: NetworkManagerProbe.Metered, device: NetworkManagerProbe.Metered?), at: ContinuousClock.Instant)] = [:]
        var addresses: [String: (bytes: [UInt8]?, at: ContinuousClock.Instant)] = [:]
        var last: [String: LinkStatus] = [:]
        var watching = false
        var routes: (table: RouteTable, at: ContinuousClock.Instant)?
        /// NetworkManager's `Connectivity` as last read (nil: not running, or not asked).
        var connectivity: NetworkManagerProbe.Connectivity?
        /// What the connectivity check found in the way, in words; nil when it got its `204` (or did not run).
        var checkedPortal: String?
    }

    /// How long a routing table read is used before it is read again (the netlink watch refreshes it sooner).
    static let routeTableAge = Duration.milliseconds(250)

    private let configuration: Configuration
    private let classifier: LinkClassifier
    private let state: Mutex<State>
    private let stopped = Atomic<Bool>(false)
    /// Each configured destination's host, worked out once: every transfer asks (parsing the URL cost more than
    /// the rest of the question).
    private let hosts: [String: String]
    /// The settings key `uploadq link` writes.
    static let overrideSetting = "link.override"

    init(configuration: Configuration, networkManager: NetworkManagerProbe? = NetworkManagerProbe()) {
        self.configuration = configuration
        classifier = LinkClassifier(meteredInterfaces: configuration.link.meteredInterfaces,
                                    networkManager: networkManager)
        state = Mutex(State(override: LinkOverride(rawValue: configuration.link.mode) ?? .auto))
        hosts = configuration.destinations.compactMapValues(Self.host(of:))
    }

    /// Applies the hand-set class (`nil`: the config's `[link] mode`).
    func setOverride(_ stored: String?) {
        let chosen = stored.flatMap(LinkOverride.init(rawValue:)) ?? LinkOverride(rawValue: configuration.link.mode)
            ?? .auto
        state.withLock { $0.override = chosen }
    }

    /// The link as a whole: the interface of the default route.
    func overall() -> LinkStatus {
        let table = routeTable()
        return classify(interface: table.defaultInterface, viaGateway: table.isViaGateway(nil), table: table)
    }

    /// The link to `destination`'s server; a local-directory destination needs none and is always unmetered.
    /// Never waits: the server's address comes from what `refresh()` looked up (the default route until then).
    func status(for destination: Destination) -> LinkStatus {
        status(for: destination, table: routeTable())
    }

    /// The link to the server of `url` (a patch target): looked up from what `refresh()` learnt when the host is
    /// one of the destinations', the default route otherwise.
    func status(forURL url: String) -> LinkStatus {
        let host = URL(string: url)?.host
        return status(host: host, table: routeTable())
    }

    private func status(for destination: Destination, table: RouteTable) -> LinkStatus {
        guard destination.isNetwork else {
            return LinkStatus(linkClass: .unmetered, source: .default, reason: "local directory")
        }
        // The cache answers for the configured destinations only (a library caller may pass its own value).
        let host = configuration.destinations[destination.name] == destination
            ? hosts[destination.name] : Self.host(of: destination)
        return status(host: host, table: table)
    }

    private func status(host: String?, table: RouteTable) -> LinkStatus {
        let interface: String?
        let address = host.flatMap(cachedAddress(of:))
        if let address {
            interface = table.interface(for: address)
        } else {
            interface = table.defaultInterface
        }
        return classify(interface: interface, viaGateway: table.isViaGateway(address), table: table)
    }

    /// Looks at every destination again; returns those whose class changed since the last look, with the new
    /// status.
    func changes() -> [String: LinkStatus] {
        var changed: [String: LinkStatus] = [:]
        let table = routeTable()  // once for all destinations
        for (name, destination) in configuration.destinations {
            let status = status(for: destination, table: table)
            let before = state.withLock { state -> LinkStatus? in
                let before = state.last[name]
                state.last[name] = status
                return before
            }
            if before?.linkClass != status.linkClass { changed[name] = status }
        }
        return changed
    }

    /// Calls `onChange` (on a thread of its own) whenever netlink reports a change, and every two seconds
    /// otherwise, until `stop()`.
    func watch(_ onChange: @escaping @Sendable () -> Void) {
        let descriptor = uploadq_netlink_route_socket()
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 16 << 10)
            while !self.stopped.load(ordering: .relaxed) {
                if descriptor >= 0 {
                    var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                    if poll(&poller, 1, 2000) > 0 {
                        while recv(descriptor, &buffer, buffer.count, 0) > 0 {}
                        usleep(100_000)  // let a burst of changes (an interface going down) settle
                        while recv(descriptor, &buffer, buffer.count, 0) > 0 {}
                    }
                } else {
                    usleep(2_000_000)
                }
                if !self.stopped.load(ordering: .relaxed) {
                    self.refresh()
                    onChange()
                }
            }
            if descriptor >= 0 { close(descriptor) }
        }
        thread.name = "uploadq.link-monitor"
        thread.start()
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
    }

    /// The routing table as last read, read again when older than `routeTableAge`.
    private func routeTable() -> RouteTable {
        let now = ContinuousClock.now
        if let cached = state.withLock({ $0.routes }), now - cached.at < Self.routeTableAge { return cached.table }
        let table = RouteTable.current()
        // A fresher table (the watch's, read after a netlink event) is not replaced by this older read.
        state.withLock { state in
            if state.routes.map({ $0.at < now }) ?? true { state.routes = (table, now) }
        }
        return table
    }

    /// The class of traffic leaving through `interface`. A portal the connectivity check met stands in the way of
    /// the traffic that leaves through the check's interface, but for a server on the local network when the check
    /// itself went through a gateway (a portal that answers DNS puts the check's host on-link: then everything on
    /// that interface waits). NetworkManager's `Connectivity`, asked only without a check of ours, stands in the
    /// way of traffic that leaves the local network (`viaGateway`).
    private func classify(interface: String?, viaGateway: Bool, table: RouteTable? = nil) -> LinkStatus {
        let (override, connectivity, checked) = state.withLock { ($0.override, $0.connectivity, $0.checkedPortal) }
        let nm = override == .auto && interface != nil && interface != "lo" ? networkManager(interface) : nil
        var portal: (reason: String, source: LinkStatus.Source)?
        if override == .auto, interface != nil {
            if let checked, let way = checkWay(table ?? routeTable()), way.interface == interface,
               viaGateway || !way.viaGateway {
                portal = (checked, .connectivityCheck)
            } else if configuration.link.connectivityCheck == nil, viaGateway, let connectivity,
                      connectivity.blocksTheInternet {
                portal = ("NetworkManager Connectivity=\(connectivity.name): log in on the network's portal, or wait",
                          .networkmanager)
            }
        }
        return classifier.classify(interface: interface, override: override, networkManager: nm, portal: portal)
    }

    /// The way the connectivity check's requests take: their interface, and whether through a gateway.
    private func checkWay(_ table: RouteTable) -> (interface: String?, viaGateway: Bool)? {
        guard let url = configuration.link.connectivityCheck, let host = URL(string: url)?.host else { return nil }
        let address = cachedAddress(of: host)
        return (address.map(table.interface(for:)) ?? table.defaultInterface, table.isViaGateway(address))
    }

    /// What the connectivity check found: nil when it got its `204`, else what answered instead, in words.
    func setCheckedPortal(_ reason: String?) {
        state.withLock { $0.checkedPortal = reason }
    }

    /// NetworkManager's last answer for `interface`; nil when it is not running (or not asked yet).
    private func networkManager(_ interface: String?) -> (global: NetworkManagerProbe.Metered, device: NetworkManagerProbe.Metered?)? {
        state.withLock { $0.networkManager[interface ?? ""]?.value }
    }

    /// Looks up the destinations' servers and asks NetworkManager about the interfaces in use (the default
    /// route's and each destination's). This waits for DNS and D-Bus (2 s at most per question), so it runs on
    /// the monitor's thread, before the scheduler starts, or in the CLI; everything else reads its results.
    func refresh() {
        let table = RouteTable.current()
        state.withLock { $0.routes = (table, .now) }
        var interfaces: Set<String> = []
        if let main = table.defaultInterface { interfaces.insert(main) }
        for destination in configuration.destinations.values where destination.isNetwork {
            guard let host = Self.host(of: destination), let address = address(of: host),
                  let interface = table.interface(for: address), interface != "lo" else { continue }
            interfaces.insert(interface)
        }
        // The connectivity check's server is looked up too: whose way it shares is judged from its address.
        if let url = configuration.link.connectivityCheck, let host = URL(string: url)?.host { _ = address(of: host) }
        guard let probe = classifier.networkManager else { return }
        let connectivity = probe.connectivity()
        state.withLock { $0.connectivity = connectivity }
        let now = ContinuousClock.now
        var answers: [String: (global: NetworkManagerProbe.Metered, device: NetworkManagerProbe.Metered?)] = [:]
        for interface in interfaces {
            guard let answer = probe.query(interface: interface) else { break }  // not on the bus: stop asking
            answers[interface] = answer
        }
        state.withLock { state in
            for (interface, answer) in answers { state.networkManager[interface] = (answer, now) }
            // One answer that did not come (a D-Bus timeout) does not make a metered link look unmetered: the
            // last answer stands for 30 s.
            state.networkManager = state.networkManager.filter { now - $0.value.at < .seconds(30) }
        }
    }

    /// The address `refresh()` found for `host` (a literal address at once); nil when not looked up yet.
    private func cachedAddress(of host: String) -> [UInt8]? {
        if let literal = Self.literalAddress(host) { return literal }
        return state.withLock { $0.addresses[host]?.bytes }
    }

    /// The first address of `host`, looked up at most once a minute (a literal address directly).
    private func address(of host: String) -> [UInt8]? {
        if let literal = Self.literalAddress(host) { return literal }
        let now = ContinuousClock.now
        if let cached = state.withLock({ $0.addresses[host] }), now - cached.at < .seconds(60) { return cached.bytes }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        var bytes: [UInt8]?
        if getaddrinfo(host, nil, &hints, &result) == 0, let first = result {
            bytes = Self.bytes(of: first.pointee.ai_addr)
            freeaddrinfo(result)
        }
        // A failed lookup is retried sooner: it may be the link that is down.
        state.withLock { $0.addresses[host] = (bytes, bytes == nil ? now - .seconds(55) : now) }
        return bytes
    }

    static func literalAddress(_ host: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return withUnsafeBytes(of: v4) { Array($0) } }
        var v6 = in6_addr()
        let trimmed = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if inet_pton(AF_INET6, trimmed, &v6) == 1 { return withUnsafeBytes(of: v6) { Array($0) } }
        return nil
    }

    private static func bytes(of address: UnsafeMutablePointer<sockaddr>?) -> [UInt8]? {
        guard let address else { return nil }
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { pointer in
                withUnsafeBytes(of: pointer.pointee.sin_addr) { Array($0) }
            }
        case AF_INET6:
            return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) }
            }
        default:
            return nil
        }
    }

    /// The host a destination's requests go to; nil for a local directory.
    static func host(of destination: Destination) -> String? {
        destination.serverURL.flatMap { URL(string: $0)?.host }
    }
}
