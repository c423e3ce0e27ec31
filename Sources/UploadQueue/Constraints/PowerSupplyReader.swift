import Foundation

/// Reads the power state from the kernel's power-supply class (`/sys/class/power_supply`, or a tree of the same
/// layout for tests): each supply is a directory with `type`, and `online` (mains, USB, wireless chargers) or
/// `capacity` and `status` (batteries).
///
/// Batteries whose `scope` is `Device` (a mouse's, a keyboard's) do not power the system and are left out.
struct PowerSupplyReader: Sendable {
    /// The class directory.
    var root: String

    /// The state the tree describes; `PowerState.unknown` when it lists no supply (or cannot be read).
    func read() -> PowerState {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: root) else { return .unknown }
        var external: Bool?
        var lowest: Int?
        var charging = false
        for name in names.sorted() where !name.hasPrefix(".") {
            let directory = (root as NSString).appendingPathComponent(name)
            guard let type = Self.value(directory, "type") else { continue }
            if type == "Battery" {
                guard Self.value(directory, "scope") != "Device",
                      Self.value(directory, "present") != "0" else { continue }
                if let capacity = Self.value(directory, "capacity").flatMap({ Int($0) }), (0...100).contains(capacity) {
                    lowest = min(lowest ?? capacity, capacity)
                }
                // A battery that charges, or stays full or idle on the charger, has external power behind it.
                if let status = Self.value(directory, "status"), ["Charging", "Full", "Not charging"].contains(status) {
                    charging = true
                }
            } else if let online = Self.value(directory, "online") {
                // Mains, USB (all its kinds), Wireless, UPS: one online is enough.
                external = (external ?? false) || online == "1"
            }
        }
        if external != true && charging { external = true }
        if external == nil && lowest == nil { return .unknown }
        return PowerState(onExternalPower: external, batteryPercent: lowest, source: "sysfs")
    }

    /// A supply attribute, trimmed; at most 64 bytes are read (they are single words).
    static func value(_ directory: String, _ attribute: String) -> String? {
        let path = (directory as NSString).appendingPathComponent(attribute)
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.read(upToCount: 64), let text = String(data: data, encoding: .utf8) else {
            return nil
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
