import Foundation

/// What `fstat` says about a file: enough to tell whether it changed (size, mtime, ctime) or was swapped (inode).
struct FileFingerprint: Sendable, Equatable {
    var size: Int64
    var modifiedNanoseconds: Int64
    var changedNanoseconds: Int64
    var inode: Int64
    var device: Int64
    var mode: UInt32
    var links: Int
    /// The owning user and group.
    var owner: UInt32
    var group: UInt32
    /// The bytes the file holds on disk (`st_blocks`, 512 each): far below `size` for a sparse file.
    var allocatedBytes: Int64

    init(_ info: stat) {
        size = Int64(info.st_size)
        modifiedNanoseconds = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        changedNanoseconds = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
        inode = Int64(bitPattern: UInt64(info.st_ino))
        device = Int64(bitPattern: UInt64(info.st_dev))
        mode = info.st_mode
        links = Int(info.st_nlink)
        owner = info.st_uid
        group = info.st_gid
        allocatedBytes = Int64(info.st_blocks) * 512
    }

    /// Whether this is the file recorded (in an earlier boot, perhaps) as `inode` on `device`, modified at
    /// `modifiedNanoseconds`: the same inode, on the same device or with the same modification time. A device's
    /// number may change across a reboot (device-mapper, FUSE and network file systems are numbered as they are
    /// mounted), which must not make a queued file look replaced.
    func isRecordedFile(inode: Int64, device: Int64, modifiedNanoseconds: Int64) -> Bool {
        self.inode == inode && (self.device == device || self.modifiedNanoseconds == modifiedNanoseconds)
    }

    /// The fingerprint of an open descriptor.
    static func of(descriptor: Int32, path: String) throws(UploadQueueError) -> FileFingerprint {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .system("fstat", path: path) }
        return FileFingerprint(info)
    }

    /// The fingerprint of a path, without following a final symbolic link.
    static func of(path: String) throws(UploadQueueError) -> FileFingerprint {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw .system("lstat", path: path) }
        return FileFingerprint(info)
    }

    var isRegularFile: Bool { mode & S_IFMT == S_IFREG }
    var isSymbolicLink: Bool { mode & S_IFMT == S_IFLNK }
    var isDirectory: Bool { mode & S_IFMT == S_IFDIR }

    /// A short name for the file's type, for messages.
    var typeName: String {
        switch mode & S_IFMT {
        case S_IFREG: return "regular file"
        case S_IFDIR: return "directory"
        case S_IFLNK: return "symbolic link"
        case S_IFIFO: return "FIFO"
        case S_IFSOCK: return "socket"
        case S_IFCHR: return "character device"
        case S_IFBLK: return "block device"
        default: return "special file"
        }
    }

    /// Whether the file is mostly holes (`truncate -s 1T`): at least 1 MiB long with less than 1/32 of it on disk.
    /// Compressing file systems store a photo or a video at about its size; only holes go this far below it.
    var isSparse: Bool { size >= 1 << 20 && allocatedBytes < size / 32 }

    /// The permission bits a copy of this file (into `blobs/`, or delivered to a `file` destination) keeps when its
    /// group is `group`: the owner's and others' bits less write, and the group's only while it is the same group
    /// (another group's members must not gain what this group had). Never wider than this file's.
    func modeKept(inGroup group: UInt32) -> UInt32 {
        (mode & 0o705) | (group == self.group ? mode & 0o050 : 0)
    }

    /// True when the content may differ: size, modification or change time moved.
    func contentMayDiffer(from other: FileFingerprint) -> Bool {
        size != other.size || modifiedNanoseconds != other.modifiedNanoseconds
            || changedNanoseconds != other.changedNanoseconds
    }
}
