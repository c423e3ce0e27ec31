import Foundation
import GRDB

extension QueueStore {
    /// The events the database still tells of, job by job in the order they were enqueued: `enqueued`, each
    /// attempt's `started` and `failed`, `uploaded`, and the final `patch` and `hook` outcomes (what `uploadq
    /// events --since` replays). Cancelled jobs and pruned history are gone, and progress is not kept.
    ///
    /// - Parameters:
    ///   - after: only jobs enqueued after this one; nil for all (or the newest `newest`).
    ///   - newest: only the last this many jobs.
    ///   - body: gets each event; jobs are read 200 at a time, so memory does not grow with the history.
    package func replayEvents(after: JobID?, newest: Int? = nil, _ body: (FeedEvent) throws -> Void) throws {
        var cursor = after?.rawValue ?? ""
        // The first batch starts at the oldest of the newest jobs, that one included.
        var including = false
        if let newest {
            let ids = try writer.read { db in
                try String.fetchAll(db, sql: "SELECT id FROM job WHERE id > ? ORDER BY id DESC LIMIT ?",
                                    arguments: [cursor, newest])
            }
            guard let oldest = ids.last else { return }
            (cursor, including) = (oldest, true)
        }
        while true {
            let batch = try writer.read { [including] db -> [(Job, [JobAttempt], [OutboxEntry], [String: Date])] in
                let jobs = try Job.fetchAll(db, sql: "SELECT * FROM job WHERE id \(including ? ">=" : ">") ? ORDER BY id LIMIT 200",
                                            arguments: [cursor])
                return try jobs.map { job in
                    let attempts = try JobAttempt.filter(JobAttempt.Columns.jobID == job.id.rawValue)
                        .order(JobAttempt.Columns.number).fetchAll(db)
                    var times: [String: Date] = [:]
                    for row in try Row.fetchAll(db, sql: "SELECT consumer, updated_at FROM outbox WHERE job_id = ?",
                                                arguments: [job.id.rawValue]) {
                        times[row["consumer"]] = row["updated_at"]
                    }
                    return (job, attempts, try outboxEntries(job.id, in: db), times)
                }
            }
            for (job, attempts, owed, times) in batch {
                for event in Self.events(of: job, attempts: attempts, owed: owed, times: times) { try body(event) }
            }
            guard batch.count == 200, let last = batch.last else { return }
            (cursor, including) = (last.0.id.rawValue, false)
        }
    }

    /// One job's story as events, in time order.
    static func events(of job: Job, attempts: [JobAttempt], owed: [OutboxEntry], times: [String: Date]) -> [FeedEvent] {
        var events = [FeedEvent(.enqueued, job: job.id, time: job.createdAt, fields: [
            "name": .string(job.originalName), "destination": .string(job.destination), "size": .integer(job.size),
        ])]
        for attempt in attempts {
            events.append(FeedEvent(.started, job: job.id, time: attempt.startedAt, fields: [
                "destination": .string(job.destination), "attempt": .integer(Int64(attempt.number)),
                "offset": .integer(attempt.startOffset),
            ]))
            guard let ended = attempt.endedAt else { continue }
            switch attempt.outcome {
            case "uploaded":
                events.append(FeedEvent(.uploaded, job: job.id, time: ended, fields: [
                    "destination": .string(job.destination), "size": .integer(job.size),
                    "remote_url": job.remoteURL.map { .string(URLRedaction.redact($0)) } ?? .null,
                ]))
            case "failed":
                let final = attempt.number == attempts.last?.number && job.state == .failed
                events.append(FeedEvent(.failed, job: job.id, time: ended, fields: [
                    "destination": .string(job.destination), "error": attempt.error.map(FeedEvent.Value.string) ?? .null,
                    "permanent": .boolean(final && job.permanent),
                ]))
            default:
                break
            }
        }
        for entry in owed where entry.state != .pending {
            var fields: [String: FeedEvent.Value] = ["state": .string(entry.state.rawValue),
                                                     "attempt": .integer(Int64(entry.attempts))]
            if let error = entry.lastError { fields["error"] = .string(error) }
            let time = times[entry.consumer.description] ?? job.updatedAt
            switch entry.consumer {
            case .patch, .groupPatch:
                if entry.consumer == .groupPatch { fields["group_patch"] = .boolean(true) }
                events.append(FeedEvent(.patch, job: job.id, time: time, fields: fields))
            case .hook(let event):
                fields["hook"] = .string(event.key)
                events.append(FeedEvent(.hook, job: job.id, time: time, fields: fields))
            }
        }
        return events.enumerated().sorted { ($0.element.time, $0.offset) < ($1.element.time, $1.offset) }.map(\.element)
    }
}
