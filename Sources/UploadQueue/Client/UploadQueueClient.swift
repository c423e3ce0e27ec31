import Foundation
import NIOHTTP1

/// A running daemon's queue, reached through its control API: the in-process `UploadQueue`'s enqueue, completions
/// and acknowledge, for a sync engine that runs beside the daemon in a process of its own.
///
/// Completions are live across processes: the daemon answers a long poll the moment a job is uploaded. Whatever the
/// daemon's user is, the kernel names this process's user to it: root and the queue's own user reach every job, any
/// other user (a member of `[api] group`) its own alone (see `docs/api.md`).
public struct UploadQueueClient: Sendable {
    /// The daemon's control socket.
    public let socketPath: String
    private let exchange: ControlExchange

    /// A client of the daemon serving the control API at `socketPath`.
    public init(socketPath: String) {
        self.socketPath = socketPath
        exchange = ControlExchange(socketPath: socketPath)
    }

    /// A client of the daemon that runs `configuration` (its `[api] socket`, or `state_dir/api.sock`).
    public init(configuration: Configuration) {
        self.init(socketPath: configuration.apiSocketPath)
    }

    /// Whether a daemon answers on the socket and runs its queue.
    public func isDaemonRunning() async -> Bool {
        guard let answer = try? await exchange.send(.GET, "/v1/health", deadline: .seconds(5)),
              answer.status == 200 else { return false }
        return (try? answer.object("GET /v1/health"))?["running"] as? Bool == true
    }

    /// Hands a file over by its path (made absolute here); the daemon reads it, as `UploadQueue.enqueue` does.
    ///
    /// With an `idempotencyKey`, sending the same request again (after a lost answer, a crash) returns the job the
    /// first one made, also once that job was cancelled or pruned: the file is never uploaded twice for one key.
    public func enqueue(_ request: EnqueueRequest, idempotencyKey: String? = nil) async throws -> EnqueueResult {
        let body = try JSONSerialization.data(withJSONObject: Self.body(request))
        // The daemon reads (and hashes) the whole file before it answers: a large one takes a while.
        let answer = try await exchange.send(.POST, "/v1/jobs", json: body,
                                             headers: idempotencyKey.map { [("Idempotency-Key", $0)] } ?? [],
                                             deadline: Self.intakeDeadline)
        guard answer.status == 200 || answer.status == 201 else { throw answer.error("POST /v1/jobs") }
        let object = try answer.object("POST /v1/jobs")
        guard let text = object["id"] as? String, let id = JobID(text) else {
            throw UploadQueueError(.badRequest, "the daemon's answer to POST /v1/jobs names no job", path: request.path)
        }
        return EnqueueResult(id: id, deduplicated: object["deduplicated"] as? Bool ?? false)
    }

    /// Hands many files over, each with its own result, as `UploadQueue.enqueue(batch:)` does: the daemon makes the
    /// queue's own user's durable together (one flush, one commit per 256). A request the daemon does not answer
    /// (it stopped half-way) fails the files it carried and those after it; those answered before keep their jobs.
    public func enqueue(batch requests: [EnqueueRequest]) async -> [Result<EnqueueResult, UploadQueueError>] {
        var results: [Result<EnqueueResult, UploadQueueError>] = []
        var start = 0
        while start < requests.count {
            // 256 a request: the daemon's commit group, and well inside its 1 MiB body limit.
            let chunk = requests[start..<min(start + 256, requests.count)]
            let items: [[String: Any]]
            do {
                let body = try JSONSerialization.data(withJSONObject: ["jobs": chunk.map(Self.body)])
                let answer = try await exchange.send(.POST, "/v1/jobs/batch", json: body, deadline: Self.intakeDeadline)
                guard answer.status == 200 else { throw answer.error("POST /v1/jobs/batch") }
                items = try answer.object("POST /v1/jobs/batch")["results"] as? [[String: Any]] ?? []
                guard items.count == chunk.count else {
                    throw UploadQueueError(.badRequest, "the daemon answered \(items.count) results for \(chunk.count) files")
                }
            } catch {
                let failure = error as? UploadQueueError ?? UploadQueueError(.daemonUnreachable, "\(error)")
                var failed = failure
                failed.message = "not handed over: \(failure.message)"
                results += Array(repeating: .failure(failed), count: requests.count - start)
                return results
            }
            start = chunk.endIndex
            for (request, item) in zip(chunk, items) {
                if let text = item["id"] as? String, let id = JobID(text) {
                    results.append(.success(EnqueueResult(id: id, deduplicated: item["deduplicated"] as? Bool ?? false)))
                } else {
                    let detail = item["error"] as? [String: Any]
                    results.append(.failure(UploadQueueError(
                        UploadQueueError.Code(rawValue: detail?["code"] as? String ?? "bad-request"),
                        detail?["message"] as? String ?? "the daemon gave no result for \(request.path)")))
                }
            }
        }
        return results
    }

