import Foundation

/// Guesses whether an interface is metered from what the system says about it: its name against
/// `link.metered_interfaces` globs, `DEVTYPE=wwan` in its uevent, or a USB-tethering driver.
struct InterfaceRules: Sendable {
    /// Globs such as `wwan*` (`*` and `?`).
    let meteredNames: [String]
    /// Where `/sys/class/net` is (a test may point elsewhere).
    var sysClassNet = "/sys/class/net"

    /// Drivers of phones sharing their mobile connection over USB.
    static let tetheringDrivers: Set<String> = ["rndis_host", "cdc_ether", "ipheth", "cdc_ncm", "cdc_mbim", "qmi_wwan"]

    /// Why `interface` counts as metered, or nil when nothing says so.
    func meteredReason(_ interface: String) -> String? {
        if interface == "lo" { return nil }
        if let glob = meteredNames.first(where: { Self.glob($0, matches: interface) }) {
            return "name matches \(glob)"
        }
        let uevent = (try? String(contentsOfFile: "\(sysClassNet)/\(interface)/uevent", encoding: .utf8)) ?? ""
        if uevent.split(separator: "\n").contains("DEVTYPE=wwan") { return "DEVTYPE=wwan" }
        if let driver = try? FileManager.default.destinationOfSymbolicLink(atPath: "\(sysClassNet)/\(interface)/device/driver"),
           Self.tetheringDrivers.contains((driver as NSString).lastPathComponent) {
            return "USB tethering driver \((driver as NSString).lastPathComponent)"
        }
        return nil
    }

    /// Shell-style matching of `*` and `?`.
    static func glob(_ pattern: String, matches text: String) -> Bool {
        let pattern = Array(pattern)
        let text = Array(text)
        var memo: [Int: Bool] = [:]
        func match(_ p: Int, _ t: Int) -> Bool {
            let key = p * (text.count + 1) + t
            if let known = memo[key] { return known }
            let result: Bool
            if p == pattern.count {
                result = t == text.count
            } else if pattern[p] == "*" {
                result = match(p + 1, t) || (t < text.count && match(p, t + 1))
            } else {
                result = t < text.count && (pattern[p] == "?" || pattern[p] == text[t]) && match(p + 1, t + 1)
            }
            memo[key] = result
            return result
        }
        return match(0, 0)
    }
}
