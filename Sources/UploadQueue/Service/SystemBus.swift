import Foundation

/// The system D-Bus through `busctl`: one bounded call (its own timeout, and a kill half a second later), never
/// auto-starting a service. What NetworkManager and UPower are asked through.
struct SystemBus: Sendable {
    /// The `busctl` binary; nil where it is not installed (nothing is asked then).
    var busctl: String? = ["/usr/bin/busctl", "/bin/busctl"].first { FileManager.default.isExecutableFile(atPath: $0) }
    var timeout: Duration = .seconds(2)

    /// `busctl --system ARGUMENTS…`'s standard output, or nil when it failed, timed out or is missing.
    func call(_ arguments: [String]) -> String? {
        guard let busctl else { return nil }
        let seconds = max(1, Int(timeout.components.seconds))
        let command = [busctl, "--system", "--auto-start=no", "--timeout=\(seconds)"] + arguments
        guard case .exited(0, let output, _) = BoundedCommand.run(command, timeout: timeout + .milliseconds(500))
        else { return nil }
        return output
    }
}