    /// Hands a file over (a copy by default), as `UploadQueue.enqueue(_:destination:…)` does; the job's id.
    @discardableResult
    public func enqueue(_ file: String, destination: String? = nil, metadata: [String: String] = [:],
                        patch: PatchTarget? = nil, mode: Job.IntakeMode = .copy, priority: Int = 0,
                        onMetered: Destination.MeteredPolicy? = nil, idempotencyKey: String? = nil) async throws -> JobID {
        try await enqueue(EnqueueRequest(path: file, destination: destination, meta: metadata, patch: patch,
                                         priority: priority, mode: mode, onMetered: onMetered?.description),
                          idempotencyKey: idempotencyKey).id
    }

    /// The job's state once it is in one of `states`, or as it is when `timeout` has passed; nil when there is no
    /// such job (or it is another user's).
    public func wait(for id: JobID, until states: Set<JobState> = [.uploaded, .failed],
                     timeout: Duration = .seconds(30)) async throws -> JobState? {
        let list = states.map(\.rawValue).sorted().joined(separator: ",")
        let seconds = min(Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18, 300)
        let route = "/v1/jobs/\(id)/wait?state=\(list)&timeout=\(seconds)"
        let answer = try await exchange.send(.GET, route, deadline: .seconds(Int64(seconds) + 15))
        if answer.status == 404 { return nil }
        guard answer.status == 200 else { throw answer.error("GET \(route)") }
        return (try answer.object("GET \(route)")["state"] as? String).flatMap(JobState.init(rawValue:))
    }

    /// Cancels a job as `UploadQueue.cancel` does: `removed`, or `requested` of the transfer running it.
    @discardableResult
    public func cancel(_ id: JobID) async throws -> CancelOutcome {
        let answer = try await exchange.send(.POST, "/v1/jobs/\(id)/cancel")
        guard answer.status == 200,
              let outcome = (try answer.object("cancel")["outcome"] as? String).flatMap(CancelOutcome.init(rawValue:))
        else { throw answer.error("POST /v1/jobs/\(id)/cancel") }
        return outcome
    }

    /// Makes a failed job pending now (or sends an uploaded job's failed patch again); with `hooksOnly`, runs its
    /// failed patch and hooks again and leaves the upload alone. Whether anything changed.
    @discardableResult
    public func retry(_ id: JobID, hooksOnly: Bool = false) async throws -> Bool {
        let route = "/v1/jobs/\(id)/retry" + (hooksOnly ? "?hooks=true" : "")
        let answer = try await exchange.send(.POST, route)
        guard answer.status == 200 else { throw answer.error("POST \(route)") }
        return try answer.object("retry")["retried"] as? Bool ?? false
    }

    /// Skips a job that failed for good in its lane, as `UploadQueue.skip(_:)` does: it stays failed, and its lane
    /// goes on.
    public func skip(_ id: JobID) async throws {
        let route = "/v1/jobs/\(id)/skip"
        let answer = try await exchange.send(.POST, route)
        guard answer.status == 200 else { throw answer.error("POST \(route)") }
    }

    /// Closes one of the caller's groups, as `UploadQueue.closeGroup(_:patch:)` does; the group as it is then.
    @discardableResult
    public func closeGroup(_ name: String, patch: PatchTarget? = nil) async throws -> JobGroup {
        let route = "/v1/groups/\(PercentEncoding.unreserved(name))/close"
        var body: [String: Any] = [:]
        if let patch {
            var fields: [String: Any] = ["url": patch.url]
            if let method = patch.method { fields["method"] = method }
            if let text = patch.body { fields["body"] = text }
            if let headers = patch.headers { fields["headers"] = headers }
            body["patch"] = fields
        }
        let answer = try await exchange.send(.POST, route, json: try JSONSerialization.data(withJSONObject: body))
        guard answer.status == 200, let group = JobGroup(json: try answer.object("POST \(route)")) else {
            throw answer.error("POST \(route)")
        }
        return group
    }

