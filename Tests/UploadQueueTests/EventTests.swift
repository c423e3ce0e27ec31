import Foundation
import Testing
import Logging
@testable import UploadQueue

/// `uploadq events`: a second process follows the daemon's event stream through its socket, a reader that stops
/// reading is dropped without slowing the uploads, and `--since` replays from the database.
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
            let first = try #require(mine.first?.element)
            #expect(first["name"] as? String == job.originalName)
            #expect(mine.last?.element["remote_url"] as? String == job.remoteURL.map(URLRedaction.redact))
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
        let baseline = try await batch(0, count: 300)

        // A reader that connects and never reads, with a small receive buffer.
        let reader = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(reader) }
        var small: Int32 = 4096
        setsockopt(reader, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        let address = try #require(UnixSocketAddress.make(sandbox.state + "/events.sock"))
        #expect(UnixSocketAddress.with(address) { connect(reader, $0, $1) } == 0)
        let stalled = try await batch(1, count: 300)
        print("300 uploads: \(baseline) without a reader, \(stalled) with one that does not read")
        #expect(stalled < baseline * 2 + .seconds(3), "a stalled reader slowed the uploads: \(baseline) → \(stalled)")
        let dropped = await eventually(timeout: .seconds(10)) { daemon.log.contains("and was dropped") }
        #expect(dropped, "daemon log:\n\(daemon.log.suffix(2000))")

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
        let lines = String(decoding: received, as: UTF8.self).split(separator: "\n")
        let objects = lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        #expect(objects.count == lines.count, "a line was cut")
        #expect(objects.last?["type"] as? String == "dropped", "\(lines.suffix(2))")
        #expect((objects.last?["lost"] as? Int ?? 0) > 0)
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

    @Test("the feed serves at most 64 readers, turns more away, and after stop() closes them; a late publish is harmless")
    func feedLimits() async throws {
        let sandbox = try Sandbox()
        let path = sandbox.root + "/events.sock"
        let feed = try EventFeed(path: path, group: nil, readerBuffer: 64 << 10, logger: .init(label: "test"))
        var mode = stat()
        #expect(stat(path, &mode) == 0 && mode.st_mode & 0o777 == 0o600)
        var clients: [EventFeedClient] = []
        var iterators: [EventLines.AsyncIterator] = []
        for _ in 0..<(EventFeed.maximumReaders + 6) {
            let client = try EventFeedClient(path: path)
            clients.append(client)
            iterators.append(client.lines().makeAsyncIterator())
        }
        var served = 0
        var turnedAway = 0
        for index in iterators.indices {
            let line = await iterators[index].next() ?? ""
            if line.contains("\"following\"") {
                served += 1
            } else if line.contains("\"dropped\"") {
                turnedAway += 1
                #expect(await iterators[index].next() == nil)
            }
        }
        #expect(served == EventFeed.maximumReaders && turnedAway == 6)
        // Those turned away were told why.
        let extra = try EventFeedClient(path: path)
        var told = extra.lines().makeAsyncIterator()
        #expect(await told.next()?.contains("serves at most 64 readers") == true)
        feed.publish(FeedEvent(.link, fields: ["class": .string("metered")]))
        #expect(await iterators[0].next()?.contains("\"seq\":1") == true)
        feed.stop()
        #expect(await iterators[0].next() == nil, "the stream did not end at stop()")
        feed.publish(FeedEvent(.link))  // after stop: nothing written anywhere
        #expect(!FileManager.default.fileExists(atPath: path))
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
        #expect(WakeSocket.news(in: Array("enqueued \(ids[0]) \(ids[1])".utf8)[...]) == WakeSocket.News(enqueued: ids))
        #expect(WakeSocket.news(in: Array("cancelled \(ids[1])".utf8)[...]) == WakeSocket.News(cancelled: [ids[1]]))
        #expect(WakeSocket.news(in: Array("wake".utf8)[...]).isEmpty)
        let line = FeedEvent(.enqueued, job: ids[0], fields: ["name": .string("a\n\"b\"\u{1B}.jpg")]).jsonLine
        #expect(!line.contains("\n") && !line.unicodeScalars.contains("\u{1B}"))
        let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect(object?["name"] as? String == "a\n\"b\"\u{1B}.jpg")
    }
}
