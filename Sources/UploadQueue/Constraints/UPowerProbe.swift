import Foundation

/// Asks UPower over the system bus (through `busctl`, 2 s at most, never auto-starting it) whether the device runs
/// on battery, and its display battery's charge: the daemon desktops and phones (postmarketOS, Librem 5) use.
struct UPowerProbe: Sendable {
    var bus = SystemBus()

    private static let service = "org.freedesktop.UPower"

    /// The state UPower reports; nil when it is not on the bus (or busctl is missing).
    func query() -> PowerState? {
        guard let onBattery = run(["get-property", Self.service, "/org/freedesktop/UPower", Self.service, "OnBattery"])
            .flatMap(Self.parseBoolean) else { return nil }
        let display = "/org/freedesktop/UPower/devices/DisplayDevice"
        let present = run(["get-property", Self.service, display, "\(Self.service).Device", "IsPresent"])
            .flatMap(Self.parseBoolean) ?? false
        let percent = present
            ? run(["get-property", Self.service, display, "\(Self.service).Device", "Percentage"]).flatMap(Self.parseDouble)
            : nil
        return PowerState(onExternalPower: !onBattery, batteryPercent: percent.map { Int($0.rounded()) },
                          source: "upower")
    }

    private func run(_ arguments: [String]) -> String? { bus.call(arguments) }

    /// `b true` (busctl get-property) → true.
    static func parseBoolean(_ output: String) -> Bool? {
        let fields = output.split(whereSeparator: \.isWhitespace)
        guard fields.count == 2, fields[0] == "b" else { return nil }
        switch fields[1] {
        case "true": return true
        case "false": return false
        default: return nil
        }
    }

    /// `d 54.000000` → 54.0, within 0…100.
    static func parseDouble(_ output: String) -> Double? {
        let fields = output.split(whereSeparator: \.isWhitespace)
        guard fields.count == 2, fields[0] == "d", let value = Double(fields[1]), (0...100).contains(value) else {
            return nil
        }
        return value
    }
}
