import Foundation

extension QueueStatus {
    /// The room on one file system as an unprivileged process may use it (`statvfs`: `f_bavail`, not `f_bfree`,
    /// so the blocks reserved for root do not count as free).
    public struct DiskSpace: Sendable, Equatable {
        /// Bytes this process may still write.
        public var available: Int64
        /// The file system's size in bytes.
        public var total: Int64

        public init(available: Int64, total: Int64) {
            self.available = available
            self.total = total
        }

        /// The file system that holds `path`; nil when it cannot be asked (the path is gone).
        public static func of(path: String) -> DiskSpace? {
            var stats = statvfs()
            guard statvfs(path, &stats) == 0 else { return nil }
            let block = Int64(stats.f_frsize > 0 ? stats.f_frsize : stats.f_bsize)
            return DiskSpace(available: Int64(stats.f_bavail) * block, total: Int64(stats.f_blocks) * block)
        }
    }
}
