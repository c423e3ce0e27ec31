import Foundation
import Synchronization

/// The control API's endpoints: what each route does for a peer, answered as JSON. The HTTP server
/// (`ControlServer`) hands each request here with the peer the kernel named.
///
/// A peer that is not the queue's own user (nor root) is a dropper: it sees, waits for, cancels, retries and
/// acknowledges its own jobs alone (another's answer as if they did not exist), hands over its own files alone, by
/// copy, and chooses only what the spool's trust rules let a sidecar choose.
package struct ControlAPI: Sendable {
    let queue: UploadQueue
    let changes: WakeSignal
    /// The lines the durable log does not keep, for the event stream's `live=true` followers.
    let live: LiveEvents
    /// Enqueues being read now, per dropper: each reads a file on a thread of its own.
    private let enqueues = PerUserSlots(limit: ControlAPI.enqueuesPerUser, what: "enqueues")
    /// The idempotency keys of enqueues being answered now, per uid: a second request with one waits for none and is
    /// told to send it again (two at once could otherwise make two jobs for one key).
    private let keysAnswered = KeysAnswered()

    private final class KeysAnswered: Sendable {
        let keys = Mutex<Set<String>>([])
    }

    /// The longest a long poll (`wait`, `completions`) may be asked to wait.
    static let longestWait: Duration = .seconds(300)
    /// The enqueues one uid may have in flight at once; more answer 429.
    static let enqueuesPerUser = 4
    /// The most jobs a page of `GET /v1/jobs` holds.
    static let pageLimit = 1000
    /// The most bytes of what they carry a page of jobs, completions or events holds: what one request can add to
    /// the daemon's memory stays a few MiB, whatever the jobs carry.
    static let pageBytes = 1 << 20
    /// Listings (jobs, completions, events) being built or written now per dropper: at most four at once, more
    /// answer 429, so that no dropper's requests can make the daemon's memory grow by more than a few pages.
    private let reads = PerUserSlots(limit: 4, what: "listings")

    init(queue: UploadQueue, changes: WakeSignal, live: LiveEvents) {
        self.queue = queue
        self.changes = changes
        self.live = live
    }

    /// The API of a queue (the daemon's): its long polls wake on `changes`, which the caller signals at every change.
    package init(queue: UploadQueue) {
        let live = LiveEvents(readerBuffer: Int(queue.configuration.events.readerBuffer))
        self.init(queue: queue, changes: WakeSignal(remembers: false, alsoSignalling: live.signalSubscribers), live: live)
    }

    /// Answers one request; never throws: every failure is a reply with its status and error code.
    package func respond(_ request: ControlRequest, peer: ControlPeer) async -> ControlReply {
        let route: ControlRoute
        switch ControlRoute.match(method: request.method, path: request.path) {
        case .success(let matched):
            route = matched
        case .failure(.notFound):
            return .error(404, "not-found", "no such endpoint: \(request.method) \(request.path) (see docs/api.md)")
        case .failure(.methodNotAllowed(let allowed)):
            var reply = ControlReply.error(405, "method-not-allowed",
                                           "\(request.path) takes \(allowed.joined(separator: ", ")), not \(request.method)")
            reply.headers = [("Allow", allowed.joined(separator: ", "))]
            return reply
        case .failure(.badJobID(let text)):
            return .error(404, "job-not-found", "\"\(SafeText.escaped(text))\" is not a job id (a UUID)")
        case .failure(.badName(let text)):
            return .error(404, "group-not-found", "\"\(SafeText.escaped(text))\" is not a group's name (1 to 128 "
                + "characters, no `/`)")
        }
        do {
            return try await respond(route, request, peer: peer)
        } catch let error as UploadQueueError {
            return .error(error)
        } catch let error as ControlAPIError {
            return .error(error.status, error.code, error.message)
        } catch {
            return .error(500, "internal", "\(error)")
        }
    }

    private func respond(_ route: ControlRoute, _ request: ControlRequest, peer: ControlPeer) async throws -> ControlReply {
        let store = queue.store
        switch route {
        case .health:
            return .json(200, ["status": "ok", "version": UploadQueueVersion.current, "api": 1,
                               "running": await queue.isRunning])
        case .status:
            guard peer.isAdmin else {
                throw ControlAPIError(403, "forbidden", "the status covers every user's jobs: it is the queue's own "
                    + "user's and root's; GET /v1/jobs lists yours")
            }
            return .json(200, ContractJSON.status(try await queue.status()))
        case .enqueue:
            return try await enqueue(request, peer: peer)
        case .enqueueBatch:
            return try await enqueueBatch(request, peer: peer)
        case .jobs:
            let state = try request.query["state"].map { text in
                guard let state = JobState(rawValue: text) else {
                    throw ControlAPIError(400, "bad-request", "state must be one of "
                        + JobState.allCases.map(\.rawValue).joined(separator: ", "))
                }
                return state
            }
            // A page at a time: at most `pageLimit` jobs (a larger limit is read as it) and `pageBytes` of what
            // they carry; `next` is where the next page begins.
            let limit = min(Self.pageLimit, try integer(request.query["limit"], name: "limit", range: 1...100_000) ?? 1000)
            let before = try request.query["before"].map { text in
                guard let id = JobID(text) else {
                    throw ControlAPIError(400, "bad-request", "before must be the next of an earlier page (a job id)")
                }
                return id
            }
            let runnerUp = await queue.runnerIsUp
            let (listing, slot) = try await page(peer) {
                try store.listing(state: state, limit: limit, owner: peer.isAdmin ? nil : peer.uid, holdsInForce: runnerUp,
                                  before: before, byteBudget: Self.pageBytes)
            }
            var reply = ControlReply(status: 200, body: ContractJSON.jobsPage(listing.jobs, next: listing.next))
            reply.written = slot.give
            return reply
        case .job(let id):
            return .json(200, ContractJSON.job(try await reachable(id, peer: peer)))
        case .cancel(let id):
            _ = try await reachable(id, peer: peer)
            let outcome = try await queue.cancel(id)
            changes.signal()
            return .json(200, ["id": id.rawValue, "outcome": outcome.rawValue])
        case .retry(let id):
            _ = try await reachable(id, peer: peer)
            // `hooks=true`: the failed patch and hooks alone, not the upload.
            let hooksOnly = try flag(request.query["hooks"], name: "hooks")
            let retried = hooksOnly ? try await queue.retryOutbox(id) : try await queue.retry([id]).contains(id)
            return .json(200, ["id": id.rawValue, "retried": retried])
        case .skip(let id):
            _ = try await reachable(id, peer: peer)
            try await queue.skip(id)
            changes.signal()
            return .json(200, ["id": id.rawValue, "skipped": true])
        case .retryFailed:
            try requireAdmin(peer, "retrying every failed job")
            let changed = try await queue.retryFailed()
            changes.signal()
            return .json(200, ["retried": changed.map(\.rawValue)])
        case .lanes:
            let lanes = try await BlockingWork.run {
                try store.lanes(owner: peer.isAdmin ? nil : peer.uid, everyone: peer.isAdmin)
            }
            return .json(200, ["lanes": lanes.map(ContractJSON.lane)])
        case .groups:
            let groups = try await BlockingWork.run {
                try store.groups(owner: peer.isAdmin ? nil : peer.uid, everyone: peer.isAdmin, byOwner: !peer.isAdmin)
            }
            return .json(200, ["groups": groups.map(ContractJSON.group)])
        case .group(let name):
            let owner = try groupOwner(request, peer: peer)
            guard let group = try await BlockingWork.run({ try store.group(name, owner: owner, byOwner: !peer.isAdmin) })
            else {
                throw UploadQueueError(.groupNotFound, "no group \"\(SafeText.escaped(name))\" of yours")
            }
            return .json(200, ContractJSON.group(group))
        case .closeGroup(let name):
            let patch = try groupPatch(request, peer: peer)
            let group = try await queue.closeGroup(name, patch: patch, owner: try groupOwner(request, peer: peer))
            changes.signal()
            return .json(200, ContractJSON.group(group))
        case .acknowledgeGroup(let name):
            let owner = try groupOwner(request, peer: peer)
            // A dropper's acknowledgement is its own mark: the host's stays the host's to give.
            try await BlockingWork.run { try store.acknowledgeGroup(name, owner: owner, byOwner: !peer.isAdmin) }
            return .json(200, ["group": name, "acknowledged": true])
        case .spool:
            // Files left in the spool for a reason of their owner's: a dropper's own; every user's to the admin.
            let held = try await BlockingWork.run {
                try store.spoolHolds(owner: peer.isAdmin ? nil : peer.uid, limit: QueueStore.spoolHoldRows)
            }
            return .json(200, ["held": held.map(ContractJSON.spoolHold)])
        case .events:
            return try await events(request, peer: peer)
        case .followEvents:
            return try await followEvents(request, peer: peer)
        case .link:
            return .json(200, ContractJSON.link(try await queue.link()))
        case .setLink:
            try requireAdmin(peer, "setting the link class")
            guard let object = (try? JSONSerialization.jsonObject(with: request.body)) as? [String: Any],
                  object.count == 1, let text = object["mode"] as? String, let mode = LinkOverride(rawValue: text) else {
                throw ControlAPIError(400, "bad-request", "the body must be {\"mode\": …}, one of "
                    + LinkOverride.allCases.map(\.rawValue).joined(separator: ", "))
            }
            try await queue.setLinkOverride(mode)
            return .json(200, ContractJSON.link(try await queue.link()))
        case .config:
            try requireAdmin(peer, "the effective config")
            let document = EffectiveConfiguration(queue.configuration).json()
            return ControlReply(status: 200, body: Data(document.utf8))
        case .prune:
            try requireAdmin(peer, "pruning the history")
            return try await prune(request)
        case .wait(let id):
            return try await wait(for: id, request, peer: peer)
        case .completions:
            return try await completions(request, peer: peer)
        case .acknowledge(let id):
            let job = try await reachable(id, peer: peer)
            guard job.state == .uploaded else {
                throw ControlAPIError(409, "conflict", "job \(id) is \(job.state.rawValue): only an uploaded job's "
                    + "completion is acknowledged")
            }
            try await BlockingWork.run {
                if peer.isAdmin { try store.acknowledge(id) } else { try store.acknowledge(id, owner: peer.uid) }
            }
            return .noContent
        }
    }

    /// A page read for `peer` (a listing of jobs, completions, events), with one of a dropper's listing slots: held
    /// from the read until its reply has gone to the socket (`ControlReply.written`), so a dropper has at most
    /// `reads.limit` pages in the daemon's memory; given back before a long poll waits, and on an error. A request
    /// that finds its dropper's slots taken is answered 429 at once.
    private func page<T: Sendable>(_ peer: ControlPeer, _ read: @escaping @Sendable () throws -> T) async throws
        -> (T, PerUserSlots.Slot)
    {
        try await Self.read(read, holding: try reads.slot(peer))
    }

    /// A page as `page` reads it, for a long poll: one already under way (`waitingUntil`) that finds its
    /// dropper's slots taken waits for one until then rather than fail half way, and gets nil at its end (its
    /// caller answers what its last read found: nothing new).
    private func polledPage<T: Sendable>(_ peer: ControlPeer, waitingUntil deadline: ContinuousClock.Instant?,
                                         _ read: @escaping @Sendable () throws -> T) async throws
        -> (T, PerUserSlots.Slot)?
    {
        guard let deadline else { return try await page(peer, read) }
        let slot: PerUserSlots.Slot
        while true {
            do {
                slot = try reads.slot(peer)
                break
            } catch {
                guard ContinuousClock.now < deadline else { return nil }
                try await Task.sleep(for: min(.milliseconds(100), deadline - ContinuousClock.now))
            }
        }
        return try await Self.read(read, holding: slot)
    }

    /// `read` run off the pool with `slot` held; the slot given back if it fails.
    private static func read<T: Sendable>(_ read: @escaping @Sendable () throws -> T, holding slot: PerUserSlots.Slot)
        async throws -> (T, PerUserSlots.Slot)
    {
        do {
            return (try await BlockingWork.run(read), slot)
        } catch {
            slot.give()
            throw error
        }
    }

    /// Refuses a dropper what is the queue's own user's and root's alone.
    private func requireAdmin(_ peer: ControlPeer, _ what: String) throws {
        guard peer.isAdmin else {
            throw ControlAPIError(403, "forbidden", "\(what) is the queue's own user's and root's")
        }
    }

    /// `POST /v1/prune`: `{"older_than": "90d", "dry_run": false}` (both optional: `[retention] history`, and a
    /// real prune); the report as `uploadq prune --json` prints it.
    private func prune(_ request: ControlRequest) async throws -> ControlReply {
        let object = request.body.isEmpty ? [:] : (try? JSONSerialization.jsonObject(with: request.body)) as? [String: Any]
        guard let object, Set(object.keys).isSubset(of: ["older_than", "dry_run"]) else {
            throw ControlAPIError(400, "bad-request", "the body must be {\"older_than\": \"90d\", \"dry_run\": false} "
                + "(both optional)")
        }
        let dryRunValue = object["dry_run"] ?? false
        guard ContractJSON.isBoolean(dryRunValue), let dryRun = dryRunValue as? Bool else {
            throw ControlAPIError(400, "bad-request", "\"dry_run\" must be true or false")
        }
        var age = queue.configuration.retention.history
        if let given = object["older_than"] {
            guard let text = given as? String, let parsed = ConfigurationLoader.duration(text) else {
                throw ControlAPIError(400, "bad-request", "\"older_than\" must be a duration such as 90d, 12h or 30m")
            }
            age = parsed
        }
        guard let age else {
            throw ControlAPIError(400, "bad-request", "[retention] history is \"forever\": give \"older_than\"")
        }
        let report = try await queue.prune(olderThan: age, dryRun: dryRun)
        return .json(200, ContractJSON.prune(report, dryRun: dryRun))
    }

    // MARK: Jobs

    /// The job, if the peer may see it; a job of another user's is answered as one that does not exist.
    private func reachable(_ id: JobID, peer: ControlPeer) async throws -> Job {
        let runnerUp = await queue.runnerIsUp
        let store = queue.store
        let job = try await BlockingWork.run { try store.job(id, holdsInForce: runnerUp) }
        guard let job, peer.mayReach(owner: job.ownerUID) else {
            throw UploadQueueError(.jobNotFound, "no job with id \(id)", job: id)
        }
        return job
    }

    /// `POST /v1/jobs`: a file handed over by path, with the keys of a spool sidecar (destination, meta, patch,
    /// priority, on_metered) and, for the queue's own user, `mode`, `patch.body` and `source_after_upload`.
    private func enqueue(_ request: ControlRequest, peer: ControlPeer) async throws -> ControlReply {
        guard let object = try? JSONSerialization.jsonObject(with: request.body), let fields = object as? [String: Any] else {
            throw ControlAPIError(400, "bad-request", "the body must be a JSON object with at least \"path\"")
        }
        let key = try request.idempotencyKey.map { key in
            guard (1...255).contains(key.utf8.count), key.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }) else {
                throw ControlAPIError(400, "bad-request", "Idempotency-Key must be 1 to 255 visible ASCII characters")
            }
            return key
        }
        let store = queue.store
        // A key names its job for good (also once it was cancelled or pruned): the same request is answered with it.
        if let key, let earlier = try await BlockingWork.run({ try store.idempotentJob(owner: peer.uid, key: key) }) {
            return .json(200, ["id": earlier.rawValue, "deduplicated": true, "replayed": true])
        }
        // Checked after the key: a replay is answered even once the file is gone from where it was.
        let enqueue = try parse(fields, peer: peer)
        let keyName = key.map { "\(peer.uid) \($0)" }
        if let keyName {
            guard keysAnswered.keys.withLock({ $0.insert(keyName).inserted }) else {
                throw ControlAPIError(409, "conflict", "a request with this Idempotency-Key is being answered; send "
                    + "it again once that one is")
            }
        }
        defer { if let keyName { _ = keysAnswered.keys.withLock { $0.remove(keyName) } } }
        // Between the look-up and the claim, the other request may have finished.
        if let key, let earlier = try await BlockingWork.run({ try store.idempotentJob(owner: peer.uid, key: key) }) {
            return .json(200, ["id": earlier.rawValue, "deduplicated": true, "replayed": true])
        }
        try enqueues.take(peer)
        defer { enqueues.give(peer) }
        var keyed = enqueue
        // Remembered with the job, in one transaction. The job is this peer's own (de-duplication keeps owners
        // apart); a replay checks so again all the same.
        keyed.idempotencyKey = key.map { EnqueueRequest.IdempotencyKey(owner: peer.uid, key: $0) }
        let result = try await accept(keyed, peer: peer)
        changes.signal()
        return .json(result.deduplicated ? 200 : 201,
                     ["id": result.id.rawValue, "deduplicated": result.deduplicated, "replayed": false])
    }

    /// The most files one `POST /v1/jobs/batch` hands over.
    static let batchLimit = 1000

    /// `POST /v1/jobs/batch`: `{"jobs": [ … ]}`, each as the body of `POST /v1/jobs`, answered each on its own and
    /// in order (`{"results": [{"id", "deduplicated"} or {"error"}]}`). The queue's own user's files are made
    /// durable together (one flush, one commit per 256), as `uploadq enqueue A B C…` does; a dropper's are taken
    /// one by one, each checked as alone.
    private func enqueueBatch(_ request: ControlRequest, peer: ControlPeer) async throws -> ControlReply {
        guard request.idempotencyKey == nil else {
            throw ControlAPIError(400, "bad-request", "a batch takes no Idempotency-Key: send each file with its key "
                + "to POST /v1/jobs")
        }
        guard let object = (try? JSONSerialization.jsonObject(with: request.body)) as? [String: Any],
              object.count == 1, let items = object["jobs"] as? [Any], (1...Self.batchLimit).contains(items.count) else {
            throw ControlAPIError(400, "bad-request", "the body must be {\"jobs\": [...]} with 1 to "
                + "\(Self.batchLimit) enqueue requests")
        }
        try enqueues.take(peer)
        defer { enqueues.give(peer) }
        var results = [[String: Any]?](repeating: nil, count: items.count)
        var parsed: [(index: Int, request: EnqueueRequest)] = []
        for (index, item) in items.enumerated() {
            do {
                guard let fields = item as? [String: Any] else {
                    throw ControlAPIError(400, "bad-request", "each of \"jobs\" must be an object with \"path\"")
                }
                parsed.append((index, try parse(fields, peer: peer)))
            } catch let error as ControlAPIError where error.status == 400 {
                // A malformed request refuses the batch (nothing is taken); a refused choice or file is its own.
                throw ControlAPIError(400, "bad-request", "jobs[\(index)]: \(error.message)")
            } catch {
                results[index] = Self.errorObject(error)
            }
        }
        if peer.isAdmin {
            // A client gone, or the daemon stopping: the file being read and those after it are not read on.
            let stop = Self.clientStop()
            let outcomes = await withTaskCancellationHandler {
                await queue.enqueue(batch: parsed.map(\.request), stop: stop)
            } onCancel: {
                stop.stop()
            }
            if stop.isStopped {
                queue.logger.notice("control API: a batch of \(parsed.count) enqueue(s) stopped: its client left, or the daemon stops")
            }
            for ((index, enqueue), outcome) in zip(parsed, outcomes) {
                switch outcome {
                case .success(let result):
                    results[index] = ["id": result.id.rawValue, "deduplicated": result.deduplicated]
                case .failure(let error):
                    results[index] = Self.errorObject(Self.mapped(error, path: enqueue.path, peer: peer))
                }
            }
        } else {
            for (index, enqueue) in parsed {
                // A client gone, or the daemon stopping: the rest is not read.
                try Task.checkCancellation()
                do {
                    let result = try await accept(enqueue, peer: peer)
                    results[index] = ["id": result.id.rawValue, "deduplicated": result.deduplicated]
                } catch {
                    results[index] = Self.errorObject(error)
                }
            }
        }
        changes.signal()
        return .json(200, ["results": results.map { $0 ?? [:] }])
    }

    /// An enqueue's body as a request, checked as the peer's: its choices (a dropper's as a sidecar's, by copy),
    /// and, for a dropper, that the path is a regular file of its own.
    private func parse(_ body: [String: Any], peer: ControlPeer) throws -> EnqueueRequest {
        var fields = body
        guard let path = fields.removeValue(forKey: "path") as? String, path.hasPrefix("/") else {
            throw ControlAPIError(400, "bad-request", "\"path\" must be the file's absolute path")
        }
        let modeText = fields.removeValue(forKey: "mode") ?? "copy"
        guard let modeName = modeText as? String, let mode = IntakeMode(rawValue: modeName) else {
            throw ControlAPIError(400, "bad-request", "\"mode\" must be copy, move or reference")
        }
        let thenText = fields.removeValue(forKey: "source_after_upload")
        var sourceAfterUpload: SourceAfterUpload?
        if let thenText {
            guard let text = thenText as? String, mode == .reference, let then = SourceAfterUpload(text, base: "/") else {
                throw ControlAPIError(400, "bad-request", "\"source_after_upload\" must be keep, delete or move:DIR, "
                    + "with mode reference")
            }
            sourceAfterUpload = then
        }
        // The queue's own user may send its own patch body template, as the CLI and the library may.
        var patchBody: String?
        var dropper: DropperAccess?
        if peer.isAdmin, var patch = fields["patch"] as? [String: Any], let body = patch.removeValue(forKey: "body") {
            guard let text = body as? String else {
                throw ControlAPIError(400, "bad-request", "\"patch.body\" must be a string")
            }
            patchBody = text
            fields["patch"] = patch
        }
        // The rest has a sidecar's keys, checked as a sidecar's are.
        var sidecar: Sidecar
        do {
            sidecar = try Sidecar(json: try JSONSerialization.data(withJSONObject: fields))
        } catch let error as SidecarError {
            throw ControlAPIError(400, "bad-request", error.message)
        }
        if let patchBody { sidecar.patch?.body = patchBody }
        if !peer.isAdmin {
            guard mode == .copy else {
                throw ControlAPIError(403, "forbidden", "only the queue's own user may enqueue by \(mode.rawValue): "
                    + "yours are taken by copy (leave out \"mode\")")
            }
            guard let spool = queue.configuration.spool else {
                throw ControlAPIError(403, "forbidden", "this queue takes files from its own user alone: the admin "
                    + "set no [spool], whose trust rules say what other users may choose")
            }
            let rules = DropperRules(configuration: queue.configuration, spool: spool)
            if let why = rules.options.refusal(of: sidecar) {
                throw ControlAPIError(403, "forbidden", "the request \(why)")
            }
            // The file itself is opened as the dropper would open it, and checked, by the intake.
            dropper = DropperAccess(uid: peer.uid, gid: peer.gid, groups: peer.supplementaryGroups,
                                    groupsUncertain: peer.groupsUncertain, rules: rules)
        }
        var enqueue = EnqueueRequest(
            path: path,
            destination: sidecar.destination ?? (peer.isAdmin ? nil : queue.configuration.spool?.destination),
            meta: sidecar.meta, patch: sidecar.patch, priority: sidecar.priority ?? 0, mode: mode,
            onMetered: sidecar.onMetered, sourceAfterUpload: sourceAfterUpload, lane: sidecar.lane,
            after: sidecar.after, afterMode: sidecar.afterMode, group: sidecar.group)
        enqueue.keyOwner = peer.uid
        // A dropper's job is its own (the queue's own user's and root's are everyone's to the admin).
        enqueue.owner = peer.isAdmin ? nil : peer.uid
        enqueue.ownedFileOnly = !peer.isAdmin
        enqueue.dropper = dropper
        return enqueue
    }

    /// Takes one file in as the peer's, its refusal said as the API says it. The intake (a large file is read for
    /// minutes) stops at its next block when the request's task is cancelled: the client left, or the daemon stops.
    /// Nothing is queued then, and the file stays where it is.
    private func accept(_ enqueue: EnqueueRequest, peer: ControlPeer) async throws -> EnqueueResult {
        let stop = Self.clientStop()
        do {
            return try await withTaskCancellationHandler {
                try await queue.accept(enqueue, noFollow: !peer.isAdmin, stop: stop)
            } onCancel: {
                stop.stop()
            }
        } catch let error as UploadQueueError {
            if stop.isStopped, error.code == .interrupted {
                queue.logger.notice("control API: the enqueue of \(enqueue.path) (uid \(peer.uid)) stopped: \(error.message)")
            }
            throw Self.mapped(error, path: enqueue.path, peer: peer)
        }
    }

    /// The stop of a request's intake: the client that asked left, or the daemon stops.
    private static func clientStop() -> IntakeStop {
        IntakeStop(why: "the client that asked left, or the daemon stops; nothing was queued and the file is where it was")
    }

    /// A refusal of the intake as the peer hears it: a dropper learns nothing of what is at a path, and a file the
    /// daemon may not read is `permission-denied`.
    private static func mapped(_ error: UploadQueueError, path: String, peer: ControlPeer) -> any Error {
        if !peer.isAdmin && aboutTheFile(error) { return notYourFile(path) }
        if error.code == .io && error.cause == String(cString: strerror(EACCES)) {
            return ControlAPIError(422, "permission-denied", "the daemon may not read \(path): \(error.message)")
        }
        return error
    }

    /// An error as one result of a batch: `{"error": {"code", "message"}}`.
    private static func errorObject(_ error: any Error) -> [String: Any] {
        let (code, message) = switch error {
        case let error as UploadQueueError: (error.code.rawValue, error.description)
        case let error as ControlAPIError: (error.code, error.message)
        default: ("internal", "\(error)")
        }
        return ["error": ["code": code, "message": message]]
    }

    /// Whether a refusal of the intake is about what is at the path (which a dropper gets as `notYourFile`).
    private static func aboutTheFile(_ error: UploadQueueError) -> Bool {
        [.fileNotFound, .notRegularFile, .symbolicLink, .forbidden, .io].contains(error.code)
    }

    private static func notYourFile(_ path: String) -> ControlAPIError {
        ControlAPIError(403, "forbidden", "\(SafeText.escaped(path)) is not a regular file of yours that the queue "
            + "can read (or is not there): hand over your own files, readable by the queue")
    }

    // MARK: Long polls

    /// `GET /v1/jobs/{id}/wait?state=uploaded,failed&timeout=30`: the job once it is in one of the states, or as it
    /// is when the time is up (`reached` says which).
    private func wait(for id: JobID, _ request: ControlRequest, peer: ControlPeer) async throws -> ControlReply {
        let states = try (request.query["state"] ?? "uploaded,failed")
            .split(separator: ",", omittingEmptySubsequences: false).map { text in
            guard let state = JobState(rawValue: String(text)) else {
                throw ControlAPIError(400, "bad-request", "state must list states among "
                    + JobState.allCases.map(\.rawValue).joined(separator: ", "))
            }
            return state
        }
        let timeout = try duration(request.query["timeout"]) ?? .seconds(30)
        let deadline = ContinuousClock.now + timeout
        while true {
            let job = try await reachable(id, peer: peer)
            let reached = states.contains(job.state)
            if reached || ContinuousClock.now >= deadline {
                var object = ContractJSON.job(job)
                object["reached"] = reached
                return .json(200, object)
            }
            await changes.wait(timeout: min(.seconds(1), deadline - ContinuousClock.now))
            try Task.checkCancellation()
        }
    }

    /// `GET /v1/completions?timeout=30&limit=100`: the peer's uploaded jobs whose completion was not acknowledged,
    /// oldest first; with a timeout, waits until there is one. `after=ID` goes on after a completion returned before
    /// (time order); `since=SEQ` after the answer's `seq` (commit order: each completion then carries its upload's
    /// event number). Every answer says in `seq` where a `since` read goes on from.
    private func completions(_ request: ControlRequest, peer: ControlPeer) async throws -> ControlReply {
        let timeout = try duration(request.query["timeout"]) ?? .zero
        let limit = try integer(request.query["limit"], name: "limit", range: 1...10_000) ?? 100
        let after = try request.query["after"].map { text in
            guard let id = JobID(text) else {
                throw ControlAPIError(400, "bad-request", "after must be the id of a completion returned before")
            }
            return id
        }
        let since = try request.query["since"].map { text in
            guard after == nil else {
                throw ControlAPIError(400, "bad-request", "after and since do not go together: since (a seq) alone")
            }
            guard let seq = Int64(text), seq >= 0 else {
                throw ControlAPIError(400, "bad-request", "since must be the seq of an earlier answer (0: every one)")
            }
            return seq
        }
        let deadline = ContinuousClock.now + timeout
        let store = queue.store
        let owner = peer.isAdmin ? nil : peer.uid
        if let since {
            let last = try await BlockingWork.run { try store.eventLogBounds(owner: owner).last }
            guard since <= last else {
                throw ControlAPIError(400, "bad-request", "since=\(since) lies past the last event (\(last)): it is "
                    + "another queue's number, or this queue was restored from a backup; read again without it")
            }
        }
        // From now on pruning keeps completions until the queue's own consumer acknowledged them (a dropper's
        // reading of its own never changes what is kept for everyone).
        if peer.isAdmin { try await BlockingWork.run { try store.noteCompletionConsumer() } }
        // What the poll's last read answered (nothing new): the answer when its end comes before a listing slot.
        var polled: Int64?
        while true {
            // By the upload's event number (commit order) after `since`; else in time order, after `after`.
            let read = try await polledPage(peer, waitingUntil: polled == nil ? nil : deadline) {
                () -> ([(job: Job, seq: Int64?)], Int64, Bool) in
                if let since {
                    let read = try store.completions(since: since, owner: owner, limit: limit, byteBudget: Self.pageBytes)
                    return (read.jobs.map { ($0.job, $0.seq) }, read.seq, read.more)
                }
                let read = try store.unacknowledgedCompletionsAndSeq(owner: owner, after: after, limit: limit,
                                                                     byteBudget: Self.pageBytes)
                return (read.jobs.map { ($0, nil) }, read.seq, read.more)
            }
            guard let ((jobs, seq, more), slot) = read else {
                return .json(200, ["completions": [Any](), "seq": polled ?? 0, "more": false])
            }
            if !jobs.isEmpty || ContinuousClock.now >= deadline {
                var reply = ControlReply.json(200, ["completions": jobs.map { job, seq in
                    var completion = Self.completion(job)
                    if let seq { completion["seq"] = seq }
                    return completion
                }, "seq": seq, "more": more])
                reply.written = slot.give
                return reply
            }
            slot.give()
            polled = seq
            await changes.wait(timeout: min(.seconds(1), deadline - ContinuousClock.now))
            try Task.checkCancellation()
        }
    }

    /// `GET /v1/events?since=SEQ&timeout=30&limit=1000`: the durable event log after `since` as NDJSON, one event
    /// a line with its `seq`, oldest first; with a timeout, waits until there is one. Without `since`, from now on;
    /// `since=0`, everything kept. A reader whose `since` lies before what is kept gets a `dropped` line first (a
    /// gap it cannot fill). A dropper reads its own jobs' events alone.
    private func events(_ request: ControlRequest, peer: ControlPeer) async throws -> ControlReply {
        let timeout = try duration(request.query["timeout"]) ?? .zero
        let limit = try integer(request.query["limit"], name: "limit", range: 1...10_000) ?? 1000
        let store = queue.store
        var (since, gap) = try await eventStart(request.query["since"], peer: peer)
        var lines = gap.map { [$0.jsonLine] } ?? []
        let deadline = ContinuousClock.now + timeout
        let owner = peer.isAdmin ? nil : peer.uid
        var polling = false
        while true {
            let after = since
            let read = try await polledPage(peer, waitingUntil: polling ? deadline : nil) {
                try store.loggedEvents(after: after, owner: owner, limit: limit, byteBudget: Self.pageBytes).events
            }
            // The poll's end came before a listing slot: nothing new since its last read.
            let (events, slot): ([FeedEvent], PerUserSlots.Slot?) = read.map { ($0.0, $0.1) } ?? ([], nil)
            lines += events.map(\.jsonLine)
            since = events.last?.sequence ?? since
            guard let slot, lines.isEmpty, ContinuousClock.now < deadline else {
                var reply = ControlReply(status: 200, body: Data(lines.map { $0 + "\n" }.joined().utf8))
                // Where the next read goes on from (`since`), also after an empty answer.
                reply.headers = [("Content-Type", "application/x-ndjson"), ("Uploadq-Seq", "\(since)")]
                reply.written = slot?.give
                return reply
            }
            slot.give()
            polling = true
            await changes.wait(timeout: min(.seconds(1), deadline - ContinuousClock.now))
            try Task.checkCancellation()
        }
    }

    /// Where a reader of the event log starts: after `since` (nil: after the last event now), and the `dropped`
    /// line it gets first when that lies before what is kept (a gap it cannot fill). A `since` past the last event
    /// ever given out is refused: the reader's number is from another queue (or this one restored from a backup).
    private func eventStart(_ text: String?, peer: ControlPeer) async throws -> (since: Int64, gap: FeedEvent?) {
        let store = queue.store
        // A dropper's numbers are its own sequence's.
        let owner = peer.isAdmin ? nil : peer.uid
        let bounds = try await BlockingWork.run { try store.eventLogBounds(owner: owner) }
        guard let text else { return (bounds.last, nil) }
        guard let since = Int64(text), since >= 0 else {
            throw ControlAPIError(400, "bad-request", "since must be a sequence number (0: from the first kept)")
        }
        guard since <= bounds.last else {
            throw ControlAPIError(400, "bad-request", "since=\(since) lies past the last event (\(bounds.last)): "
                + "it is another queue's number, or this queue was restored from a backup; read again from since=0")
        }
        // The first kept, or (all pruned) the next to come.
        let first = bounds.first ?? bounds.last + 1
        guard since < first - 1 else { return (since, nil) }
        var gap = FeedEvent(.dropped, time: Date())
        // What a dropper missed of others' is none of its business: the count is the admin's.
        if peer.isAdmin { gap.fields["lost"] = .integer(first - 1 - since) }
        gap.sequence = first - 1
        return (first - 1, gap)
    }

    /// `GET /v1/events/stream?since=SEQ&live=true`: the durable log after `since` (without it, from now on), then
    /// each event as it is written, as NDJSON, or as server-sent events for `Accept: text/event-stream` (each
    /// logged one with its `id:`, so `Last-Event-ID` resumes). The first line is `following`; `live=true` adds the
    /// lines the log does not keep (progress, unverified, patch, hook, link), without a `seq`. The stream ends when
    /// the client goes or the daemon stops. A follower whose live lines pile up past `[events] reader_buffer` gets a
    /// `dropped` line and the end: it resumes with `since=` and loses nothing logged. A dropper follows its own jobs.
    private func followEvents(_ request: ControlRequest, peer: ControlPeer) async throws -> ControlReply {
        let withLive = try flag(request.query["live"], name: "live")
        let serverSent = request.accept?.contains("text/event-stream") == true
        // An EventSource sends Last-Event-ID when it reconnects, to the same URL: it wins over the URL's since.
        let (start, gap) = try await eventStart(request.lastEventID ?? request.query["since"], peer: peer)
        // Subscribed before the first read of the log: no live line between the two is missed.
        let subscription = withLive ? live.subscribe() : nil
        let subscribed = Date()
        let owner = peer.isAdmin ? nil : peer.uid
        let store = queue.store
        let encode = { @Sendable (events: [FeedEvent]) in
            Data(events.map { Self.streamed($0, serverSent: serverSent) }.joined().utf8)
        }
        var reply = ControlReply(status: 200, body: encode((gap.map { [$0] } ?? [])
            + [FeedEvent(.following, fields: ["from_seq": .integer(start + 1)])]))
        reply.headers = [("Content-Type", serverSent ? "text/event-stream" : "application/x-ndjson")]
        let readerBuffer = queue.configuration.events.readerBuffer
        reply.stream = ControlStream { [changes, queue] sink in
            var since = start
            var owners = JobOwners(store: store)
            var catchingUp = false
            // Progress lines wait there until the log shows their job started.
            var hold = LiveLineHold(buffer: Int(readerBuffer), subscribed: subscribed)
            while true {
                var lines: [FeedEvent]
                do {
                    // Live lines taken right after the log is read, and merged into place by time: a change logged
                    // by then is in this batch with every line published before it (its feeder publishes each as it
                    // happens). Taken before the read, a job's last progress line published between the take and
                    // the read could follow its logged end, which the read saw, into the next batch. Not while
                    // catching up on old batches: they wait for the batch of now.
                    let after = since
                    let readBegan = ContinuousClock.now
                    let (logged, more) = try await BlockingWork.run {
                        try store.loggedEvents(after: after, owner: owner, limit: Self.streamBatch, byteBudget: Self.pageBytes)
                    }
                    let readEnded = ContinuousClock.now
                    let taken = more ? .lines([]) : subscription?.take() ?? .lines([])
                    since = logged.last?.sequence ?? since
                    catchingUp = more
                    switch taken {
                    case .lines(let current):
                        let due = hold.release(logged: logged, taken: try await owners.visible(current, to: owner),
                                               readBegan: readBegan, readEnded: readEnded, complete: !catchingUp)
                        lines = Self.merged(logged: logged, live: due)
                    case .dropped(var lost):
                        lost += hold.waiting.count
                        queue.logger.notice("""
                            events: a follower (uid \(peer.uid)) fell \(readerBuffer) bytes behind on live lines and \
                            was dropped (\(lost) lost)
                            """)
                        var dropped = FeedEvent(.dropped, fields: [
                            "reason": .string("this follower's live lines fell more than \(readerBuffer) bytes behind; "
                                + "follow again with since=\(since): nothing logged is lost"),
                        ])
                        // How much went by counts others' lines too: the admin's to know.
                        if peer.isAdmin { dropped.fields["lost"] = .integer(Int64(lost)) }
                        try await sink.send(encode(logged + [dropped]))
                        return
                    }
                } catch let error where !(error is CancellationError) {
                    // The stream ends saying why (the CLI would take a silent end for a daemon gone).
                    queue.logger.warning("events: a follower's stream ends: the event log could not be read: \(error)")
                    try await sink.send(encode([FeedEvent(.dropped, fields: [
                        "reason": .string("the daemon could not read its event log (\(error)); follow again with "
                            + "since=\(since)"),
                    ])]))
                    return
                }
                if !lines.isEmpty { try await sink.send(encode(lines)) }
                try Task.checkCancellation()
                // More of the log to read at once; else until something changes (or a second, for other processes;
                // a tenth while lines wait for their job's start, which a commit of another process does not signal).
                if catchingUp { continue }
                await (subscription?.wake ?? changes).wait(timeout: hold.waiting.isEmpty ? .seconds(1) : .milliseconds(100))
                try Task.checkCancellation()
            }
        }
        return reply
    }

    /// Logged and live events in the order they happened: the logged keep their order, and each live line goes by
    /// its time (in the same millisecond a job's start before its live lines, and its end after them), after the
    /// line before it. A line of a job also goes after the job's `enqueued` and `started` in the batch stamped no
    /// later than itself, and a progress line before the job's end that follows them, whatever the times of other
    /// jobs' changes between them: the log's order is its commits', and a slot handed on has its start, stamped when it began,
    /// committed after changes stamped later. Live lines of different jobs may then change places, never two of
    /// one job.
    ///
    /// Times are compared as the log keeps them, to the nearest millisecond: a live line is stamped to the
    /// nanosecond, and an end a fraction of a millisecond after it can be logged at the millisecond before it (a
    /// job's last progress line then came after its `uploaded`).
    static func merged(logged: [FeedEvent], live: [FeedEvent]) -> [FeedEvent] {
        guard !live.isEmpty else { return logged }
        func millisecond(_ event: FeedEvent) -> Double { StoredDate.millisecond(event.time) }
        func rank(_ event: FeedEvent) -> Int {
            switch event.kind {
            case .enqueued, .started: 0
            case .uploaded, .failed, .cancelled: 2
            default: 1
            }
        }
        func key(_ event: FeedEvent) -> (Double, Int) { (millisecond(event), rank(event)) }
        var ofJob: [JobID: [Int]] = [:]
        for (index, event) in logged.enumerated() {
            if let job = event.job { ofJob[job, default: []].append(index) }
        }
        // Each live line goes before `logged[place]` (after them all at `logged.count`).
        var places: [Int] = []
        places.reserveCapacity(live.count)
        var byTime = 0
        for line in live {
            while byTime < logged.count, key(logged[byTime]) <= key(line) { byTime += 1 }
            var place = byTime
            if let job = line.job, let indices = ofJob[job] {
                let begun = indices.last { rank(logged[$0]) == 0 && millisecond(logged[$0]) <= millisecond(line) }
                let after = begun.map { $0 + 1 } ?? 0
                place = max(place, after)
                if line.kind == .progress {
                    place = min(place, indices.first { $0 >= after && rank(logged[$0]) == 2 } ?? logged.count)
                }
            }
            places.append(place)
        }
        // By place, and in their own order at one place (a job's places never go back, so its lines keep theirs).
        let order = live.indices.sorted { (places[$0], $0) < (places[$1], $1) }
        var merged: [FeedEvent] = []
        merged.reserveCapacity(logged.count + live.count)
        var next = 0
        for (index, event) in logged.enumerated() {
            while next < order.count, places[order[next]] <= index {
                merged.append(live[order[next]])
                next += 1
            }
            merged.append(event)
        }
        return merged + order[next...].map { live[$0] }
    }

    /// The most logged events the stream reads at once.
    static let streamBatch = 1000

    /// An event as the stream writes it: a JSON line, or a server-sent event (`id:` for a logged one).
    static func streamed(_ event: FeedEvent, serverSent: Bool) -> String {
        guard serverSent else { return event.jsonLine + "\n" }
        return (event.sequence.map { "id: \($0)\n" } ?? "") + "event: \(event.kind.rawValue)\ndata: \(event.jsonLine)\n\n"
    }

    /// The owners of the jobs a dropper's live lines name, looked up once each: it sees its own alone (and the
    /// link's, which are no one's).
    private struct JobOwners {
        let store: QueueStore
        /// Each job's owner; -1 for the queue's own user's, or a job gone.
        private var known: [JobID: Int64] = [:]

        init(store: QueueStore) {
            self.store = store
        }

        mutating func visible(_ lines: [LiveEvents.Line], to owner: UInt32?) async throws -> [LiveEvents.Line] {
            guard let owner else { return lines }
            var shown: [LiveEvents.Line] = []
            for line in lines {
                guard let id = line.event.job else {
                    shown.append(line)
                    continue
                }
                if known[id] == nil {
                    if known.count > 10_000 { known.removeAll() }
                    let store = self.store
                    let found = try await BlockingWork.run { (try? store.job(id, holdsInForce: false))??.ownerUID }
                    known[id] = found.map { Int64($0) } ?? -1
                }
                if known[id] == Int64(owner) { shown.append(line) }
            }
            return shown
        }
    }

    /// A completion as the API shows it: the library's `Completion`, with the remote URL redacted as everywhere
    /// outside the library.
    static func completion(_ job: Job) -> [String: Any] {
        let completion = Completion(job)
        return [
            "id": completion.jobID.rawValue,
            "remote_url": URLRedaction.redact(completion.remoteURL),
            "sha256": completion.sha256,
            "size": completion.size,
            "meta": completion.meta,
            "destination": completion.destination,
            "original_name": completion.originalName,
            "uploaded_at": ContractJSON.rfc3339(job.updatedAt),
        ]
    }

    // MARK: Parameters

    /// Whose group a request names: the caller's own; the queue's own user may name a dropper's (`?owner=UID`).
    private func groupOwner(_ request: ControlRequest, peer: ControlPeer) throws -> UInt32? {
        guard let text = request.query["owner"] else { return peer.isAdmin ? nil : peer.uid }
        try requireAdmin(peer, "another user's group")
        guard let uid = UInt32(text) else {
            throw ControlAPIError(400, "bad-request", "owner must be a uid")
        }
        return uid
    }

    /// The patch of `POST /v1/groups/{name}/close`: `{"patch": {"url", "method", "headers", "body"}}` or none. A
    /// dropper's is checked as a sidecar's (`[patch] allowed_urls`) and takes no body of its own.
    private func groupPatch(_ request: ControlRequest, peer: ControlPeer) throws -> PatchTarget? {
        guard !request.body.isEmpty else { return nil }
        guard let object = (try? JSONSerialization.jsonObject(with: request.body)) as? [String: Any],
              Set(object.keys).isSubset(of: ["patch"]) else {
            throw ControlAPIError(400, "bad-request", "the body must be {} or {\"patch\": {\"url\": …}}")
        }
        guard let fields = object["patch"] as? [String: Any] else { return nil }
        guard let url = fields["url"] as? String, Set(fields.keys).isSubset(of: ["url", "method", "headers", "body"]),
              fields["method"] == nil || fields["method"] is String, fields["body"] == nil || fields["body"] is String,
              fields["headers"] == nil || fields["headers"] is [String: String] else {
            throw ControlAPIError(400, "bad-request", "\"patch\" must be {\"url\": …, \"method\", \"headers\", \"body\"} "
                + "with strings (headers: an object of strings)")
        }
        let patch = PatchTarget(url: url, method: fields["method"] as? String, body: fields["body"] as? String,
                                headers: fields["headers"] as? [String: String])
        try PatchAuthority.check(patch)
        if let body = patch.body {
            guard peer.isAdmin else {
                throw ControlAPIError(403, "forbidden", "a group's patch body is the queue's own user's to choose")
            }
            guard let template = try? PatchTarget.Body(body), template.isGroupTemplate else {
                throw UploadQueueError(.invalidArgument, "a group's patch body may use {{group}}, {{urls}} and "
                    + "{{members}} alone: \"\(SafeText.escaped(body))\"")
            }
        }
        if !peer.isAdmin, let why = PatchAuthority.sidecarRefusal(patch, settings: queue.configuration.patch) {
            throw ControlAPIError(403, "forbidden", "the group's patch \(why)")
        }
        return patch
    }

    private func flag(_ text: String?, name: String) throws -> Bool {
        switch text {
        case nil, "false": return false
        case "true": return true
        default: throw ControlAPIError(400, "bad-request", "\(name) must be true or false")
        }
    }

    private func integer(_ text: String?, name: String, range: ClosedRange<Int>) throws -> Int? {
        guard let text else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw ControlAPIError(400, "bad-request", "\(name) must be a whole number from \(range.lowerBound) to "
                + "\(range.upperBound)")
        }
        return value
    }

    /// A timeout in seconds (`30`, `0.5`), at most `longestWait`.
    private func duration(_ text: String?) throws -> Duration? {
        guard let text else { return nil }
        guard let seconds = Double(text), seconds.isFinite, seconds >= 0,
              seconds <= Double(Self.longestWait.components.seconds) else {
            throw ControlAPIError(400, "bad-request", "timeout must be seconds from 0 to "
                + "\(Self.longestWait.components.seconds)")
        }
        return .milliseconds(Int64(seconds * 1000))
    }
}
