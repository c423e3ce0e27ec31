import Foundation
import Logging

/// Runs a `[hooks]` program for a job that ended: the job as JSON on its standard input, no shell, a scrubbed
/// environment, a deadline, and its output capped (see `HookSettings`).
///
/// Exit status 0 is done. Any other status, a run killed at its deadline, or a program that cannot start is a
/// failed attempt, tried again on the `[retry]` schedule, and after `max_attempts` failed for good (visible in
/// `show` and `status`; `uploadq retry --hooks ID` runs it again). The job's own state never changes.
struct HookDelivery: OutboxDelivery {
    let event: HookEvent
    let command: [String]
    let settings: HookSettings
    let retry: RetryPolicy
    let logger: Logger
    /// Set for `on_group_uploaded`: where the group is read (its completion is its payload).
    var groups: QueueStore? = nil

    /// Output kept from a run (the rest is read and dropped, so a chatty hook cannot grow the daemon).
    static let outputLimit = 64 << 10

    func deliver(_ job: Job, entry: OutboxEntry) async -> OutboxOutcome {
        let attempt = entry.attempts + 1
        var environment = BoundedCommand.scrubbedEnvironment(passing: settings.passEnvironment)
        environment["UPLOADQ_JOB_ID"] = job.id.rawValue
        environment["UPLOADQ_EVENT"] = event.rawValue
        environment["UPLOADQ_HOOK_ATTEMPT"] = "\(attempt)"
        var input = Self.payload(job, event: event)
        if let groups {
            let group: JobGroup?
            do {
                group = try await BlockingWork.run { try job.group.flatMap { try groups.group($0, owner: job.ownerUID) } }
            } catch {
                return .retry(error: "the queue cannot be read: \(error)", at: Date().addingTimeInterval(5))
            }
            guard let group, group.state == .uploaded else {
                return .failed(error: "hook \(event.key): the job's group is not uploaded")
            }
            environment["UPLOADQ_GROUP"] = group.name
            input = Self.payload(group)
        }
        let (command, timeout, variables, payload) = (self.command, settings.timeout, environment, input)
        let outcome = await BlockingWork.runResult { () throws(Never) -> BoundedCommand.Outcome in
            BoundedCommand.run(command, timeout: timeout, environment: variables, maximumOutput: Self.outputLimit,
                               dropsExcessOutput: true, input: payload)
        }.get()
        let metadata: Logger.Metadata = ["uploadq.job": "\(job.id)", "uploadq.destination": "\(job.destination)"]
        let failure: String
        switch outcome {
        case .exited(0, let stdout, let stderr):
            logger.info("hook \(event.key) ran", metadata: metadata.merging(Self.output(stdout, stderr)) { $1 })
            return .done
        case .exited(let status, let stdout, let stderr):
            let said = SecretRedaction.redacted(stderr)
            failure = "hook \(event.key) (\(command[0])) exited with status \(status)"
                + (said.isEmpty ? "" : ": " + String(said.suffix(300)))
            logger.warning("\(failure)", metadata: metadata.merging(Self.output(stdout, stderr)) { $1 })
        case .timedOut:
            failure = "hook \(event.key) (\(command[0])) did not finish within "
                + "\(ConfigurationValues.durationText(timeout)) and was killed"
            logger.warning("\(failure)", metadata: metadata)
        case .notStarted(let reason):
            failure = "hook \(event.key) (\(command[0])) could not start: \(reason)"
            logger.error("\(failure)", metadata: metadata)
        case .tooMuchOutput:
            // Not with `dropsExcessOutput`; said plainly should it ever come.
            failure = "hook \(event.key) (\(command[0])) wrote more than \(Self.outputLimit) bytes and was killed"
            logger.warning("\(failure)", metadata: metadata)
        }
        if settings.maximumAttempts > 0, attempt >= settings.maximumAttempts {
            logger.error("hook \(event.key) failed for good after \(attempt) attempts; `uploadq retry --hooks \(job.id)` runs it again",
                         metadata: metadata)
            return .failed(error: failure)
        }
        let delay = retry.delay(afterFailure: attempt, random: Double.random(in: 0...1))
        return .retry(error: failure, at: Date().addingTimeInterval(delay.seconds))
    }

    /// The job as a hook reads it: the fields `uploadq show --json` has that say what happened, with the event.
    /// A job whose metadata would make it larger than a pipe holds gets `meta_truncated: true` instead of `meta`.
    static func payload(_ job: Job, event: HookEvent) -> [UInt8] {
        let whole = payload(job, event: event, withMeta: true)
        return whole.count <= BoundedCommand.maximumInput ? whole : payload(job, event: event, withMeta: false)
    }

    private static func payload(_ job: Job, event: HookEvent, withMeta: Bool) -> [UInt8] {
        var object: [String: Any] = [
            "event": event.rawValue, "id": job.id.rawValue, "state": job.state.rawValue, "destination": job.destination,
            "original_name": job.originalName, "size": job.size, "content_type": job.contentType,
            "attempts": job.attempts, "permanent": job.permanent, "created_at": job.createdAt.rfc3339,
            "updated_at": job.updatedAt.rfc3339,
        ]
        if withMeta { object["meta"] = job.meta } else { object["meta_truncated"] = true }
        object["sha256"] = job.sha256.isEmpty ? NSNull() : job.sha256
        object["remote_url"] = job.remoteURL ?? NSNull()
        object["last_error"] = job.lastError ?? NSNull()
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data("{}".utf8)
        return Array(data) + [UInt8(ascii: "\n")]
    }

    /// A group as `on_group_uploaded` reads it: `event`, `group`, `members` (each `id`, `name`, `size`, `sha256`,
    /// `remote_url`), `closed_at`, `completed_at`. A group whose members would make it larger than a pipe holds
    /// gets `member_count` and `members_truncated: true` instead (`uploadq groups NAME --json` has them all).
    static func payload(_ group: JobGroup) -> [UInt8] {
        func encoded(_ withMembers: Bool) -> [UInt8] {
            var object: [String: Any] = [
                "event": HookEvent.groupUploaded.rawValue, "group": group.name, "member_count": group.completion.count,
                "closed_at": group.closedAt?.rfc3339 ?? NSNull(), "completed_at": group.completedAt?.rfc3339 ?? NSNull(),
            ]
            if withMembers {
                object["members"] = group.completion.map {
                    ["id": $0.jobID.rawValue, "name": $0.originalName, "size": $0.size, "sha256": $0.sha256, "remote_url": $0.remoteURL]
                        as [String: Any]
                }
            } else {
                object["members_truncated"] = true
            }
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
                ?? Data("{}".utf8)
            return Array(data) + [UInt8(ascii: "\n")]
        }
        let whole = encoded(true)
        return whole.count <= BoundedCommand.maximumInput ? whole : encoded(false)
    }

    /// What a run printed, for the log: its first 1 KiB of each stream, with every URL's secrets redacted.
    private static func output(_ stdout: String, _ stderr: String) -> Logger.Metadata {
        var fields: Logger.Metadata = [:]
        if !stdout.isEmpty { fields["stdout"] = "\(String(SecretRedaction.redacted(stdout).prefix(1024)))" }
        if !stderr.isEmpty { fields["stderr"] = "\(String(SecretRedaction.redacted(stderr).prefix(1024)))" }
        return fields
    }

}
