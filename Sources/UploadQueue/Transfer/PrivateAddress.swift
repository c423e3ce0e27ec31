import Foundation

/// Addresses on the device or its networks, not on the internet: loopback, private (RFC 1918, unique local),
/// link-local (cloud metadata at 169.254.169.254 among them), shared (CGNAT) and unspecified.
///
/// A server chooses some of the URLs uploadq sends to (a tus `Location`, a minted URL, a Companion part URL) and a
/// cancel sends `DELETE` there: one pointing here would make the daemon a way in to what only the device can
/// reach. Such a peer is refused unless the destination itself is there (`Destination.allowsPrivateTargets`).
enum PrivateAddress {
    /// Whether `address` (an IPv4 or IPv6 literal, as libcurl names its peer) is one of these.
    static func contains(_ address: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 {
            return isPrivate(v4: UInt32(bigEndian: v4.s_addr))
        }
        var v6 = in6_addr()
        let bare = address.hasPrefix("[") && address.hasSuffix("]") ? String(address.dropFirst().dropLast()) : address
        guard inet_pton(AF_INET6, bare.split(separator: "%").first.map(String.init) ?? bare, &v6) == 1 else {
            return false
        }
        let bytes = withUnsafeBytes(of: v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
            // An IPv4-mapped address: judged as the IPv4 one.
            return isPrivate(v4: bytes[12..<16].reduce(0) { $0 << 8 | UInt32($1) })
        }
        if bytes.allSatisfy({ $0 == 0 }) { return true }                       // ::
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true } // ::1
        if bytes[0] & 0xFE == 0xFC { return true }                              // fc00::/7
        if bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80 { return true }          // fe80::/10
        return false
    }

    /// Whether a host as written in a URL is a literal private address or `localhost` (a configured destination
    /// that is itself on the device or its network).
    static func isPrivateHost(_ host: String) -> Bool {
        let lowered = host.lowercased()
        if lowered == "localhost" || lowered.hasSuffix(".localhost") { return true }
        return contains(lowered)
    }

    private static func isPrivate(v4 address: UInt32) -> Bool {
        func within(_ network: UInt32, _ bits: UInt32) -> Bool {
            address >> (32 - bits) == network >> (32 - bits)
        }
        return within(0x7F00_0000, 8) || within(0x0A00_0000, 8) || within(0xAC10_0000, 12)
            || within(0xC0A8_0000, 16) || within(0xA9FE_0000, 16) || within(0x6440_0000, 10)
            || within(0x0000_0000, 8)
    }
}
