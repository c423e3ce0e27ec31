import Foundation

/// A file of allocated blocks in the state directory (`space.reserve`), given back when the queue's disk is
/// full so the database can still record what finishes, and made again once there is room: the ballast a
/// database server keeps so that a full disk does not also mean a queue that cannot write down its last words.
///
/// Only the runner (which holds the daemon lock) makes it; any process that finds the disk too full to open the
/// queue gives it back, so a command can still read and write the queue.
package struct SpaceReserve: Sendable {
    /// Where the reserve lives.
    package let path: String
    /// Its size in bytes.
    package let size: Int64

    /// The standard reserve of `stateDirectory`: 8 MiB, room for thousands of job updates.
    package init(stateDirectory: String, size: Int64 = 8 << 20) {
        path = (stateDirectory as NSString).appendingPathComponent("space.reserve")
        self.size = size
    }

    /// Whether the reserve is in place at its full size.
    package var isInPlace: Bool {
        var info = stat()
        return stat(path, &info) == 0 && Int64(info.st_blocks) * 512 >= size
    }

    /// Makes the reserve when it is missing and `freeSpace` leaves room for it above `min_free_space`; true when
    /// it is (now) in place. Written under a temporary name and renamed, so a crash leaves no half reserve.
    @discardableResult
    package func ensure(freeSpace: FreeSpaceGuard) -> Bool {
        if isInPlace { return true }
        guard freeSpace.check(needing: size) == nil else { return false }
        let temporary = path + ".tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return false }
        let allocated = posix_fallocate(descriptor, 0, off_t(size)) == 0 && fsync(descriptor) == 0
        close(descriptor)
        guard allocated, rename(temporary, path) == 0 else {
            unlink(temporary)
            return false
        }
        // Its name too: a reserve a power cut took away could not be made again on a disk that filled meanwhile.
        return (try? syncDirectory((path as NSString).deletingLastPathComponent)) != nil
    }

    /// Gives the reserve's blocks back to the file system; true when there was one to give.
    @discardableResult
    package func release() -> Bool {
        unlink(path + ".tmp")
        return unlink(path) == 0
    }
}
