import Foundation

extension Destination {
    /// What becomes of a `reference` job's file (the caller's own) once the server confirmed it: kept (the default),
    /// deleted, or moved into a folder. `source_after_upload` per destination, `enqueue --then`, or the library's
    /// `EnqueueRequest.sourceAfterUpload` for one job.
    ///
    /// It acts only after the `uploaded` row is committed, and only on the file that was enqueued (same inode,
    /// device, size and modification time): a newer version written under the same name is left alone.
    public enum SourceAfterUpload: Sendable, Equatable, CustomStringConvertible {
        /// Leave the file where it is.
        case keep
        /// Unlink it.
        case delete
        /// Move it into `directory` (absolute), keeping its name (shortened by the name rule when too long).
        case move(directory: String)

        /// Parses `keep`, `delete` or `move:DIR`; a relative `DIR` resolves against `base`. Nil for anything else.
        public init?(_ text: String, base: String) {
            switch text {
            case "keep": self = .keep
            case "delete": self = .delete
            default:
                guard text.hasPrefix("move:"), text.count > 5 else { return nil }
                self = .move(directory: ConfigurationLoader.absolutePath(String(text.dropFirst(5)), base: base))
            }
        }

        /// As written: `keep`, `delete`, `move:/srv/sent`.
        public var description: String {
            switch self {
            case .keep: return "keep"
            case .delete: return "delete"
            case .move(let directory): return "move:\(directory)"
            }
        }
    }
}
