import Foundation
import Testing
import Logging
import Synchronization
@testable import UploadQueue

/// `uploadq events` and the control API's event stream: a second process follows the daemon's events through its
/// control socket, a reader that stops reading is dropped without slowing the uploads, the Swift client resumes
/// across a restart, and `--since` replays from the database.
@Suite(.serialized)
struct EventTests {
    /// `uploadq events --follow --json` in the background, writing to a file.
    final class Follower: @unchecked Sendable {
        let child: ChildProcess
        let path: String

        init(_ sandbox: Sandbox, name: String = "events") throws {
            path = sandbox.root + "/\(name).jsonl"
            let output = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            defer { close(output) }
            child = try ChildProcess([BinaryRunner.path, "events", "--follow", "--json", "--config", sandbox.configPath],
                                     executable: BinaryRunner.path, environment: ProcessInfo.processInfo.environment,
                                     input: nil, output: output, errors: output)
        }

        var lines: [[String: Any]] {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }
        }

        func stop() async -> Int32 {
            child.signal(SIGTERM)
            return await child.exit().code
        }
    }

    @Test("a second process following --json during 50 uploads sees every enqueued and uploaded, in order per job; --since replays")
    func followFifty() async throws {
        let sandbox = try Sandbox()
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let follower = try Follower(sandbox)
        let attached = await eventually(timeout: .seconds(10)) { follower.lines.first?["type"] as? String == "following" }
        #expect(attached, "follower wrote: \(follower.lines)")
        for index in 0..<50 {
            try sandbox.makeFile(sandbox.root + "/f", size: 2000 + index * 100, seed: UInt64(index + 1))
            // A name that must stay inside its JSON string.
            #expect(rename(sandbox.root + "/f", sandbox.spool + "/photo \(index)\n\"x\".jpg") == 0)
        }
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
        let uploaded = try await eventually(timeout: .seconds(60)) {
            let jobs = try store.jobs()
            return jobs.count == 50 && jobs.allSatisfy { $0.state == .uploaded }
        }
        #expect(uploaded, "daemon log:\n\(daemon.log.suffix(3000))")
        let seen = await eventually(timeout: .seconds(10)) {
            follower.lines.filter { $0["type"] as? String == "uploaded" }.count == 50
        }
        #expect(seen)
        // A line held back for its job's start goes within a second: one that came after its job's end would show.
        try await Task.sleep(for: LiveLineHold.limit + .milliseconds(300))
        _ = await follower.stop()
        let lines = follower.lines
        let jobs = try store.jobs()
        for job in jobs {
            let mine = lines.enumerated().filter { $0.element["job"] as? String == job.id.rawValue }
            let kinds = mine.map { $0.element["type"] as? String ?? "" }
            #expect(kinds.filter { $0 == "enqueued" }.count == 1 && kinds.filter { $0 == "uploaded" }.count == 1,
                    "\(job.id): \(kinds)")
            let enqueued = kinds.firstIndex(of: "enqueued") ?? .max
            let started = kinds.firstIndex(of: "started") ?? .max
            let done = kinds.firstIndex(of: "uploaded") ?? -1
            #expect(enqueued < started && started < done, "\(job.id): \(kinds)")
            // Its progress between its start and its end (a slot handed on records its start a commit later).
            let progress = kinds.indices.filter { kinds[$0] == "progress" }
            #expect(!progress.isEmpty && progress.allSatisfy { started < $0 && $0 < done }, "\(job.id): \(kinds)")
            let first = try #require(mine.first?.element)
            #expect(first["name"] as? String == job.originalName)
            #expect(mine.last?.element["remote_url"] as? String == job.remoteURL.map(URLRedaction.redact),
                    "\(job.id): \(mine.map { "\($0.element["type"] ?? "") \($0.element["time"] ?? "") \($0.element["seq"] ?? "-")" })")
        }
        // The daemon's count runs without a gap: nothing was lost on the way.
        let sequence = lines.compactMap { $0["seq"] as? Int }
        #expect(sequence == Array((sequence.first ?? 0)..<((sequence.first ?? 0) + sequence.count)), "\(sequence)")

        // --since replays the jobs enqueued after the tenth, from the database.
        let ordered = jobs.map(\.id).sorted { $0.rawValue < $1.rawValue }
        let replay = try await BinaryRunner.run(["events", "--since", ordered[9].rawValue, "--json", "--config", sandbox.configPath])
        #expect(replay.status == 0, "\(replay.stderr)")
        let replayed = replay.stdout.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        let replayedJobs = Set(replayed.compactMap { $0["job"] as? String })
        #expect(replayedJobs == Set(ordered[10...].map(\.rawValue)))
        for id in ordered[10...] {
            let kinds = replayed.filter { $0["job"] as? String == id.rawValue }.map { $0["type"] as? String ?? "" }
            #expect(kinds == ["enqueued", "started", "uploaded"], "\(id): \(kinds)")
        }
        // The text form, for people: one line per event, the name escaped.
        let text = try await BinaryRunner.run(["events", "--lines", "1", "--config", sandbox.configPath])
        #expect(text.stdout.split(separator: "\n").count == 3, "\(text.stdout)")
        #expect(text.stdout.contains("\\n\"x\".jpg"), "\(text.stdout)")
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("a reader that stops reading is dropped with a last line, and does not slow the uploads (measured)")
    func stalledReader() async throws {
        let sandbox = try Sandbox(config: "[events]\nreader_buffer = \"16KiB\"\n")
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let store = QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))

        /// Enqueues `count` small files in one call and returns how long until all of them were uploaded.
        func batch(_ round: Int, count: Int) async throws -> Duration {
            let folder = sandbox.root + "/batch\(round)"
            var paths: [String] = []
            for index in 0..<count {
                paths.append(try sandbox.makeFile(folder + "/f\(index).jpg", size: 200, seed: UInt64(round * 10_000 + index + 1)))
            }
            let start = ContinuousClock.now
            let enqueued = try await BinaryRunner.run(["enqueue"] + paths + ["--config", sandbox.configPath])
            #expect(enqueued.status == 0, "\(enqueued.stderr)")
            let done = try await eventually(timeout: .seconds(120)) {
                try store.summary().counts[.uploaded] == (round + 1) * count
            }
            #expect(done, "daemon log:\n\(daemon.log.suffix(2000))")
            return ContinuousClock.now - start
        }
        // Enough lines to fill the kernel's socket buffers (about 200 KiB) many times over.
        let baseline = try await batch(0, count: 1000)

        // A reader that asks for the stream with its live lines and never reads, with a small receive buffer.
        let reader = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(reader) }
        var small: Int32 = 4096
        setsockopt(reader, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        let address = try #require(UnixSocketAddress.make(sandbox.state + "/api.sock"))
        #expect(UnixSocketAddress.with(address) { connect(reader, $0, $1) } == 0)
        let request = Array("GET /v1/events/stream?live=true HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8)
        #expect(write(reader, request, request.count) == request.count)
        let stalled = try await batch(1, count: 1000)
        print("1000 uploads: \(baseline) without a reader, \(stalled) with one that does not read")
        #expect(stalled < baseline * 2 + .seconds(3), "a stalled reader slowed the uploads: \(baseline) → \(stalled)")

        // What it gets when it reads at last: whole lines, then the `dropped` line, then the end.
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(reader, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // The reads block (up to 5 s each): on a thread of their own.
        let received = await onOwnThread { [reader] in
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(reader, &buffer, buffer.count)
                guard count > 0 else { break }
                received += buffer[0..<count]
            }
            return received
        }
        let body = try #require(Self.dechunked(received), "not a chunked HTTP answer: \(received.prefix(300))")
        let lines = String(decoding: body, as: UTF8.self).split(separator: "\n")
        let objects = lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        #expect(objects.count == lines.count, "a line was cut")
        #expect(objects.first?["type"] as? String == "following")
        #expect(objects.last?["type"] as? String == "dropped", "\(lines.suffix(2))")
        #expect((objects.last?["lost"] as? Int ?? 0) > 0)
        // Nothing logged was skipped before the end: following again from its last seq loses nothing.
        let sequence = objects.compactMap { $0["seq"] as? Int }
        #expect(!sequence.isEmpty && sequence == Array(sequence[0]..<(sequence[0] + sequence.count)), "\(sequence.count) seqs")
        #expect(await eventually(timeout: .seconds(10)) { daemon.log.contains("and was dropped") },
                "daemon log:\n\(daemon.log.suffix(2000))")
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("jobs another process enqueues and cancels reach a follower as enqueued and cancelled")
    func otherProcesses() async throws {
        // A metered link that the tus destination waits out: its jobs stay pending until cancelled.
        let sandbox = try Sandbox(config: """
            [destinations.tus]
            protocol = "tus"
            url = "http://127.0.0.1:1/files/"
            on_metered = "defer"
            [link]
            mode = "metered"
            """)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let follower = try Follower(sandbox)
        #expect(await eventually(timeout: .seconds(10)) { follower.lines.first?["type"] as? String == "following" })
        let file = try sandbox.makeFile(sandbox.root + "/w.jpg", size: 1000, seed: 77)
        let enqueued = try await BinaryRunner.run(["enqueue", "--destination", "tus", file, "--config", sandbox.configPath])
        let id = try #require(JobID(enqueued.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(enqueued.stderr)")
        #expect(await eventually(timeout: .seconds(10)) { follower.lines.contains { $0["job"] as? String == id.rawValue } })
        let cancelled = try await BinaryRunner.run(["cancel", id.rawValue, "--config", sandbox.configPath])
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        let seen = await eventually(timeout: .seconds(10)) {
            follower.lines.contains { $0["job"] as? String == id.rawValue && $0["type"] as? String == "cancelled" }
        }
        _ = await follower.stop()
        #expect(seen, "\(follower.lines)")
        let kinds = follower.lines.filter { $0["job"] as? String == id.rawValue }.map { $0["type"] as? String ?? "" }
        #expect(kinds == ["enqueued", "cancelled"], "\(kinds)")
        #expect(follower.lines.first { $0["type"] as? String == "enqueued" }?["name"] as? String == "w.jpg")
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("a follower holds a progress line back until the log shows its job started (or ended), at most a second; other lines go at once")
    func liveLineHold() {
        let at = Date()
        let (handed, fresh, before, ended) = (JobID.generate(at: at), JobID.generate(at: at), JobID.generate(at: at),
                                              JobID.generate(at: at))
        let start = ContinuousClock.now
        func line(_ job: JobID?, _ kind: FeedEvent.Kind = .progress, after: Duration = .zero) -> LiveEvents.Line {
            LiveEvents.Line(event: FeedEvent(kind, job: job), published: start + after, size: 100)
        }
        func logged(_ kind: FeedEvent.Kind, _ job: JobID) -> FeedEvent { FeedEvent(kind, job: job) }
        func release(_ hold: inout LiveLineHold, _ logged: [FeedEvent], _ taken: [LiveEvents.Line], at: Duration,
                     complete: Bool = true) -> [JobID?] {
            hold.release(logged: logged, taken: taken, readBegan: start + at, readEnded: start + at + .milliseconds(1),
                         complete: complete).map(\.job)
        }
        var hold = LiveLineHold(buffer: 10_000, subscribed: at)
        // `handed` was enqueued; its slot was handed on and it sent its bytes before its start reached the log.
        // `fresh` was enqueued, started and sent during the read (the read saw none of it). `before` was running
        // before the follower came. `ended`'s end is in the batch: its last line goes before it.
        var due = release(&hold, [logged(.enqueued, handed), logged(.uploaded, ended)],
                          [line(handed), line(fresh), line(before), line(ended), line(nil, .link),
                           line(fresh, .unverified)], at: .milliseconds(5))
        #expect(due == [ended, nil, fresh], "the ended job's line, the link's, a line of another kind")
        #expect(hold.waiting.map(\.event.job) == [handed, fresh, before])
        // The next batch logs `handed`'s start and `fresh`'s enqueue and start: their lines go, merged after them.
        due = release(&hold, [logged(.started, handed), logged(.enqueued, fresh), logged(.started, fresh)], [],
                      at: .milliseconds(40))
        #expect(due == [handed, fresh])
        #expect(hold.waiting.map(\.event.job) == [before])
        // From then on their lines go at once. A batch that did not reach the end of the log releases nothing by
        // time; an unknown job's line goes once it waited a second, and so do the lines after it.
        due = release(&hold, [], [line(handed, after: .seconds(1))], at: .milliseconds(999))
        #expect(due == [handed])
        #expect(release(&hold, [], [], at: .seconds(1), complete: false).isEmpty)
        due = release(&hold, [], [line(before, after: .seconds(1))], at: .seconds(1))
        #expect(due == [before, before])
        #expect(hold.waiting.isEmpty)
        // A job that failed waits for its next start again (its line is fresh: not released by time).
        due = release(&hold, [logged(.failed, handed)], [], at: .seconds(2))
        due = release(&hold, [], [line(handed, after: .seconds(2))], at: .seconds(2))
        #expect(due.isEmpty && hold.waiting.map(\.event.job) == [handed])
        due = release(&hold, [logged(.started, handed)], [], at: .seconds(2) + .milliseconds(10))
        #expect(due == [handed])
        // Catching up: an end found by a batch that took no live lines drops its job's lines published before
        // that read ended; a retry's line published after goes its way.
        due = release(&hold, [logged(.failed, fresh)], [], at: .seconds(3), complete: false)
        due = release(&hold, [logged(.started, fresh)],
                      [line(fresh, after: .seconds(2)), line(fresh, after: .seconds(3) + .milliseconds(5))],
                      at: .seconds(4))
        #expect(due == [fresh], "the retry's line")
        // Held lines past the follower's buffer all go, out of place rather than piling up; lines that go at once
        // do not count.
        var small = LiveLineHold(buffer: 250, subscribed: at)
        #expect(release(&small, [], [line(fresh), line(handed), line(nil, .link), line(nil, .link)], at: .zero)
                    .count == 2)
        #expect(small.waiting.count == 2)
        #expect(release(&small, [], [line(before)], at: .zero).count == 3)
        // A subscriber's lines carry the instant of their publishing, in order, and their size.
        let events = LiveEvents(readerBuffer: 4096)
        let follower = events.subscribe()
        events.publish(FeedEvent(.progress, job: handed))
        events.publish(FeedEvent(.progress, job: fresh))
        guard case .lines(let taken) = follower.take(), taken.count == 2 else {
            Issue.record("the subscriber did not get its two lines")
            return
        }
        #expect(taken[0].published <= taken[1].published && taken[0].published >= start)
        #expect(taken.map(\.event.job) == [handed, fresh])
        #expect(taken[0].size == taken[0].event.jsonLine.utf8.count + 1)
    }

    @Test("live lines: each subscriber gets them in order; one that falls behind its buffer is dropped with the count it lost, the others keep theirs")
    func liveSubscribers() {
        let live = LiveEvents(readerBuffer: 4096)
        let slow = live.subscribe()
        var fast: LiveEvents.Subscription? = live.subscribe()
        #expect(live.count == 2)
        let id = JobID.generate(at: Date())
        var taken: [FeedEvent] = []
        for confirmed in 1...100 {
            live.publish(FeedEvent(.progress, job: id, fields: ["confirmed": .integer(Int64(confirmed))]))
            if case .lines(let lines)? = fast?.take() { taken += lines.map(\.event) }
        }
        #expect(taken.map { $0.fields["confirmed"] } == (1...100).map { FeedEvent.Value.integer(Int64($0)) })
        // 100 lines of about 130 bytes do not fit in 4 KiB: the slow one lost every one of them, and is told so.
        guard case .dropped(let lost) = slow.take() else {
            Issue.record("the slow subscriber was not dropped")
            return
        }
        #expect(lost == 100)
        #expect(slow.take() == .dropped(lost: 100), "a dropped subscriber stays dropped")
        fast = nil
        #expect(live.count == 1, "a subscription let go leaves")
        // The wake-ups: a publish and a signal of the durable log both wake a subscriber's follower.
        let rung = Mutex(0)
        let changed = WakeSignal(remembers: false, alsoSignalling: { rung.withLock { $0 += 1 } })
        changed.signal()
        #expect(rung.withLock { $0 } == 1)
    }

    @Test("the Swift client follows the events across a daemon restart: every logged event once, in order, with its live lines")
    func clientFollowsAcrossRestart() async throws {
        let sandbox = try Sandbox(config: "[hooks]\non_uploaded = [\"/bin/true\"]\n")
        var daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let configuration = try ConfigurationLoader.load(path: sandbox.configPath)
        let client = UploadQueueClient(configuration: configuration)
        final class Seen: Sendable {
            let events = Mutex<[FeedEvent]>([])
            func withLock<T>(_ body: (inout [FeedEvent]) -> T) -> T { events.withLock { body(&$0) } }
        }
        let seen = Seen()
        let follower = Task {
            for try await event in client.events(since: 0, live: true) { seen.withLock { $0.append(event) } }
        }
        defer { follower.cancel() }
        func upload(_ name: String, seed: UInt64) async throws -> JobID {
            let file = try sandbox.makeFile(sandbox.root + "/\(name)", size: 40_000, seed: seed)
            let run = try await BinaryRunner.run(["enqueue", file, "--config", sandbox.configPath])
            return try #require(JobID(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(run.stderr)")
        }
        func uploaded(_ id: JobID) -> Bool {
            seen.withLock { $0.contains { $0.job == id && $0.kind == .uploaded } }
        }
        let first = try await upload("a.jpg", seed: 1)
        #expect(await eventually(timeout: .seconds(20)) { uploaded(first) })
        // A live line, which the log does not keep: the upload's hook, run after it.
        #expect(await eventually(timeout: .seconds(20)) {
            seen.withLock { $0.contains { $0.job == first && $0.kind == .hook && $0.sequence == nil } }
        }, "no live hook line")
        _ = await daemon.terminate()
        // Enqueued while no daemon runs: logged all the same, and read once it is back.
        let second = try await upload("b.jpg", seed: 2)
        daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        #expect(await eventually(timeout: .seconds(20)) { uploaded(second) }, "\(seen.withLock { $0.map(\.jsonLine) })")
        let sequence = seen.withLock { $0.compactMap(\.sequence) }
        #expect(sequence == Array(1...Int64(sequence.count)), "\(sequence)")
        let kinds = seen.withLock { $0.filter { $0.job == second && $0.sequence != nil }.map(\.kind) }
        #expect(kinds == [.enqueued, .started, .uploaded], "\(kinds)")
        // A follower's number past the log is refused, not waited on.
        let refused = try await BinaryRunner.run(["events", "--follow", "--from-seq", "999999", "--config",
                                                  sandbox.configPath])
        #expect(refused.status != 0 && refused.stderr.contains("past the last event"), "\(refused.stderr)")
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("--follow without a daemon exits 4; the throttle lets one progress line a second through, and the last")
    func pieces() async throws {
        let sandbox = try Sandbox()
        let result = try await BinaryRunner.run(["events", "--follow", "--config", sandbox.configPath])
        #expect(result.status == 4, "\(result.stderr)")
        #expect(result.stderr.contains("no daemon to follow"))

        var throttle = ProgressThrottle()
        let id = JobID.generate(at: Date())
        let start = ContinuousClock.now
        let answers = [(false, 0), (false, 400), (true, 500), (false, 1600)].map { done, milliseconds in
            throttle.admits(id, done: done, at: start + .milliseconds(milliseconds))
        }
        #expect(answers == [true, false, true, true])
        throttle.ended(id)
        #expect(throttle.lastSent.isEmpty)

        let ids = [JobID.generate(at: Date()), JobID.generate(at: Date())]
        let line = FeedEvent(.enqueued, job: ids[0], fields: ["name": .string("a\n\"b\"\u{1B}.jpg")]).jsonLine
        #expect(!line.contains("\n") && !line.unicodeScalars.contains("\u{1B}"))
        let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect(object?["name"] as? String == "a\n\"b\"\u{1B}.jpg")
        // A line read back is the event it was: its kind, job, seq, time and typed fields.
        var event = FeedEvent(.failed, job: ids[1], time: Date(timeIntervalSince1970: 1_800_000_000.123), fields: [
            "error": .string("HTTP 503"), "permanent": .boolean(false), "attempt": .integer(3), "retry_at": .null,
        ])
        event.sequence = 42
        #expect(FeedEvent(jsonLine: event.jsonLine)?.jsonLine == event.jsonLine)
        #expect(FeedEvent(jsonLine: #"{"type":"from-a-newer-daemon","time":"2026-01-01T00:00:00.000Z"}"#) == nil)
        // Logged and live lines merged by time: in one millisecond a start before the progress, the end after it.
        let at = Date(timeIntervalSince1970: 1_800_000_000)
        let logged = [FeedEvent(.started, job: ids[0], time: at), FeedEvent(.uploaded, job: ids[0], time: at + 0.002)]
        let live = [FeedEvent(.progress, job: ids[0], time: at), FeedEvent(.link, time: at + 0.001),
                    FeedEvent(.progress, job: ids[0], time: at + 0.002), FeedEvent(.patch, job: ids[0], time: at + 0.003)]
        #expect(ControlAPI.merged(logged: logged, live: live).map(\.kind)
                == [.started, .progress, .link, .progress, .uploaded, .patch])
        // An end 0.2 ms after the last progress line, logged at the millisecond before both (the log rounds to the
        // nearest one): the progress line still comes first.
        let rounded = [FeedEvent(.uploaded, job: ids[1], time: at)]
        let late = [FeedEvent(.progress, job: ids[1], time: at + 0.0003)]
        #expect(ControlAPI.merged(logged: rounded, live: late).map(\.kind) == [.progress, .uploaded])
        // A slot handed on: its start, stamped when it began, committed after another job's enqueue stamped later.
        // Its progress still comes after its start.
        let handedOn = [FeedEvent(.enqueued, job: ids[1], time: at + 0.005), FeedEvent(.started, job: ids[0], time: at)]
        let sent = [FeedEvent(.progress, job: ids[0], time: at + 0.002)]
        #expect(ControlAPI.merged(logged: handedOn, live: sent).map(\.kind) == [.enqueued, .started, .progress])
        // A line held behind its job's start holds no other job's line past that job's end.
        let (held, other) = (ids[0], ids[1])
        let cancelledFirst = [FeedEvent(.cancelled, job: other, time: at + 0.004), FeedEvent(.started, job: held, time: at)]
        let both = [FeedEvent(.progress, job: held, time: at + 0.002), FeedEvent(.progress, job: other, time: at + 0.003)]
        let placed = ControlAPI.merged(logged: cancelledFirst, live: both).map { "\($0.kind.rawValue) \($0.job == held ? "held" : "other")" }
        #expect(placed == ["progress other", "cancelled other", "started held", "progress held"], "\(placed)")
        // An attempt's line stays before its end: a later attempt's start in the batch does not hold it.
        let retried = [FeedEvent(.started, job: held, time: at), FeedEvent(.failed, job: held, time: at + 0.002),
                       FeedEvent(.started, job: held, time: at + 0.005)]
        let firstTry = [FeedEvent(.progress, job: held, time: at + 0.001)]
        #expect(ControlAPI.merged(logged: retried, live: firstTry).map(\.kind) == [.started, .progress, .failed, .started])
        // A line of another kind keeps its place after its job's start too, and after the job's progress.
        let unverified = [FeedEvent(.progress, job: held, time: at + 0.002), FeedEvent(.unverified, job: held, time: at + 0.003)]
        #expect(ControlAPI.merged(logged: handedOn, live: unverified).map(\.kind)
                == [.enqueued, .started, .progress, .unverified])
        // The stream's two forms: a JSON line, or a server-sent event whose id is the logged event's seq.
        #expect(ControlAPI.streamed(event, serverSent: false) == event.jsonLine + "\n")
        #expect(ControlAPI.streamed(event, serverSent: true) == "id: 42\nevent: failed\ndata: \(event.jsonLine)\n\n")
    }

    /// The body of a chunked HTTP/1.1 answer (head and chunk sizes taken off); nil when it is not one.
    static func dechunked(_ bytes: [UInt8]) -> [UInt8]? {
        let crlf: [UInt8] = [13, 10]
        guard let headEnd = bytes.indices.first(where: { bytes[$0...].starts(with: crlf + crlf) }) else { return nil }
        let head = String(decoding: bytes[..<headEnd], as: UTF8.self).lowercased()
        guard head.contains("transfer-encoding: chunked") else { return nil }
        var body: [UInt8] = []
        var at = headEnd + 4
        while at < bytes.count {
            guard let lineEnd = bytes[at...].indices.first(where: { bytes[$0...].starts(with: crlf) }),
                  let size = Int(String(decoding: bytes[at..<lineEnd], as: UTF8.self), radix: 16) else { return nil }
            if size == 0 { return body }
            at = lineEnd + 2
            guard at + size <= bytes.count else { return body + bytes[at...] }
            body += bytes[at..<(at + size)]
            at += size + 2
        }
        return body
    }
}
