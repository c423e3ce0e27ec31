import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq show JOB_ID`: one job in full, with its attempt history.
struct ShowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Show one job with its attempts.")

    @OptionGroup var options: GlobalOptions
    @Argument(help: "The job's id.") var id: String
    @Flag(help: "Print one JSON document.") var json = false

    func run() async throws {
        let jobID = try parseJobID(id)
        let queue = try options.openQueue()
        guard let job = try await queue.job(jobID) else {
            printError("uploadq: no job \(jobID)")
            throw CLIExit.notFound.code
        }
        let attempts = try await queue.attempts(of: jobID)
        let owed = try queue.store.outboxEntries(jobID)
        let patch = owed.first { $0.consumer == .patch }
        let hooks = owed.compactMap { entry -> (HookEvent, OutboxEntry)? in
            if case .hook(let event) = entry.consumer { return (event, entry) }
            return nil
        }
        if json {
            var document = ContractJSON.job(job)
            document["attempt_history"] = attempts.map(ContractJSON.attempt)
            if let target = job.patch {
                document["patch"] = [
                    "url": target.displayURL, "method": target.method ?? NSNull(),
                    "state": job.patchState.rawValue, "attempts": patch?.attempts ?? 0,
                    "last_error": patch?.lastError ?? NSNull(),
                    "next_attempt_at": job.patchState == .pending ? ContractJSON.rfc3339(patch?.nextAttemptAt) : NSNull(),
                ] as [String: Any]
            }
            document["hooks"] = hooks.map { event, entry -> [String: Any] in
                ["event": event.key, "state": entry.state.rawValue, "attempts": entry.attempts,
                 "last_error": entry.lastError ?? NSNull(), "next_attempt_at": ContractJSON.rfc3339(entry.nextAttemptAt)]
            }
            try ContractJSON.print(document)
            return
        }
        var lines = [
            "id:           \(job.id)",
            "state:        \(job.state.rawValue)" + (job.waitingReason.map { " (waiting: \($0.rawValue))" } ?? ""),
            "waiting for:  \(TextOutput.waiting(job, timeZone: queue.configuration.schedule.timeZone) ?? "-")",
            "file:         \(job.file)",
            "source:       \(job.sourcePath) (\(job.mode.rawValue))",
            "size:         \(job.size) bytes (\(TextOutput.bytes(job.size)))",
            "sha256:       \(job.sha256.isEmpty ? "(taken while the file is sent)" : job.sha256)",
            "content type: \(job.contentType)",
            "destination:  \(job.destination)",
            "confirmed:    \(job.bytesConfirmed) bytes",
            "remote url:   \(job.remoteURL.map(URLRedaction.redact) ?? "-")",
            "attempts:     \(job.attempts)",
            "created:      \(TextOutput.time(job.createdAt))",
            "updated:      \(TextOutput.time(job.updatedAt))",
        ]
        if let error = job.lastError {
            lines.append("last error:   \(error)" + (job.state == .failed ? (job.permanent ? " (permanent)" : " (will retry)") : ""))
        }
        if let next = job.nextAttemptAt { lines.append("next try:     \(TextOutput.time(next))") }
        if job.patch != nil {
            lines.append("patch:        \(job.patchState.rawValue), \(patch?.attempts ?? 0) attempt(s)"
                + (patch?.lastError.map { "; last error: \($0)" } ?? ""))
        }
        for (event, entry) in hooks {
            lines.append("hook:         \(event.key) \(entry.state.rawValue), \(entry.attempts) attempt(s)"
                + (entry.nextAttemptAt.map { ", next \(TextOutput.time($0))" } ?? "")
                + (entry.lastError.map { "; last error: \($0)" } ?? ""))
        }
        for (key, value) in job.meta.sorted(by: { $0.key < $1.key }) { lines.append("meta:         \(key)=\(value)") }
        for attempt in attempts {
            lines.append("attempt \(attempt.number): \(TextOutput.time(attempt.startedAt)) from \(attempt.startOffset) "
                + "to \(attempt.endOffset.map(String.init) ?? "…") \(attempt.outcome ?? "running")"
                + (attempt.error.map { ": \($0)" } ?? ""))
        }
        // Names, metadata and server answers come from outside: shown with their control characters escaped.
        print(lines.map(SafeText.escaped).joined(separator: "\n"))
    }
}
