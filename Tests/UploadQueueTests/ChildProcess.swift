import CUploadQueueSystem
import Foundation
import Synchronization
import Testing

/// A child process for the tests, started with `posix_spawn` and reaped with `waitpid` on the calling thread.
///
/// Foundation's `Process` waits for a child by running a run loop on the calling thread (a worker of Swift's
/// concurrency pool, in an async test) and reads pipes on dispatch's global queues, which on a 2-core machine are
/// two threads wide. This needs no run loop and no other thread: both pipes are read with `poll` and the child is
/// reaped with `waitpid`, on the calling thread.
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
    /// given descriptors; `directory` is the working directory.
    init(_ arguments: [String], executable: String, directory: String? = nil, environment: [String: String],
         input: Int32?, output: Int32, errors: Int32) throws {
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
        let spawned = posix_spawn(&child, program, &actions, nil, argv, envp)
        guard spawned == 0 else {
            throw CocoaError(.executableLoad, userInfo: [NSFilePathErrorKey: executable,
                                                         NSLocalizedDescriptionKey: String(cString: strerror(spawned))])
        }
        pid = child
    }

    /// The exit code once it ended (128 + the signal for a killed child), else nil.
    var exitCode: Int32? {
        reap(blocking: false).map(Self.code)
    }

    var isRunning: Bool { exitCode == nil }

    /// Waits for the child to end; returns its exit code.
    @discardableResult
    func wait() -> Int32 {
        Self.code(reap(blocking: true) ?? 0)
    }

    private func reap(blocking: Bool) -> Int32? {
        reaped.withLock { status in
            if status == nil {
                var raw: Int32 = 0
                var result: pid_t
                repeat { result = waitpid(pid, &raw, blocking ? 0 : WNOHANG) } while result < 0 && errno == EINTR
                if result == pid { status = raw }
            }
            return status
        }
    }

    private static func code(_ raw: Int32) -> Int32 {
        (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    }

    /// Runs a program to its end and returns its exit code, stdout and stderr (both read as they come, so a
    /// chatty child never blocks on a full pipe).
    static func run(_ arguments: [String], executable: String, directory: String? = nil,
                    environment: [String: String], input: Input = .none) throws -> (Int32, Data, Data) {
        var out: [Int32] = [-1, -1]
        var err: [Int32] = [-1, -1]
        guard pipe(&out) == 0, pipe(&err) == 0 else { throw POSIXError(.EMFILE) }
        for descriptor in [out[0], err[0]] { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        var inputDescriptor: Int32?
        var feed: [Int32] = [-1, -1]
        switch input {
        case .none: break
        case .file(let path): inputDescriptor = open(path, O_RDONLY | O_CLOEXEC)
        case .bytes:
            guard pipe(&feed) == 0 else { throw POSIXError(.EMFILE) }
            _ = fcntl(feed[1], F_SETFD, FD_CLOEXEC)
            inputDescriptor = feed[0]
        }
        let child: ChildProcess
        do {
            child = try ChildProcess(arguments, executable: executable, directory: directory, environment: environment,
                                     input: inputDescriptor, output: out[1], errors: err[1])
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
        while !open.isEmpty {
            var polled = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            guard poll(&polled, nfds_t(polled.count), -1) >= 0 || errno == EINTR else { break }
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
        return (child.wait(), stdout, stderr)
    }
}
