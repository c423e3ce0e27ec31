extension Configuration {
    /// `[power]`: what transfers need from the device's power, and where the power state is read.
    public struct PowerSettings: Sendable, Equatable {
        /// Where the power state comes from.
        public enum Source: String, Sendable, Equatable, CaseIterable {
            /// UPower when it is on the system bus, else the kernel's power-supply class.
            case auto
            /// The kernel's power-supply class (`supply_dir`).
            case sysfs
            /// UPower over the system bus only.
            case upower
        }

        /// `require`: every destination's requirement unless it names its own (`power = …`).
        public var require: PowerRequirement = .any
        /// `low_battery`: the charge below which `battery-not-low` holds transfers, in percent.
        public var lowBattery = 20
        /// `source`.
        public var source: Source = .auto
        /// `supply_dir`: the power-supply class directory (a tree of the same layout in tests).
        public var supplyDirectory = "/sys/class/power_supply"

        /// No requirement; the state read from UPower or the kernel's tree when one is set.
        public init() {}
    }
}
