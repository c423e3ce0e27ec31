import Foundation
import UploadQueue

/// Human-readable formatting for the CLI's plain output.
enum TextOutput {
    /// `1.5 MiB`, `512 B`.
    static func bytes(_ count: Int64) -> String { ByteCountText.text(count) }

    static func time(_ date: Date?) -> String {
        guard let date else { return "-" }
        return (ContractJSON.rfc3339(date) as? String) ?? "-"
    }

    /// Everything that keeps a pending job waiting, strongest first, with when each may clear (times on the
    /// clock of `timeZone`): `metered link, budget 200.0 MiB/day spent, resets 00:00; outside window until 22:00`.
    static func waiting(_ job: Job, timeZone: TimeZone) -> String? {
        guard !job.waitingHolds.isEmpty else { return job.waitingReason?.rawValue }
        return job.waitingHolds.map { $0.text(timeZone: timeZone) }.joined(separator: "; ")
    }

    /// The short reason a job is where it is: what it waits for, its error, or its remote URL.
    static func note(for job: Job, timeZone: TimeZone = .current) -> String {
        switch job.state {
        case .pending:
            if let waiting = waiting(job, timeZone: timeZone) { return "waiting: \(waiting)" }
            return job.lastError.map { "last error: \($0)" } ?? ""
        case .uploading where job.waitingReason == .concurrency:
            return "next: claimed for the next free slot"
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
