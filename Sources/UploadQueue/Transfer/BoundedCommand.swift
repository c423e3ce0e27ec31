import CUploadQueueSystem
import Foundation
import Synchronization

/// Runs a helper program (a `token_command`, `busctl`): directly (no shell) in a process group of its own, its output read with a
/// deadline; at the deadline the whole group is killed, so a helper that forks cannot hold the daemon up.
///
/// A helper gets what it needs and no more: a scrubbed environment unless its caller names one (the daemon's holds
/// tokens), no descriptor of the daemon's, and no ambient capability (the unit's `CAP_LEASE` stays the daemon's).
enum BoundedCommand {
    /// Whether this process reaps its helpers' orphans (`ProcessHardening.reapHelpers`, the daemon): its only
    /// children are then the helpers, and any other child is one a helper left behind.
    static let reapsOrphans = Atomic<Bool>(false)

    /// The helpers running now, by process id (not orphans, whatever their parent).
    private static let running = Mutex<Set<pid_t>>([])

    /// Variables through which systemd talks to the service itself; children do not inherit them.
    static let serviceManagerVariables: Set<String> = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS",
                                                        "LISTEN_PID", "LISTEN_FDNAMES"]

    /// What the program did.
    enum Outcome: Equatable {
        case exited(status: Int32, stdout: String, stderr: String)
        case timedOut
        case notStarted(String)
        /// It wrote more than `maximumOutput` bytes on its standard output, and was killed.
        case tooMuchOutput
    }

    /// The variables a program run with a scrubbed environment keeps: enough to find programs and files, and to
    /// speak the admin's language.
    static let baseVariables = ["PATH", "HOME", "LANG"]

    /// The variables a system tool (`busctl`, `nmcli`) gets beside `baseVariables`: where the system bus is.
    static let systemToolVariables = ["DBUS_SYSTEM_BUS_ADDRESS"]

    /// The daemon's `baseVariables` and those named in `passing` (the ones it has), for a program run with a
    /// scrubbed environment.
    static func scrubbedEnvironment(passing: [String]) -> [String: String] {
        let daemon = ProcessInfo.processInfo.environment
        return (baseVariables + passing).reduce(into: [String: String]()) { kept, name in kept[name] = daemon[name] }
    }

    /// The most standard input a program gets: what a Linux pipe holds.
    static let maximumInput = 60 << 10

    /// Runs `arguments` (the program's absolute path first) and waits at most `timeout`.
    ///
    /// - Parameters:
    ///   - environment: the variables the program gets; nil: `baseVariables` and `systemToolVariables` alone (the
    ///     daemon's environment holds tokens, and systemd's variables are the daemon's own).
    ///   - maximumOutput: the most standard output read; more kills the program (`tooMuchOutput`), unless
    ///     `dropsExcessOutput`, which keeps that much and drains and drops the rest. Standard error is kept up to
    ///     the same size, and the rest drained and dropped.
    ///   - input: the program's standard input (at most `maximumInput` bytes, which a pipe holds whole, so writing
    ///     it never waits on the program); nil gives it `/dev/null`.
    static func run(_ arguments: [String], timeout: Duration, environment: [String: String]? = nil,
                    maximumOutput: Int = 1 << 20, dropsExcessOutput: Bool = false, input: [UInt8]? = nil) -> Outcome {
        if let input, input.count > maximumInput {
            return .notStarted("its input would be \(input.count) bytes, more than \(maximumInput)")
        }
        var output: [Int32] = [-1, -1]
        var errors: [Int32] = [-1, -1]
        var feed: [Int32] = [-1, -1]
        guard pipe(&output) == 0, pipe(&errors) == 0, input == nil || pipe(&feed) == 0 else {
            let reason = String(cString: strerror(errno))
            for descriptor in output + errors + feed where descriptor >= 0 { close(descriptor) }
            return .notStarted(reason)
        }
        defer { for descriptor in [output[0], errors[0], feed[1]] where descriptor >= 0 { close(descriptor) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if input != nil {
            posix_spawn_file_actions_adddup2(&actions, feed[0], 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errors[1], 2)
        for descriptor in [output[0], output[1], errors[0], errors[1], feed[0], feed[1]] where descriptor >= 0 {
            posix_spawn_file_actions_addclose(&actions, descriptor)
        }
        // No other descriptor of the daemon (its database, the spool's files) reaches the program.
        _ = uploadq_spawn_close_from(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)

        var child: pid_t = 0
        let argv = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        // Never the daemon's whole environment: it holds tokens (`token_env`), and a systemd tool (busctl) given
        // systemd's variables would report to the service manager as if it were the service (`READY=1`).
        let inherited = (environment ?? Self.scrubbedEnvironment(passing: Self.systemToolVariables))
            .filter { !Self.serviceManagerVariables.contains($0.key) }
        let variables = inherited.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in variables { free(pointer) } }
        // Registered as it starts, under the lock the sweep of orphans takes: a helper starting meanwhile is never
        // taken for one.
        let spawned = running.withLock { helpers -> Int32 in
            // Capabilities are per thread, and the spawn inherits this one's: cleared here, just before.
            _ = uploadq_clear_ambient_capabilities()
            let result = posix_spawn(&child, arguments[0], &actions, &attributes, argv, variables)
            if result == 0 { helpers.insert(child) }
            return result
        }
        close(output[1])
        close(errors[1])
        if feed[0] >= 0 { close(feed[0]) }
        guard spawned == 0 else { return .notStarted(String(cString: strerror(spawned))) }
        defer {
            running.withLock { _ = $0.remove(child) }
            endOrphans()
        }
        if let input {
            // It fits the pipe whole, and the write never waits (a smaller pipe, or a program that does not read,
            // leaves it short: the program sees its input end there). A program that exits without reading it
            // fails the write with EPIPE, which the process ignores (SIGPIPE is ignored from the start, for libcurl).
            _ = fcntl(feed[1], F_SETFL, fcntl(feed[1], F_GETFL) | O_NONBLOCK)
            let written = input.withUnsafeBytes { write(feed[1], $0.baseAddress, $0.count) }
            close(feed[1])
            feed[1] = -1
            if written != input.count && !(written < 0 && errno == EPIPE) {
                // A pipe smaller than the input (a user over its pipe quota gets 4 KiB ones): the program would
                // read a cut input and act on it. It is stopped instead.
                kill(-child, SIGKILL)
                var status: Int32 = 0
                waitpid(child, &status, 0)
                return .notStarted("its input (\(input.count) bytes) did not fit the pipe to it")
            }
        }

        let deadline = ContinuousClock.now + timeout
        var stdout = Data()
        var stderr = Data()
        var open = [output[0], errors[0]]
        var exitStatus: Int32?
        var exitedAt: ContinuousClock.Instant?
        while true {
            if exitStatus == nil {
                var status: Int32 = 0
                if waitpid(child, &status, WNOHANG) == child {
                    exitStatus = status
                    exitedAt = .now
                }
            }
            // Done when both pipes closed, or shortly after the program exited (a daemonised grandchild may keep
            // them open).
            if open.isEmpty { break }
            if let exitedAt, ContinuousClock.now - exitedAt > .milliseconds(200) { break }
            if ContinuousClock.now >= deadline {
                endTree(of: child, reaped: exitStatus != nil)
                return .timedOut
            }
            var polled = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            _ = poll(&polled, nfds_t(polled.count), 50)
            for entry in polled where entry.revents != 0 {
                var buffer = [UInt8](repeating: 0, count: 4096)
                let count = read(entry.fd, &buffer, buffer.count)
                if count > 0 {
                    if entry.fd == output[0] && dropsExcessOutput {
                        if stdout.count < maximumOutput {
                            stdout.append(contentsOf: buffer[0..<min(count, maximumOutput - stdout.count)])
                        }
                    } else if entry.fd == output[0] {
                        stdout.append(contentsOf: buffer[0..<count])
                        if stdout.count > maximumOutput {
                            endTree(of: child, reaped: exitStatus != nil)
                            return .tooMuchOutput
                        }
                    } else if stderr.count < maximumOutput {
                        stderr.append(contentsOf: buffer[0..<min(count, maximumOutput - stderr.count)])
                    }
                } else if count == 0 || (errno != EINTR && errno != EAGAIN) {
                    open.removeAll { $0 == entry.fd }
                }
            }
        }
        if exitStatus == nil {
            var status: Int32 = 0
            waitpid(child, &status, 0)
            exitStatus = status
        }
        kill(-child, SIGKILL)  // whatever the program left running in its group
        let status = exitStatus ?? 0
        let code: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return .exited(status: code, stdout: String(decoding: stdout, as: UTF8.self),
                       stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// Kills the program, its group, and every descendant it has (one in a session of its own included: found
    /// through `/proc` before anything is killed, while the tree still hangs together); reaps the program.
    private static func endTree(of child: pid_t, reaped: Bool) {
        let tree = descendants(of: child)
        kill(-child, SIGKILL)
        kill(child, SIGKILL)
        for pid in tree { kill(pid, SIGKILL) }
        if !reaped { var status: Int32 = 0; waitpid(child, &status, 0) }
    }

    /// The descendants of `pid`, from `/proc/PID/task/*/children`, nearest first.
    static func descendants(of pid: pid_t) -> [pid_t] {
        var found: [pid_t] = []
        var next = [pid]
        while let parent = next.popLast(), found.count < 4096 {
            let children = Self.children(of: parent)
            found += children
            next += children
        }
        return found
    }

    /// The children of process `pid` (of every one of its threads).
    static func children(of pid: pid_t) -> [pid_t] {
        let tasks = "/proc/\(pid)/task"
        guard let threads = try? FileManager.default.contentsOfDirectory(atPath: tasks) else { return [] }
        return threads.flatMap { thread -> [pid_t] in
            guard let text = try? String(contentsOfFile: "\(tasks)/\(thread)/children", encoding: .utf8) else { return [] }
            return text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
    }

    /// In the daemon (`reapsOrphans`): kills and reaps every child that is not a running helper, that is, what a
    /// helper left behind in a session of its own (the kernel gave it to the daemon, its subreaper).
    private static func endOrphans() {
        guard reapsOrphans.load(ordering: .acquiring) else { return }
        // Listed under the lock (a helper starting meanwhile is registered first), ended outside it: one stuck in
        // the kernel holds up no other helper's start.
        let orphans = running.withLock { helpers in Set(children(of: getpid())).subtracting(helpers) }
        for pid in orphans { kill(pid, SIGKILL) }
        var left = orphans
        for _ in 0..<50 where !left.isEmpty {
            left = left.filter { pid in
                var status: Int32 = 0
                return waitpid(pid, &status, WNOHANG) == 0
            }
            if !left.isEmpty { usleep(10_000) }
        }
    }
}
