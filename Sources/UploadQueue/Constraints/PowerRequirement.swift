extension Configuration {
    /// What transfers need from the device's power before they may run: Android WorkManager's
    /// `setRequiresCharging` (`ac`) and `setRequiresBatteryNotLow` (`battery-not-low`).
    public enum PowerRequirement: Sendable, Equatable, CustomStringConvertible {
        /// Whatever the power.
        case any
        /// Only on external power (mains, a USB charger, a dock).
        case ac
        /// On external power, or on a battery charged to at least `percent`.
        case batteryNotLow(percent: Int)

        /// Parses `any`, `ac` or `battery-not-low` (with the `low_battery` threshold in percent).
        public init?(_ text: String, lowBattery: Int) {
            switch text {
            case "any": self = .any
            case "ac": self = .ac
            case "battery-not-low": self = .batteryNotLow(percent: lowBattery)
            default: return nil
            }
        }

        /// `any`, `ac` or `battery-not-low` (`battery-not-low (20%)` with its threshold).
        public var description: String {
            switch self {
            case .any: "any"
            case .ac: "ac"
            case .batteryNotLow(let percent): "battery-not-low (\(percent)%)"
            }
        }
    }
}
