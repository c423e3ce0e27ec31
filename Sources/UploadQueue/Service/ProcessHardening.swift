import CUploadQueueSystem
import Foundation

/// What the daemon does to itself at start so that the secrets it holds (tokens, S3 keys) cannot leave through a
/// core dump or a debugger: it becomes undumpable, and its core file size limit drops to zero.
package enum ProcessHardening {
    /// Applies both; returns what could not be done, to be logged (the daemon runs on without it).
    package static func apply() -> [String] {
        var failures: [String] = []
        if uploadq_make_undumpable() != 0 {
            failures.append("PR_SET_DUMPABLE: \(String(cString: strerror(errno)))")
        }
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        if setrlimit(Int32(RLIMIT_CORE.rawValue), &none) != 0 {
            failures.append("RLIMIT_CORE: \(String(cString: strerror(errno)))")
        }
        return failures
    }

    /// Makes the daemon the reaper of its helpers' descendants (`PR_SET_CHILD_SUBREAPER`): a hook that calls
    /// `setsid` and leaves a process behind leaves it to the daemon, which ends it with the helper
    /// (`BoundedCommand`). For the daemon alone: a process embedding the library may have children of its own.
    /// Returns what could not be done, to be logged.
    package static func reapHelpers() -> String? {
        guard uploadq_become_subreaper() == 0 else { return "PR_SET_CHILD_SUBREAPER: \(String(cString: strerror(errno)))" }
        BoundedCommand.reapsOrphans.store(true, ordering: .releasing)
        return nil
    }

    /// Whether this process may be dumped (and attached to by its user's other processes).
    package static var isDumpable: Bool { uploadq_is_dumpable() == 1 }
}