    /// One of the caller's groups, with its members once it is uploaded (their remote URLs masked, as everywhere
    /// outside the library: the hook and the patch get them whole); nil when there is none.
    public func group(_ name: String) async throws -> JobGroup? {
        let route = "/v1/groups/\(PercentEncoding.unreserved(name))"
        let answer = try await exchange.send(.GET, route)
        if answer.status == 404 { return nil }
        guard answer.status == 200, let group = JobGroup(json: try answer.object("GET \(route)")) else {
            throw answer.error("GET \(route)")
        }
        return group
    }

    /// The caller's groups (the queue's own user: everyone's), newest first, without their members.
    public func groups() async throws -> [JobGroup] {
        let answer = try await exchange.send(.GET, "/v1/groups")
        guard answer.status == 200 else { throw answer.error("GET /v1/groups") }
        return (try answer.object("GET /v1/groups")["groups"] as? [[String: Any]] ?? []).compactMap(JobGroup.init(json:))
    }

    /// Records that the caller has handled a group's completion.
    public func acknowledgeGroup(_ name: String) async throws {
        let route = "/v1/groups/\(PercentEncoding.unreserved(name))/ack"
        let answer = try await exchange.send(.POST, route)
        guard answer.status == 200 else { throw answer.error("POST \(route)") }
    }

    /// The caller's lanes (the queue's own user: everyone's) that have work or are blocked, blocked ones first.
    public func lanes() async throws -> [LaneStatus] {
        let answer = try await exchange.send(.GET, "/v1/lanes")
        guard answer.status == 200 else { throw answer.error("GET /v1/lanes") }
        return (try answer.object("GET /v1/lanes")["lanes"] as? [[String: Any]] ?? []).compactMap(LaneStatus.init(json:))
    }

    /// Makes every failed job pending now (the queue's own user and root alone); the jobs that changed.
    @discardableResult
    public func retryFailed() async throws -> [JobID] {
        let answer = try await exchange.send(.POST, "/v1/jobs/retry-failed")
        guard answer.status == 200 else { throw answer.error("POST /v1/jobs/retry-failed") }
        return (try answer.object("retry-failed")["retried"] as? [String] ?? []).compactMap(JobID.init)
    }

    /// The link as the daemon classifies it, and who decided.
    public func link() async throws -> QueueStatus.LinkStatus {
        try Self.link(try await exchange.send(.GET, "/v1/link"), "GET /v1/link")
    }

    /// Sets the link class by hand (`auto`: detect again), as `UploadQueue.setLinkOverride` does; the link as the
    /// daemon then classifies it. The queue's own user and root alone.
    @discardableResult
    public func setLinkOverride(_ override: Configuration.LinkOverride) async throws -> QueueStatus.LinkStatus {
        let body = try JSONSerialization.data(withJSONObject: ["mode": override.rawValue])
        return try Self.link(try await exchange.send(.PUT, "/v1/link", json: body), "PUT /v1/link")
    }

    /// Prunes the history as `UploadQueue.prune(olderThan:dryRun:)` does (nil: `[retention] history`); the queue's
    /// own user and root alone. The database's sizes in the report are the daemon's.
    public func prune(olderThan age: Duration?, dryRun: Bool = false) async throws -> PruneReport {
        var request: [String: Any] = ["dry_run": dryRun]
        if let age { request["older_than"] = "\(Int64(age.components.seconds))s" }
        let answer = try await exchange.send(.POST, "/v1/prune", json: try JSONSerialization.data(withJSONObject: request))
        guard answer.status == 200 else { throw answer.error("POST /v1/prune") }
        let object = try answer.object("POST /v1/prune")
        func number(_ key: String) -> Int64 { (object[key] as? NSNumber)?.int64Value ?? 0 }
        var report = PruneReport()
        report.jobs = Int(number("jobs"))
        report.attempts = Int(number("attempts"))
        report.patches = Int(number("patches"))
        report.completions = Int(number("completions"))
        report.cancelledFiles = Int(number("cancelled_files"))
        report.databaseBytesBefore = number("database_bytes_before")
        report.databaseBytesAfter = number("database_bytes_after")
        return report
    }

