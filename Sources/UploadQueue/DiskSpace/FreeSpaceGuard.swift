import Foundation

extension QueueStatus {
    /// The free-space guard: intake that writes into the queue's file system waits while it is below
    /// `[limits] min_free_space`, so a full disk never stops the queue from recording what it finishes.
    ///
    /// Uploads, releases and pruning go on while the intake is paused: they are what gives the room back. Every
    /// enqueue counts what it adds, its copy (if any) and its row, so a `reference` job or a same-disk move waits too:
    /// the database's growth counts as a copy does. `verdict` is the decision, free of I/O; `check` measures and
    /// decides.
    public struct FreeSpaceGuard: Sendable, Equatable {
        /// The room to leave free.
        public var threshold: Configuration.FreeSpaceThreshold
        /// The directories whose file systems are watched: the state directory (the database) and `blobs/` (the
        /// copies), which may be a mount of its own.
        public var paths: [String]

        public init(threshold: Configuration.FreeSpaceThreshold, paths: [String]) {
            self.threshold = threshold
            self.paths = paths
        }

        /// Whether `space` leaves room for `needed` more bytes above the threshold; the reason when it does not.
        /// A threshold of zero never pauses; a disk that is completely full always does.
        public static func verdict(space: QueueStatus.DiskSpace, threshold: Configuration.FreeSpaceThreshold, needed: Int64, path: String) -> QueueStatus.DiskLow? {
            let minimum = threshold.bytes(ofTotal: space.total)
            let remaining = space.available - max(0, needed)
            let full = space.available <= 0
            guard full || (minimum > 0 && remaining < minimum) || remaining < 0 else { return nil }
            return DiskLow(path: path, available: space.available, minimum: minimum, needed: needed)
        }

        /// Measures the watched file systems now; the first that is short of room, or nil when all have enough.
        /// A path that cannot be measured counts as having room (the writes that follow report their own errors).
        public func check(needing needed: Int64 = 0) -> DiskLow? {
            for path in paths {
                guard let space = DiskSpace.of(path: path) else { continue }
                if let low = Self.verdict(space: space, threshold: threshold, needed: needed, path: path) { return low }
            }
            return nil
        }

        /// The disk for `status`: the first watched file system that is short of room, else the first measured.
        public func status() -> DiskStatus? {
            var first: DiskStatus?
            for path in paths {
                guard let space = DiskSpace.of(path: path) else { continue }
                let low = Self.verdict(space: space, threshold: threshold, needed: 0, path: path)
                let status = DiskStatus(path: path, space: space, minimum: threshold.bytes(ofTotal: space.total), low: low)
                if low != nil { return status }
                first = first ?? status
            }
            return first
        }
    }
}
