import Foundation

extension Configuration {
    /// `[retention]`: what becomes of the queue's own copy of a file once the server confirmed it, and how long the
    /// history of finished jobs is kept.
    ///
    /// The default releases the copy at once (`delete`) and keeps 90 days of history, so the state directory grows
    /// with what is in flight, not with what was ever uploaded.
    public struct RetentionPolicy: Sendable, Equatable {
        /// What is done with the queue's copy (from `copy`, `move` or the spool) after a confirmed upload.
        public enum UploadedCopies: Sendable, Equatable {
            /// Deleted at once (Postfix's way: the queue file goes the moment delivery is confirmed).
            case delete
            /// Kept under `blobs/` for this long, then deleted.
            case keep(for: Duration)
            /// Moved to `directory`, under the name the template gives (`{date}/{job_id}-{name}` by default).
            case archive(directory: String, template: Destination.PathTemplate)
        }

        /// What becomes of the queue's copy after a confirmed upload.
        public var uploadedCopies: UploadedCopies
        /// Uploaded jobs (with their attempts, acknowledged completions and done patches) and cancelled files older
        /// than this are pruned; nil keeps them forever. Failed jobs are never pruned automatically.
        public var history: Duration?

        /// Release at once, 90 days of history.
        public init(uploadedCopies: UploadedCopies = .delete, history: Duration? = .seconds(90 * 86_400)) {
            self.uploadedCopies = uploadedCopies
            self.history = history
        }

        /// The archive's default name: a folder per day, the job id for uniqueness, the original name to read.
        public static let defaultArchiveTemplate = try! PathTemplate("{date}/{job_id}-{name}")
    }
}

extension RetentionPolicy {
    /// Reads `[retention]`: `uploaded_copies`, `keep_for`, `archive_dir`, `archive_template`, `history`.
    static func load(_ table: inout ConfigurationTable, baseDirectory: String) throws(ConfigurationError) -> RetentionPolicy {
        var policy = RetentionPolicy()
        let mode = try table.string("uploaded_copies") ?? "delete"
        let keepFor = try table.duration("keep_for")
        let archiveDirectory = try table.string("archive_dir")
        let archiveTemplate = try table.string("archive_template")
        switch mode {
        case "delete":
            policy.uploadedCopies = .delete
        case "keep":
            policy.uploadedCopies = .keep(for: keepFor ?? .seconds(7 * 86_400))
        case "archive":
            guard let archiveDirectory, !archiveDirectory.isEmpty else {
                throw table.error("uploaded_copies", "\"archive\" needs archive_dir (where the uploaded copies go)")
            }
            var template = defaultArchiveTemplate
            if let archiveTemplate {
                do {
                    template = try PathTemplate(archiveTemplate)
                } catch {
                    throw table.error("archive_template", error.message)
                }
            }
            policy.uploadedCopies = .archive(directory: ConfigurationLoader.absolutePath(archiveDirectory, base: baseDirectory),
                                             template: template)
        default:
            throw table.error("uploaded_copies", "\"\(mode)\" is not one of delete, keep, archive")
        }
        if keepFor != nil, mode != "keep" { throw table.error("keep_for", "only applies with uploaded_copies = \"keep\"") }
        if mode != "archive" {
            for key in ["archive_dir", "archive_template"] where table.has(key) {
                throw table.error(key, "only applies with uploaded_copies = \"archive\"")
            }
        }
        if table.has("history") {
            if case .string("forever")? = table.table["history"]?.kind {
                _ = try table.string("history")
                policy.history = nil
            } else {
                policy.history = try table.duration("history", minimum: .seconds(60))
            }
        }
        return policy
    }
}
