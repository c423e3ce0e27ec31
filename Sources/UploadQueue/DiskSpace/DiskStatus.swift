import Foundation

extension QueueStatus {
    /// The queue's disk as `status` shows it: the room, the `min_free_space` floor, and whether the intake is paused.
    public struct DiskStatus: Sendable, Equatable {
        /// The directory measured (the state directory, or `blobs/` when that is the one short of room).
        public var path: String
        public var space: DiskSpace
        /// `min_free_space` in bytes on this file system.
        public var minimum: Int64
        /// Why the intake is paused; nil while it takes files.
        public var low: DiskLow?

        public init(path: String, space: DiskSpace, minimum: Int64, low: DiskLow?) {
            self.path = path
            self.space = space
            self.minimum = minimum
            self.low = low
        }

        /// True while spool files wait and copies are refused.
        public var intakePaused: Bool { low != nil }
    }
}
