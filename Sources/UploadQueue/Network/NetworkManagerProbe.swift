import Foundation

/// Asks NetworkManager over the system bus (through `busctl`, 2 s at most, never auto-starting it) whether the
/// connection, and the device that carries the route, is metered.
struct NetworkManagerProbe: Sendable {
    /// NetworkManager's `NMMetered` values.
    enum Metered: UInt32, Sendable, Equatable {
        case unknown = 0, yes = 1, no = 2, guessYes = 3, guessNo = 4

        /// `yes` and `guess-yes` count as metered (as GLib, GNOME Software and unattended-upgrades do).
        var isMetered: Bool { self == .yes || self == .guessYes }
        var isKnown: Bool { self != .unknown }

        /// The name `uploadq link` shows: `yes`, `no`, `guess-yes`, `guess-no`, `unknown`.
        var name: String {
            switch self {
            case .unknown: "unknown"
            case .yes: "yes"
            case .no: "no"
            case .guessYes: "guess-yes"
            case .guessNo: "guess-no"
            }
        }
    }

    /// NetworkManager's `NMConnectivityState`: whether the network reaches the internet, as its own check found.
    enum Connectivity: UInt32, Sendable, Equatable {
        case unknown = 0, none = 1, portal = 2, limited = 3, full = 4

        /// `portal` and `limited`: connected, but a captive portal (or the lack of an uplink) stands between it and
        /// the internet.
        var blocksTheInternet: Bool { self == .portal || self == .limited }

        /// The name nmcli gives it.
        var name: String {
            switch self {
            case .unknown: "unknown"
            case .none: "none"
            case .portal: "portal"
            case .limited: "limited"
            case .full: "full"
            }
        }
    }

    var bus = SystemBus()
    private var timeout: Duration { bus.timeout }

    private static let service = "org.freedesktop.NetworkManager"

    /// The global value and, when `interface` is given and known to NetworkManager, that device's; nil when
    /// NetworkManager is not on the bus.
    func query(interface: String?) -> (global: Metered, device: Metered?)? {
        guard bus.busctl != nil else { return queryNmcli(interface: interface) }
        guard let global = run(["get-property", Self.service, "/org/freedesktop/NetworkManager", Self.service,
                                "Metered"]).flatMap(Self.parseProperty) else { return nil }
        guard let interface,
              let path = run(["call", Self.service, "/org/freedesktop/NetworkManager", Self.service,
                              "GetDeviceByIpIface", "s", interface]).flatMap(Self.parseObjectPath),
              let device = run(["get-property", Self.service, path, "\(Self.service).Device", "Metered"])
                .flatMap(Self.parseProperty)
        else { return (global, nil) }
        return (global, device)
    }

    /// NetworkManager's `Connectivity`; nil when it is not on the bus.
    func connectivity() -> Connectivity? {
        if bus.busctl != nil {
            return run(["get-property", Self.service, "/org/freedesktop/NetworkManager", Self.service, "Connectivity"])
                .flatMap(Self.parseUnsigned).map { Connectivity(rawValue: $0) ?? .unknown }
        }
        guard let nmcli, case .exited(0, let output, _) = BoundedCommand.run(
            [nmcli, "-t", "-w", "2", "-f", "CONNECTIVITY", "general"], timeout: timeout) else { return nil }
        return Self.parseConnectivity(output)
    }

    /// `nmcli -t -f CONNECTIVITY general`: `full`, `portal`, `limited`, `none`, `unknown`.
    static func parseConnectivity(_ output: String) -> Connectivity? {
        switch output.trimmingCharacters(in: .whitespacesAndNewlines) {
        case "full": .full
        case "portal": .portal
        case "limited": .limited
        case "none": Connectivity.none
        case "unknown": .unknown
        default: nil
        }
    }

    var nmcli: String? = ["/usr/bin/nmcli", "/bin/nmcli"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Without busctl: the device's value from `nmcli` (which has no global one).
    private func queryNmcli(interface: String?) -> (global: Metered, device: Metered?)? {
        guard let nmcli, let interface,
              case .exited(0, let output, _) = BoundedCommand.run(
                  [nmcli, "-t", "-w", "2", "-g", "GENERAL.METERED", "device", "show", interface], timeout: timeout),
              let device = Self.parseNmcli(output) else { return nil }
        return (.unknown, device)
    }

    private func run(_ arguments: [String]) -> String? { bus.call(arguments) }

    /// `u 3` (busctl get-property) → guess-yes.
    static func parseProperty(_ output: String) -> Metered? {
        parseUnsigned(output).map { Metered(rawValue: $0) ?? .unknown }
    }

    /// `u 4` (busctl get-property of a `u` property) → 4.
    static func parseUnsigned(_ output: String) -> UInt32? {
        let fields = output.split(whereSeparator: \.isWhitespace)
        guard fields.count == 2, fields[0] == "u", let value = UInt32(fields[1]) else { return nil }
        return value
    }

    /// `o "/org/freedesktop/NetworkManager/Devices/3"` (busctl call) → the path.
    static func parseObjectPath(_ output: String) -> String? {
        let fields = output.split(whereSeparator: \.isWhitespace)
        guard fields.count == 2, fields[0] == "o" else { return nil }
        let path = fields[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        return path.hasPrefix("/") ? path : nil
    }

    /// `nmcli -t -g GENERAL.METERED device show IF`: `yes`, `no`, `yes (guessed)`, `no (guessed)`, `unknown`.
    static func parseNmcli(_ output: String) -> Metered? {
        switch output.trimmingCharacters(in: .whitespacesAndNewlines) {
        case "yes": .yes
        case "no": .no
        case "yes (guessed)": .guessYes
        case "no (guessed)": .guessNo
        case "unknown": .unknown
        default: nil
        }
    }
}
