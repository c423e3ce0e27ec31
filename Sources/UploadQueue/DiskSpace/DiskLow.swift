import Foundation

extension QueueStatus {
    /// Why the intake is paused: the file system holding `path` has less room than `[limits] min_free_space`
    /// (or would have, once a copy of `needed` bytes was made).
    public struct DiskLow: Sendable, Equatable, CustomStringConvertible {
        /// The directory whose file system is short of room (the state directory or `blobs/`).
        public var path: String
        /// Bytes free there now.
        public var available: Int64
        /// `min_free_space` in bytes on that file system.
        public var minimum: Int64
        /// Bytes the refused intake would have written (0 for a spool pause).
        public var needed: Int64

        public init(path: String, available: Int64, minimum: Int64, needed: Int64) {
            self.path = path
            self.available = available
            self.minimum = minimum
            self.needed = needed
        }

        /// "the disk holding /var/lib/uploadq has 120.0 MiB free, below min_free_space (256.0 MiB)".
        public var description: String {
            let free = ByteCountText.text(available)
            let floor = ByteCountText.text(minimum)
            if needed > 0 && available >= minimum {
                return "the disk holding \(path) has \(free) free; a copy of \(ByteCountText.text(needed)) would leave "
                    + "less than min_free_space (\(floor))"
            }
            return "the disk holding \(path) has \(free) free, below min_free_space (\(floor))"
        }
    }
}
