import Foundation

/// Decides the link class to an address: a hand-set override first; no route at all is `offline`; a captive
/// portal in the way (the connectivity check, NetworkManager's `Connectivity`) is `portal`; then NetworkManager's
/// `Metered`, then interface rules on the interface that carries the route.
struct LinkClassifier: Sendable {
    let rules: InterfaceRules
    let networkManager: NetworkManagerProbe?

    init(meteredInterfaces: [String], networkManager: NetworkManagerProbe? = NetworkManagerProbe()) {
        rules = InterfaceRules(meteredNames: meteredInterfaces)
        self.networkManager = networkManager
    }

    /// The class for traffic leaving through `interface` (nil: no route); `nm` is NetworkManager's answer, if any;
    /// `portal` says why a captive portal is in the way of this traffic, and who found it.
    func classify(interface: String?, override: LinkOverride,
                  networkManager nm: (global: NetworkManagerProbe.Metered, device: NetworkManagerProbe.Metered?)?,
                  portal: (reason: String, source: LinkStatus.Source)? = nil) -> LinkStatus
    {
        let nmValue = nm.map { ($0.device ?? $0.global).name }
        if let forced = override.linkClass {
            return LinkStatus(linkClass: forced, source: .override, interface: interface, networkManager: nmValue,
                              reason: "set by `uploadq link \(override.rawValue)` or [link] mode")
        }
        guard let interface else {
            return LinkStatus(linkClass: .offline, source: .interfaceRule, networkManager: nmValue, reason: "no route")
        }
        if let portal {
            return LinkStatus(linkClass: .portal, source: portal.source, interface: interface, networkManager: nmValue,
                              reason: portal.reason)
        }
        if interface == "lo" {
            return LinkStatus(linkClass: .unmetered, source: .interfaceRule, interface: interface, reason: "loopback")
        }
        if let nm {
            // The more metered of the device's value and the global one (the global one follows the primary
            // connection, which a VPN or policy routing can make the wrong one).
            let values = [nm.device, nm.global].compactMap { $0 }
            if let metered = values.first(where: \.isMetered) {
                return LinkStatus(linkClass: .metered, source: .networkmanager, interface: interface,
                                  networkManager: metered.name, reason: "NetworkManager Metered=\(metered.name)")
            }
            // NetworkManager's own `no` (not a guess) stands; its guesses yield to the interface rules.
            if let definite = values.first(where: { $0 == .no }) {
                return LinkStatus(linkClass: .unmetered, source: .networkmanager, interface: interface,
                                  networkManager: definite.name, reason: "NetworkManager Metered=no")
            }
            if let ruled = rules.meteredReason(interface) {
                return LinkStatus(linkClass: .metered, source: .interfaceRule, interface: interface,
                                  networkManager: nmValue, reason: ruled)
            }
            if let known = values.first(where: \.isKnown) {
                return LinkStatus(linkClass: .unmetered, source: .networkmanager, interface: interface,
                                  networkManager: known.name, reason: "NetworkManager Metered=\(known.name)")
            }
        } else if let ruled = rules.meteredReason(interface) {
            return LinkStatus(linkClass: .metered, source: .interfaceRule, interface: interface, reason: ruled)
        }
        return LinkStatus(linkClass: .unmetered, source: nm == nil ? .interfaceRule : .default, interface: interface,
                          networkManager: nmValue, reason: "no rule says metered")
    }
}
