import Foundation

extension Configuration {
    /// `[limits] min_free_space`: the room the queue leaves free on its file system, as bytes or as a share of the
    /// file system's size.
    ///
    /// Below it the intake pauses (Postfix's `queue_minfree`, WorkManager's "storage not low"): the device's other
    /// programs keep their room, and the queue's own database can still record what finishes.
    public enum FreeSpaceThreshold: Sendable, Equatable, CustomStringConvertible {
        /// At least this many bytes free.
        case bytes(Int64)
        /// At least this percentage (0–100) of the file system's size free.
        case percent(Double)

        /// The default: 256 MiB.
        public static let standard = FreeSpaceThreshold.bytes(256 << 20)

        /// Parses `"256MiB"`, `"1GB"`, `0` (no guard) or `"5%"`; nil for anything else.
        public init?(_ text: String) {
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            if trimmed.hasSuffix("%") {
                guard let value = Double(trimmed.dropLast().trimmingCharacters(in: .whitespaces)), value >= 0,
                      value <= 100 else { return nil }
                self = .percent(value)
                return
            }
            guard let bytes = ConfigurationValues.byteCount(trimmed) else { return nil }
            self = .bytes(bytes)
        }

        /// The threshold in bytes on a file system of `total` bytes.
        public func bytes(ofTotal total: Int64) -> Int64 {
            switch self {
            case .bytes(let bytes): return bytes
            case .percent(let share): return Int64((Double(max(0, total)) * share / 100).rounded(.up))
            }
        }

        /// As written in the config: `256MiB`, `5%`.
        public var description: String {
            switch self {
            case .bytes(let bytes): return ByteCountText.text(bytes)
            case .percent(let share):
                return share == share.rounded() ? "\(Int(share))%" : "\(share)%"
            }
        }
    }
}
