import Foundation

/// A listening Unix stream socket for one of the daemon's doors (the event stream, the control API), made with its
/// mode before it listens: 0600, or 0660 for `group`. Nobody can connect in between.
struct UnixListener {
    /// The listening descriptor (non-blocking, close-on-exec).
    let descriptor: Int32
    /// The socket file made (device and inode): its owner removes that file alone on stopping, never one a
    /// listener started next on the same path has made meanwhile.
    let device: UInt64
    let inode: UInt64

    /// Binds `path` (replacing a stale socket: the caller holds the daemon lock; anything else at the path is left
    /// alone) and listens. `table` names the config table in messages (`events`, `api`).
    init(path: String, group: String?, table: String, backlog: Int32) throws(UploadQueueError) {
        guard let address = UnixSocketAddress.make(path) else {
            throw UploadQueueError(.io, "[\(table)] socket: the path is too long for a Unix socket (max 107 bytes)",
                                   path: path)
        }
        var existing = stat()
        if lstat(path, &existing) == 0 {
            guard existing.st_mode & S_IFMT == S_IFSOCK else {
                throw UploadQueueError(.io, "[\(table)] socket: something other than a socket is there; move it away "
                    + "or choose another path", path: path)
            }
            unlink(path)
        }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
                                | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw .system("socket", path: path) }
        func fail(_ error: UploadQueueError, bound: Bool) -> UploadQueueError {
            close(descriptor)
            if bound { unlink(path) }
            return error
        }
        guard UnixSocketAddress.with(address, { bind(descriptor, $0, $1) }) == 0 else {
            throw fail(.system("bind", path: path), bound: false)
        }
        if let group {
            guard let entry = getgrnam(group) else {
                throw fail(UploadQueueError(.io, "[\(table)] group \"\(group)\" does not exist (getent group \(group))",
                                            path: path), bound: true)
            }
            guard chown(path, uid_t.max, entry.pointee.gr_gid) == 0 else {
                throw fail(.system("chown to group \(group)", path: path), bound: true)
            }
        }
        guard chmod(path, group == nil ? 0o600 : 0o660) == 0 else { throw fail(.system("chmod", path: path), bound: true) }
        guard listen(descriptor, backlog) == 0 else { throw fail(.system("listen", path: path), bound: true) }
        var made = stat()
        guard lstat(path, &made) == 0 else { throw fail(.system("lstat", path: path), bound: true) }
        self.descriptor = descriptor
        device = UInt64(made.st_dev)
        inode = UInt64(made.st_ino)
    }

    /// Whether `path` is still the socket file this listener made.
    static func isStill(_ path: String, device: UInt64, inode: UInt64) -> Bool {
        var now = stat()
        return lstat(path, &now) == 0 && UInt64(now.st_dev) == device && UInt64(now.st_ino) == inode
    }
}
