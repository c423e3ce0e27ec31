import CUploadQueueSystem
import Foundation
import Synchronization
import Testing

/// A child process for the tests, started with `posix_spawn` and reaped with `waitpid` on a thread of its own.
///
/// Swift's concurrency pool has as many threads as cores: two here, shared by every test running at once. A test
/// that waited for a child on one of them (Foundation's `Process` runs a run loop on the calling thread; a plain
/// `waitpid` blocks it) held that thread for the child's whole life, and two daemons run to their end starved
/// every other test of the run: an in-process upload's progress or an `eventually` poll then stalled for seconds.
/// So the async `exit()` and `run` wait on a thread started for the purpose; the blocking `wait()` is left for
/// `deinit`, where the child is killed first, and for those threads.
final class ChildProcess: Sendable {
    /// Where the child's standard input comes from.
    enum Input {
        case none
        case file(String)
        case bytes(Data)
    }

    let pid: pid_t
    /// The raw wait status once the child was reaped.
    private let reaped = Mutex<Int32?>(nil)

    /// Starts `arguments` (the first names the program, run as `executable`) with stdout and stderr going to the
    /// given descriptors; `directory` is the working directory. `ownGroup` makes the child lead a process group
    /// of its own, so that `signal(_:group:)` reaches what it started too.
    init(_ arguments: [String], executable: String, directory: String? = nil, environment: [String: String],
         input: Int32?, output: Int32, errors: Int32, ownGroup: Bool = false) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let input {
            posix_spawn_file_actions_adddup2(&actions, input, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, output, 1)
        posix_spawn_file_actions_adddup2(&actions, errors, 2)
        // Nothing else of this process goes along: a test's file still open for writing, inherited by a daemon
        // another test starts meanwhile, would keep that file out of the spool for the daemon's lifetime.
        _ = uploadq_spawn_close_from(&actions, 3)
        // `env --chdir` gives the child its working directory (no posix_spawn call for that is portable).
        let argv = (directory.map { ["/usr/bin/env", "--chdir=\($0)", executable] + arguments.dropFirst() }
            ?? arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in envp { free(pointer) } }
        var child: pid_t = 0
        let program = directory == nil ? executable : "/usr/bin/env"
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        if ownGroup {
            posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
            posix_spawnattr_setpgroup(&attributes, 0)
        }
        let spawned = posix_spawn(&child, program, &actions, &attributes, argv, envp)
        guard spawned == 0 else {
            throw CocoaError(.executableLoad, userInfo: [NSFilePathErrorKey: executable,
                                                         NSLocalizedDescriptionKey: String(cString: strerror(spawned))])
        }
        pid = child
    }

    /// The exit code once it ended (128 + the signal for a killed child), else nil. Never blocks.
    var exitCode: Int32? {
        reap().map(Self.code)
    }

    var isRunning: Bool { exitCode == nil }

    /// Sends `signal` unless the child was reaped already (its pid may then name another process); returns
    /// whether it was sent. The pid stays the child's until it is reaped, which only happens under the same lock.
    /// A child that ended but was not reaped yet is reaped first, and not signalled.
    @discardableResult
    func signal(_ signal: Int32, group: Bool = false) -> Bool {
        reaped.withLock { status in
            Self.reap(pid, into: &status)
            guard status == nil else { return false }
            return kill(group ? -pid : pid, signal) == 0
        }
    }

    /// Waits for the child to end, on a thread of its own; returns its exit code and when it ended (taken on
    /// that thread, so a busy concurrency pool does not lengthen it).
    func exit() async -> (code: Int32, at: ContinuousClock.Instant) {
        if let code = exitCode { return (code, .now) }
        return await onOwnThread { (self.wait(), ContinuousClock.now) }
    }

    /// Waits for the child to end, blocking the calling thread; returns its exit code. For `deinit`, `runBlocking`
    /// (once the child's pipes closed) and `exit()`'s own thread: async code uses `exit()`.
    ///
    /// It waits with `WNOWAIT`, outside the lock, and then reaps under it: `exitCode` and `signal` never wait
    /// for the child's life, and the child's pid cannot be reused before `signal` sees it reaped.
    @discardableResult
    func wait() -> Int32 {
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
        return exitCode ?? 0
    }

    /// Reaps the child if it ended, without waiting; its raw wait status once reaped.
    private func reap() -> Int32? {
        reaped.withLock { status in
            Self.reap(pid, into: &status)
            return status
        }
    }