    private static func link(_ answer: ControlExchange.Answer, _ route: String) throws -> LinkStatus {
        guard answer.status == 200 else { throw answer.error(route) }
        let object = try answer.object(route)
        guard let linkClass = (object["class"] as? String).flatMap(LinkStatus.LinkClass.init(rawValue:)),
              let source = (object["source"] as? String).flatMap(LinkStatus.Source.init(rawValue:)) else {
            throw UploadQueueError(.badRequest, "the daemon's answer to \(route) names no link class this version knows")
        }
        return LinkStatus(linkClass: linkClass, source: source, interface: object["interface"] as? String,
                          networkManager: object["networkmanager"] as? String, reason: object["reason"] as? String)
    }

    /// Every uploaded job whose completion was not acknowledged yet, then each job as the daemon uploads it, within
    /// a moment; as `UploadQueue.completions()`, each is delivered again by a later call until acknowledged.
    ///
    /// A daemon that restarts or is not up yet is waited for (tried again every 0.2 s); the sequence ends with an
    /// error only when the daemon refuses (this user may not read completions) or the task is cancelled.
    public func completions() -> AsyncThrowingStream<Completion, any Error> {
        let exchange = self.exchange
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    try await Self.follow(exchange) { continuation.yield($0) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Records that the host handled a completion: the daemon does not deliver it again, also after a restart.
    public func acknowledge(_ id: JobID) async throws {
        let answer = try await exchange.send(.POST, "/v1/completions/\(id)/ack")
        guard answer.status == 204 else { throw answer.error("POST /v1/completions/\(id)/ack") }
    }

    /// The daemon's events: those logged after `since` (nil: from now on), then each as it is logged, oldest
    /// first, each with its durable `sequence`; with `live`, also the lines the log does not keep (progress,
    /// unverified answers, patch and hook outcomes, link changes), without one.
    ///
    /// A daemon that restarts, or drops this follower because it fell behind on live lines, is followed again from
    /// the last sequence number delivered: nothing logged is missed or delivered twice. A `dropped` event tells of
    /// a gap (events pruned before they were read, or live lines given up). The sequence ends with an error only
    /// when the daemon refuses (a bad `since`, a user it does not serve), or the task is cancelled; other failures
    /// are tried again every second. A dropper gets its own jobs' events alone.
    ///
    /// At most `bufferedEvents` wait for the consumer: past that the socket is not read, so a consumer that cannot
    /// keep up holds the daemon's stream back (and is dropped from its live lines) instead of growing this process.
    public func events(since: Int64? = nil, live: Bool = false) -> AsyncThrowingStream<FeedEvent, any Error> {
        let exchange = self.exchange
        return AsyncThrowingStream(bufferingPolicy: .bufferingOldest(Self.bufferedEvents)) { continuation in
            let task = Task {
                var since = since
                while !Task.isCancelled {
                    do {
                        // Without a sequence number yet, the first connection starts from now on.
                        let route = "/v1/events/stream?live=\(live)" + (since.map { "&since=\($0)" } ?? "")
                        try await exchange.follow(route) { line in
                            guard let event = FeedEvent(jsonLine: line) else { return }
                            if event.kind == .following {
                                if since == nil, case .integer(let first)? = event.fields["from_seq"] { since = first - 1 }
                                return
                            }
                            // A full buffer takes no more: wait until the consumer took some.
                            while case .dropped = continuation.yield(event) {
                                try await Task.sleep(for: .milliseconds(20))
                            }
                            if let sequence = event.sequence { since = sequence }
                        }
                    } catch let error as UploadQueueError where error.code == .daemonUnreachable {
                        // Not up (yet), or restarting: followed again once it answers.
                    } catch is CancellationError {
                        break
                    } catch let error as UploadQueueError where [.badRequest, .forbidden].contains(error.code) {
                        continuation.finish(throwing: error)
                        return
                    } catch {
                        // Anything else (the daemon could not read its log a moment): tried again a second on.
                        try? await Task.sleep(for: .seconds(1))
                    }
                    try? await Task.sleep(for: .milliseconds(200))
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The most events `events(since:live:)` holds for a consumer that has not taken them yet.
    public static let bufferedEvents = 1000

    /// The event stream's lines as the daemon writes them (`uploadq events --follow`): `line` gets each; returns
    /// when the daemon ends the stream.
    package func followEventLines(since: Int64?, live: Bool, line: (String) async throws -> Void) async throws {
        try await exchange.follow("/v1/events/stream?live=\(live)" + (since.map { "&since=\($0)" } ?? ""), line: line)
    }

    // MARK: Completions

    /// How often the completions are read from the first again: what was delivered and is acknowledged since is
    /// forgotten then, so the memory stays as small as what is unacknowledged. Between two, the long poll reads on
    /// by the uploads' event numbers (`since=`), in commit order: nothing committed after a read is passed over.
    static let rescanInterval: Duration = .seconds(60)

    /// The longest an intake through the daemon may take to be answered: it reads and hashes the whole file.
    static let intakeDeadline: Duration = .seconds(3600)

    /// The long-poll loop behind `completions()`: reads on from the last event number seen, delivers each once.
    private static func follow(_ exchange: ControlExchange, yield: (Completion) -> Void) async throws {
        var delivered = Set<JobID>()
        var cursor: Int64 = 0
        var lastRescan = ContinuousClock.now - rescanInterval
        while !Task.isCancelled {
            let rescan = ContinuousClock.now - lastRescan >= rescanInterval
            do {
                if rescan {
                    // Page through from the first, then keep only what is still unacknowledged; the long poll goes
                    // on from the log as it was at the first page (what came since is read again, not passed over).
                    var seen = Set<JobID>()
                    var page: JobID?
                    var first = true
                    repeat {
                        let (batch, seq, more) = try await read(exchange, route: "after", page?.rawValue, timeout: 0)
                        if first { (cursor, first) = (seq, false) }
                        for completion in batch {
                            seen.insert(completion.jobID)
                            if delivered.insert(completion.jobID).inserted { yield(completion) }
                        }
                        page = batch.last?.jobID ?? page
                        if !more { break }
                    } while !Task.isCancelled
                    delivered.formIntersection(seen)
                    lastRescan = ContinuousClock.now
                    continue
                }
                let (batch, seq, _) = try await read(exchange, route: "since", "\(cursor)", timeout: 30)
                var fresh = 0
                for completion in batch where delivered.insert(completion.jobID).inserted {
                    fresh += 1
                    yield(completion)
                }
                // Only what was delivered already, with the cursor not moving on (a daemon that ignored it): no
                // tight loop.
                if !batch.isEmpty && fresh == 0 && seq == cursor { try await Task.sleep(for: .milliseconds(500)) }
                cursor = seq
            } catch let error as UploadQueueError where error.code == .badRequest && error.message.contains("past the last event") {
                // The daemon's log starts over (another state directory, a restored backup): read from the first.
                lastRescan = ContinuousClock.now - rescanInterval
            } catch let error as UploadQueueError where error.code == .daemonUnreachable {
                // The daemon restarts, or is not up yet: wait for it.
                try await Task.sleep(for: .milliseconds(200))
            } catch let error as UploadQueueError where error.code == .tooManyRequests {
                // This user's other listings are being answered: the next read waits a moment.
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        throw CancellationError()
    }

    private static let pageSize = 100

    /// One read of the completions, on from `cursor` (`after=` a completion, or `since=` an event number; none:
    /// from the first): the completions, the `seq` a `since` read goes on from, and whether more follow at once
    /// (a page is cut by its limit or its size; a daemon from before `more` cuts by the limit alone).
    private static func read(_ exchange: ControlExchange, route cursorName: String, _ cursor: String?,
                             timeout: Int) async throws -> (completions: [Completion], seq: Int64, more: Bool) {
        let route = "/v1/completions?timeout=\(timeout)&limit=\(pageSize)" + (cursor.map { "&\(cursorName)=\($0)" } ?? "")
        let answer = try await exchange.send(.GET, route, deadline: .seconds(Int64(timeout) + 15))
        guard answer.status == 200 else { throw answer.error("GET /v1/completions") }
        let object = try answer.object("GET /v1/completions")
        let items = object["completions"] as? [[String: Any]] ?? []
        return (items.compactMap(Completion.init(api:)), (object["seq"] as? NSNumber)?.int64Value ?? 0,
                object["more"] as? Bool ?? (items.count == pageSize))
    }

    /// A request as the body of `POST /v1/jobs`.
    private static func body(_ request: EnqueueRequest) -> [String: Any] {
        // Only what differs from the defaults: a dropper may not choose what it does not send.
        var body: [String: Any] = ["path": absolute(request.path)]
        if !request.meta.isEmpty { body["meta"] = request.meta }
        if request.priority != 0 { body["priority"] = request.priority }
        if request.mode != .copy { body["mode"] = request.mode.rawValue }
        if let destination = request.destination { body["destination"] = destination }
        if let onMetered = request.onMetered { body["on_metered"] = onMetered }
        if let then = request.sourceAfterUpload { body["source_after_upload"] = then.description }
        if let lane = request.lane { body["lane"] = lane }
        if !request.after.isEmpty { body["after"] = request.after }
        if let mode = request.afterMode { body["after_mode"] = mode.rawValue }
        if let group = request.group { body["group"] = group }
        if let patch = request.patch {
            var object: [String: Any] = ["url": patch.url]
            if let method = patch.method { object["method"] = method }
            if let template = patch.body { object["body"] = template }
            if let headers = patch.headers { object["headers"] = headers }
            body["patch"] = object
        }
        return body
    }

    private static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }
}

extension Completion {
    /// A completion as the control API shows it (`GET /v1/completions`); nil when it lacks what one needs.
    init?(api object: [String: Any]) {
        guard let text = object["id"] as? String, let id = JobID(text) else { return nil }
        jobID = id
        remoteURL = object["remote_url"] as? String ?? ""
        sha256 = object["sha256"] as? String ?? ""
        size = (object["size"] as? NSNumber)?.int64Value ?? 0
        meta = object["meta"] as? [String: String] ?? [:]
        destination = object["destination"] as? String ?? ""
        originalName = object["original_name"] as? String ?? ""
    }
}

extension JobGroup {
    /// A group from the control API's JSON (`ContractJSON.group`); nil when it is not one.
    init?(json object: [String: Any]) {
        guard let name = object["name"] as? String, let state = (object["state"] as? String).flatMap(State.init(rawValue:)),
              let created = (object["created_at"] as? String).flatMap(Date.init(rfc3339:)) else { return nil }
        let members = (object["completion"] as? [[String: Any]] ?? []).compactMap { member -> Member? in
            guard let id = (member["id"] as? String).flatMap(JobID.init) else { return nil }
            return Member(jobID: id, originalName: member["name"] as? String ?? "",
                          size: (member["size"] as? NSNumber)?.int64Value ?? 0, sha256: member["sha256"] as? String ?? "",
                          remoteURL: member["remote_url"] as? String ?? "")
        }
        self.init(name: name, ownerUID: (object["owner_uid"] as? NSNumber).flatMap { UInt32(exactly: $0.int64Value) },
                  state: state, members: object["members"] as? Int ?? 0, remaining: object["remaining"] as? Int ?? 0,
                  failed: object["failed"] as? Int ?? 0, failingJob: (object["failing_job"] as? String).flatMap(JobID.init),
                  createdAt: created, closedAt: (object["closed_at"] as? String).flatMap(Date.init(rfc3339:)),
                  completedAt: (object["completed_at"] as? String).flatMap(Date.init(rfc3339:)),
                  acknowledgedAt: (object["acknowledged_at"] as? String).flatMap(Date.init(rfc3339:)),
                  completion: members)
    }
}

extension LaneStatus {
    /// A lane from the control API's JSON (`ContractJSON.lane`); nil when it is not one.
    init?(json object: [String: Any]) {
        guard let name = object["name"] as? String else { return nil }
        self.init(name: name, ownerUID: (object["owner_uid"] as? NSNumber).flatMap { UInt32(exactly: $0.int64Value) },
                  queued: object["queued"] as? Int ?? 0, head: (object["head"] as? String).flatMap(JobID.init),
                  headState: (object["head_state"] as? String).flatMap(JobState.init(rawValue:)),
                  headSince: (object["head_since"] as? String).flatMap(Date.init(rfc3339:)),
                  blockedBy: (object["blocked_by"] as? String).flatMap(JobID.init),
                  blockedSince: (object["blocked_since"] as? String).flatMap(Date.init(rfc3339:)),
                  reason: object["reason"] as? String,
                  onFailure: (object["on_failure"] as? String).flatMap(Configuration.LaneFailure.init(rawValue:)) ?? .hold)
    }
}
