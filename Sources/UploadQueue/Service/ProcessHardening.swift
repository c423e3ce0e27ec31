import CUploadQueueSystem
import Foundation

/// What the daemon does to itself at start so that the secrets it holds (tokens, S3 keys) cannot leave through a
/// core dump or a debugger: it becomes undumpable, and its core file size limit drops to zero.
public enum ProcessHardening {
    /// Applies both; returns what could not be done, to be logged (the daemon runs on without it).
    public static func apply() -> [String] {
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

    /// Whether this process may be dumped (and attached to by its user's other processes).
    public static var isDumpable: Bool { uploadq_is_dumpable() == 1 }
}
