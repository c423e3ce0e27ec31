import Foundation

/// The kernel's main routing table, read from `/proc/net/route` and `/proc/net/ipv6_route`: which interface
/// carries traffic to an address, and whether there is a default route at all.
struct RouteTable: Sendable, Equatable {
    struct Route: Sendable, Equatable {
        var interface: String
        /// Network address and prefix length; IPv4 routes use the first 4 bytes.
        var destination: [UInt8]
        var prefixLength: Int
        var metric: UInt32
        var isIPv6: Bool
        /// Through a gateway (`RTF_GATEWAY`): traffic that leaves the local network.
        var viaGateway = false
    }

    var routes: [Route]

    /// The table of the calling process's network namespace; empty when `/proc` cannot be read.
    static func current() -> RouteTable {
        let v4 = (try? String(contentsOfFile: "/proc/net/route", encoding: .utf8)) ?? ""
        let v6 = (try? String(contentsOfFile: "/proc/net/ipv6_route", encoding: .utf8)) ?? ""
        return RouteTable(ipv4: v4, ipv6: v6)
    }

    /// Parses the two files' text (as the kernel writes them).
    init(ipv4: String, ipv6: String) {
        var routes: [Route] = []
        for line in ipv4.split(separator: "\n").dropFirst() {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count >= 8, let destination = UInt32(fields[1], radix: 16),
                  let flags = UInt32(fields[3], radix: 16), let metric = UInt32(fields[6]),
                  let mask = UInt32(fields[7], radix: 16), flags & 0x1 != 0, flags & 0x0200 == 0 else { continue }
            // Host byte order (little-endian on the machines this runs on): the first octet is the lowest byte.
            let bytes = (0..<4).map { UInt8(truncatingIfNeeded: destination >> (8 * $0)) }
            let prefix = (0..<4).reduce(0) { $0 + UInt8(truncatingIfNeeded: mask >> (8 * $1)).nonzeroBitCount }
            routes.append(Route(interface: String(fields[0]), destination: bytes, prefixLength: prefix,
                                metric: metric, isIPv6: false, viaGateway: flags & 0x2 != 0))
        }
        for line in ipv6.split(separator: "\n") {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count >= 10, fields[0].count == 32, let prefix = Int(fields[1], radix: 16),
                  let metric = UInt32(fields[5], radix: 16), let flags = UInt32(fields[8], radix: 16),
                  flags & 0x1 != 0, flags & 0x0200 == 0 else { continue }  // up, and not a reject route
            let hex = Array(fields[0])
            let bytes = stride(from: 0, to: 32, by: 2).map { UInt8(String(hex[$0..<($0 + 2)]), radix: 16) ?? 0 }
            routes.append(Route(interface: String(fields[9]), destination: bytes, prefixLength: prefix,
                                metric: metric, isIPv6: true, viaGateway: flags & 0x2 != 0))
        }
        self.routes = routes
    }

    /// The interface of the most specific route (then the lowest metric) to `address` (4 or 16 bytes); `lo` for
    /// loopback addresses; nil when no route leads there.
    func interface(for address: [UInt8]) -> String? {
        if address.count == 4, address[0] == 127 { return "lo" }
        if address.count == 16, address == [UInt8](repeating: 0, count: 15) + [1] { return "lo" }
        return route(to: address)?.interface
    }

    /// Whether traffic to `address` leaves the local network through a gateway (nil: the default route's way):
    /// only then can a captive portal, or a network without the internet, stand in its way.
    func isViaGateway(_ address: [UInt8]?) -> Bool {
        guard let address else { return defaultRoute?.viaGateway ?? false }
        if interface(for: address) == "lo" { return false }
        return route(to: address)?.viaGateway ?? false
    }

    /// The most specific route (then the lowest metric) to `address`.
    private func route(to address: [UInt8]) -> Route? {
        let isIPv6 = address.count == 16
        return routes.filter { $0.isIPv6 == isIPv6 && Self.matches(address, $0) }
            .min { $0.prefixLength != $1.prefixLength ? $0.prefixLength > $1.prefixLength : $0.metric < $1.metric }
    }

    /// The interface of the IPv4 default route (else the IPv6 one), or nil when there is none: offline.
    var defaultInterface: String? { defaultRoute?.interface }

    /// The IPv4 default route (else the IPv6 one), the lowest metric first.
    private var defaultRoute: Route? {
        let defaults = routes.filter { $0.prefixLength == 0 && $0.interface != "lo" }
        return defaults.filter { !$0.isIPv6 }.min { $0.metric < $1.metric } ?? defaults.min { $0.metric < $1.metric }
    }

    private static func matches(_ address: [UInt8], _ route: Route) -> Bool {
        var remaining = route.prefixLength
        for index in 0..<address.count where remaining > 0 {
            let bits = min(8, remaining)
            let mask: UInt8 = bits == 8 ? 0xFF : ~(0xFF >> UInt8(bits))
            guard index < route.destination.count, address[index] & mask == route.destination[index] & mask else {
                return false
            }
            remaining -= bits
        }
        return true
    }
}