    /// Reaps `pid` if it ended and `status` holds nothing yet, without waiting; called under the lock.
    private static func reap(_ pid: pid_t, into status: inout Int32?) {
        guard status == nil else { return }
        var raw: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &raw, WNOHANG) } while result < 0 && errno == EINTR
        if result == pid { status = raw }
    }

    private static func code(_ raw: Int32) -> Int32 {
        (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    }

    /// Runs a program to its end, waiting on a thread of its own, and returns its exit code, stdout and stderr.
    /// One still running after `limit` is killed with its process group, and that is an issue of the calling test.
    static func run(_ arguments: [String], executable: String, directory: String? = nil,
                    environment: [String: String], input: Input = .none, limit: Duration = .seconds(300),
                    sourceLocation: SourceLocation = #_sourceLocation) async throws -> (Int32, Data, Data) {
        let ending = try await onOwnThread {
            try runBlocking(arguments, executable: executable, directory: directory, environment: environment,
                            input: input, limit: limit)
        }
        // Recorded here, in the test's task: a plain thread has no current test to blame.
        if ending.expired {
            Issue.record("\(arguments.prefix(3).joined(separator: " ")) still ran after \(limit): killed it",
                         sourceLocation: sourceLocation)
        }
        return (ending.status, ending.stdout, ending.stderr)
    }

    /// What a program left when it ended; `expired`: it was killed at its limit.
    struct Ending: Sendable {
        var status: Int32
        var stdout: Data
        var stderr: Data
        var expired: Bool
    }

    /// Runs a program to its end on the calling thread and returns its exit code, stdout and stderr (both read as
    /// they come, so a chatty child never blocks on a full pipe). Only for synchronous places (a `deinit`) and
    /// commands that end at once: async code uses `run`.
    ///
    /// The program leads a process group of its own. One still running after `limit` is killed with its group
    /// (and `expired` says so): a hung command fails its test instead of hanging the run.
    static func runBlocking(_ arguments: [String], executable: String, directory: String? = nil,
                            environment: [String: String], input: Input = .none,
                            limit: Duration = .seconds(300)) throws -> Ending {
        var out: [Int32] = [-1, -1]
        var err: [Int32] = [-1, -1]
        guard pipe(&out) == 0 else { throw POSIXError(.EMFILE) }
        guard pipe(&err) == 0 else {
            for descriptor in out { close(descriptor) }
            throw POSIXError(.EMFILE)
        }
        for descriptor in [out[0], err[0]] { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        var inputDescriptor: Int32?
        var feed: [Int32] = [-1, -1]
        switch input {
        case .none: break
        case .file(let path):
            let descriptor = open(path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else {
                for descriptor in out + err { close(descriptor) }
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
            }
            inputDescriptor = descriptor
        case .bytes:
            guard pipe(&feed) == 0 else {
                for descriptor in out + err { close(descriptor) }
                throw POSIXError(.EMFILE)
            }
            _ = fcntl(feed[1], F_SETFD, FD_CLOEXEC)
            inputDescriptor = feed[0]
        }
        let child: ChildProcess
        do {
            child = try ChildProcess(arguments, executable: executable, directory: directory, environment: environment,
                                     input: inputDescriptor, output: out[1], errors: err[1], ownGroup: true)
        } catch {
            for descriptor in [out[0], out[1], err[0], err[1], feed[0], feed[1]] where descriptor >= 0 { close(descriptor) }
            if case .file = input, let inputDescriptor { close(inputDescriptor) }
            throw error
        }
        close(out[1])
        close(err[1])
        if let inputDescriptor { close(inputDescriptor) }
        if case .bytes(let data) = input {
            data.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let count = write(feed[1], raw.baseAddress! + offset, raw.count - offset)
                    if count < 0 { if errno == EINTR { continue } else { break } }
                    offset += count
                }
            }
            close(feed[1])
        }
        var stdout = Data()
        var stderr = Data()
        var open = [out[0], err[0]]
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let deadline = ContinuousClock.now + limit
        var expired = false
        while !open.isEmpty {
            var polled = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let left = deadline - ContinuousClock.now
            if left <= .zero && !expired {
                expired = true
                child.signal(SIGKILL, group: true)
            }
            // Whole milliseconds, rounded up: no busy polling in the last second.
            let wait = expired ? -1 : Int32(clamping: Int64((left / .milliseconds(1)).rounded(.up)))
            guard poll(&polled, nfds_t(polled.count), wait) >= 0 || errno == EINTR else { break }
            for entry in polled where entry.revents != 0 {
                let count = read(entry.fd, &buffer, buffer.count)
                if count > 0 {
                    if entry.fd == out[0] { stdout.append(contentsOf: buffer[0..<count]) }
                    else { stderr.append(contentsOf: buffer[0..<count]) }
                } else if count == 0 || errno != EINTR {
                    open.removeAll { $0 == entry.fd }
                    close(entry.fd)
                }
            }
        }
        return Ending(status: child.wait(), stdout: stdout, stderr: stderr, expired: expired)
    }
}

/// Runs `body` on a thread started for it and resumes the caller when it returns, so that a blocking wait (for a
/// child process, a pipe) never holds one of the concurrency pool's few threads.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// `onOwnThread` for a body that cannot fail.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}
