import Foundation
import Synchronization

/// The device's power state, read at most once a second from the kernel's power-supply class (every 5 s from
/// UPower, whose answer costs a process), and only while a destination requires something of it.
final class PowerMonitor: Sendable {
    private let settings: PowerSettings
    private let reader: PowerSupplyReader
    private let upower: UPowerProbe

    private struct Cache {
        var state: PowerState?
        var readAt: ContinuousClock.Instant?
        /// When UPower was last found missing (auto mode looks again a minute later).
        var upowerMissingAt: ContinuousClock.Instant?
    }
    private let cache = Mutex(Cache())

    init(settings: PowerSettings, upower: UPowerProbe = UPowerProbe()) {
        self.settings = settings
        reader = PowerSupplyReader(root: settings.supplyDirectory)
        self.upower = upower
    }

    /// The state, read again when the last reading is older than its source's interval. `fresh` reads the
    /// kernel's tree now whatever its age (a transfer before its next chunk: a few small files against megabytes);
    /// UPower's answer is still taken from the last 5 s.
    func current(now: ContinuousClock.Instant = .now, fresh: Bool = false) -> PowerState {
        let (cached, readAt, upowerMissingAt) = cache.withLock { ($0.state, $0.readAt, $0.upowerMissingAt) }
        let interval: Duration = cached?.source == "upower" ? .seconds(5) : fresh ? .zero : .seconds(1)
        if let cached, let readAt, now - readAt < interval { return cached }
        let state: PowerState
        var missing = upowerMissingAt
        switch settings.source {
        case .sysfs:
            state = reader.read()
        case .upower:
            state = upower.query() ?? .unknown
        case .auto:
            if let at = missing, now - at < .seconds(60) {
                state = reader.read()
            } else if let answer = upower.query() {
                state = answer
                missing = nil
            } else {
                missing = now
                state = reader.read()
            }
        }
        cache.withLock { $0 = Cache(state: state, readAt: now, upowerMissingAt: missing) }
        return state
    }
}
