import Foundation
import UploadQueue

/// Human-readable formatting for the CLI's plain output.
enum TextOutput {
    /// `1.5 MiB`, `512 B`.
    static func bytes(_ count: Int64) -> String { ByteCountText.text(count) }

    static func time(_ date: Date?) -> String {
        guard let date else { return "-" }
        return (JSONOutput.rfc3339(date) as? String) ?? "-"
    }

    /// The short reason a job is where it is: its waiting reason, its error, or its remote URL.
    static func note(for job: Job) -> String {
        switch job.state {
        case .pending:
            if let reason = job.waitingReason { return "waiting: \(reason.rawValue)" }
            return job.lastError.map { "last error: \($0)" } ?? ""
        case .uploading:
            let percent = job.size > 0 ? Int(Double(job.bytesConfirmed) / Double(job.size) * 100) : 0
            return "\(bytes(job.bytesConfirmed)) of \(bytes(job.size)) (\(percent)%)"
        case .uploaded:
            return job.remoteURL.map(URLRedaction.redact) ?? ""
        case .failed:
            let kind = job.permanent ? "needs attention" : "retry at \(time(job.nextAttemptAt))"
            return "\(kind): \(job.lastError ?? "unknown error")"
        }
    }
}
