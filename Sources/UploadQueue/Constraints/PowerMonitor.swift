import Foundation
import Synchronization

/// The device's power state: from the kernel's power-supply class, read at most once a second (or afresh, before
/// a transfer's chunk), or from UPower, asked every 5 s on a thread of its own (each answer costs `busctl`
/// processes, up to 2 s each when the bus is slow), so no caller ever waits for the bus. Made only while a
/// destination requires something of the power.
final class PowerMonitor: Sendable {
    private let settings: PowerSettings
    private let reader: PowerSupplyReader
    private let upower: UPowerProbe

    private struct Cache {
        var sysfs: PowerState?
        var sysfsReadAt: ContinuousClock.Instant?
        /// UPower's last answer, and when it came; nil while it has not answered (or stopped answering).
        var upower: PowerState?
        var upowerAt: ContinuousClock.Instant?
        var asking = false
    }
    private let cache = Mutex(Cache())

    init(settings: PowerSettings, upower: UPowerProbe = UPowerProbe()) {
        self.settings = settings
        reader = PowerSupplyReader(root: settings.supplyDirectory)
        self.upower = upower
    }

    /// The state now. From UPower when it answers (its latest answer, at most 15 s old); else, in `auto` mode and
    /// with `source = "sysfs"`, the kernel's tree, read again when the last reading is older than a second, or
    /// now when `fresh` (a few small files against a chunk of megabytes). UPower alone and silent: unknown.
    func current(now: ContinuousClock.Instant = .now, fresh: Bool = false) -> PowerState {
        if settings.source != .sysfs {
            startAsking()
            let (answer, at) = cache.withLock { ($0.upower, $0.upowerAt) }
            if let answer, let at, now - at < .seconds(15) { return answer }
            if settings.source == .upower { return .unknown }
        }
        let (cached, readAt) = cache.withLock { ($0.sysfs, $0.sysfsReadAt) }
        if !fresh, let cached, let readAt, now - readAt < .seconds(1) { return cached }
        let state = reader.read()
        cache.withLock {
            $0.sysfs = state
            $0.sysfsReadAt = now
        }
        return state
    }

    /// The state for a one-off look (`uploadq status`): UPower asked now and waited for, else the kernel's tree.
    func snapshot() -> PowerState {
        if settings.source != .sysfs, let answer = upower.query() { return answer }
        return settings.source == .upower ? .unknown : reader.read()
    }

    /// Asks UPower once here and now (the first look must not take a silent bus for external power), then starts
    /// the thread that asks every 5 s: a failed answer keeps the last good one until it is 15 s old, and after
    /// three failures in a row it asks once a minute.
    private func startAsking() {
        let first = cache.withLock { cache in
            defer { cache.asking = true }
            return !cache.asking
        }
        guard first else { return }
        let upower = self.upower
        if let answer = upower.query() {
            cache.withLock {
                $0.upower = answer
                $0.upowerAt = .now
            }
        }
        Thread.detachNewThread { [weak self] in
            var failures = 0
            while true {
                Thread.sleep(forTimeInterval: failures >= 3 ? 60 : 5)
                guard self != nil else { return }
                let answer = upower.query()
                guard let monitor = self else { return }
                failures = answer == nil ? failures + 1 : 0
                if let answer {
                    monitor.cache.withLock {
                        $0.upower = answer
                        $0.upowerAt = .now
                    }
                }
            }
        }
    }
}
