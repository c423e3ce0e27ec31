extension QueueStatus {
    /// The device's power as last read: on external power or not, and the battery's charge.
    ///
    /// A device that reports no power supply at all (a server, a VM) counts as on external power: there is no
    /// battery to spare.
    public struct PowerState: Sendable, Equatable {
        /// Whether external power (mains, USB, a dock) feeds the device; nil when nothing says.
        public var onExternalPower: Bool?
        /// The system battery's charge in percent (the lowest, when there are several); nil without a battery.
        public var batteryPercent: Int?
        /// Where it was read: `sysfs`, `upower` or `none` (no power supply reported).
        public var source: String

        /// A state as read from `source`.
        public init(onExternalPower: Bool?, batteryPercent: Int?, source: String) {
            self.onExternalPower = onExternalPower
            self.batteryPercent = batteryPercent
            self.source = source
        }

        /// A device with nothing to say about its power: counts as on external power.
        static let unknown = PowerState(onExternalPower: nil, batteryPercent: nil, source: "none")

        /// Whether the device runs on external power: said so, or has no battery to run on.
        public var isExternal: Bool { onExternalPower ?? (batteryPercent == nil) }

        /// Why `requirement` is not met now, in words (`on battery (55%); waits for external power`); nil when it is.
        func unmet(_ requirement: PowerRequirement) -> String? {
            switch requirement {
            case .any:
                return nil
            case .ac:
                return isExternal ? nil : "on battery\(batteryPercent.map { " (\($0)%)" } ?? ""); waits for external power"
            case .batteryNotLow(let threshold):
                guard !isExternal, let percent = batteryPercent, percent < threshold else { return nil }
                return "battery at \(percent)%, below \(threshold)%; waits for a charger or more charge"
            }
        }

        /// One line for `status` and `uploadq power`: `external power, battery 80% (sysfs)`.
        public var summary: String {
            let feed = isExternal ? "external power" : "on battery"
            return feed + (batteryPercent.map { ", battery \($0)%" } ?? "") + " (\(source))"
        }
    }
}
