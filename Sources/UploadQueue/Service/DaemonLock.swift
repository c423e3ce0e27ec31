import Foundation
import Synchronization

/// The exclusive `flock` on `state_dir/daemon.lock` that makes one process the runner of a queue.
///
/// The lock dies with its process (kill -9 included), so a stale lock file never blocks a restart; the file
/// holds the owner's pid for `status`.
final class DaemonLock: Sendable {
    /// The lock file's descriptor while the lock is held; -1 once released.
    private let descriptor: Mutex<Int32>
    let path: String

    /// Takes the lock or throws `daemonAlreadyRunning` naming the holder's pid.
    init(path: String) throws(UploadQueueError) {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .system("open", path: path) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let holder = Self.readPID(descriptor)
            close(descriptor)
            let who = holder.map { "pid \($0)" } ?? "another process"
            throw UploadQueueError(.daemonAlreadyRunning,
                                   "another uploadq daemon (\(who)) already runs this queue; stop it first or use another state_dir",
                                   path: path)
        }
        let text = "\(getpid())\n"
        _ = ftruncate(descriptor, 0)
        _ = text.withCString { pwrite(descriptor, $0, strlen($0), 0) }
        self.descriptor = Mutex(descriptor)
        self.path = path
    }

    deinit { release() }

    /// Lets the lock go (once; the next call does nothing): another process may run the queue from now on.
    func release() {
        let held = descriptor.withLock { descriptor in
            defer { descriptor = -1 }
            return descriptor
        }
        guard held >= 0 else { return }
        _ = ftruncate(held, 0)
        close(held)
    }

    /// The pid of the process holding the lock, or nil when no one runs the queue.
    static func holder(path: String) -> Int32? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        if flock(descriptor, LOCK_SH | LOCK_NB) == 0 {
            flock(descriptor, LOCK_UN)
            return nil
        }
        return readPID(descriptor) ?? 0
    }

    private static func readPID(_ descriptor: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = pread(descriptor, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        return Int32(String(decoding: buffer[0..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
