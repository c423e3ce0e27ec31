/// One thing `uploadq doctor` found: which check, how bad, what it saw, and the command or config line that
/// fixes it.
package struct DoctorFinding: Sendable, Equatable {
    /// How much a finding matters; only `failure` makes `doctor` exit 1.
    package enum Severity: String, Sendable, Equatable, Comparable, CaseIterable {
        /// The check passed.
        case ok
        /// Worth knowing (a job waits for a window, NetworkManager is absent); nothing to fix.
        case info
        /// Works, but may not be what was meant (a spool only its owner can write to).
        case warning
        /// Uploads cannot work as configured until it is fixed.
        case failure

        package static func < (left: Severity, right: Severity) -> Bool {
            allCases.firstIndex(of: left)! < allCases.firstIndex(of: right)!
        }
    }

    /// What was checked: `config`, `state`, `database`, `spool`, `limits`, `link`, `networkmanager`, `power`,
    /// `windows`, or `destination NAME`.
    package var check: String
    package var severity: Severity
    /// What was found, with the values that matter (paths, modes, statuses); never a secret.
    package var message: String
    /// The command to run or the config line to write, when there is one.
    package var fix: String?

    package init(_ check: String, _ severity: Severity, _ message: String, fix: String? = nil) {
        self.check = check
        self.severity = severity
        self.message = message
        self.fix = fix
    }
}
