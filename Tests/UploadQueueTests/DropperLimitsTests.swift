import Foundation
import Synchronization
import Testing
@testable import UploadQueue

/// Strangers share one daemon: what they share (the slots, the disk, the database, the API's connections and
/// memory, the event log's sequence) is bounded, and no dropper can fill, starve, stall or read past another. Every
/// test runs a real daemon, its droppers as real users (`Dropper`), through the spool or the control API.
@Suite(.serialized) struct DropperLimitsTests {
    func store(_ sandbox: Sandbox) throws -> QueueStore {
        QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
    }

    /// The control API's keys for the droppers' group, and a spool.
    static func apiKeys(_ extra: String = "") -> String {
        """
        [api]
        socket = "api.sock"
        group = "\(Dropper.group)"
        \(extra)
        """
    }

    /// A destination `dav` at `url` on a link that is offline (so nothing goes, and the waits stay as enqueued),
    /// with the control API.
    static func offlineDestination(_ url: String) -> String {
        """
        [destinations.dav]
        protocol = "http-put"
        url = "\(url)"
        [link]
        mode = "offline"
        """ + "\n" + apiKeys()
    }

    /// A folder of `dropper`'s under the sandbox (which droppers may traverse once the spool is opened).
    static func home(of dropper: Dropper, in sandbox: Sandbox) throws -> String {
        let home = sandbox.root + "/home-" + dropper.name
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        #expect(chown(home, dropper.uid, 0) == 0 && chmod(home, 0o700) == 0)
        return home
    }

    @Test("bob's one photo, dropped behind alice's 40, lands within the transfers in flight and the next round of owners")
    func fairShare() async throws {
        // A slowed link: 64 KiB/s for two transfers at once; alice's 40 photos of 16 KiB take about ten seconds.
        let sandbox = try Sandbox(bandwidth: 64 << 10, concurrency: 2)
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice, bob = try Dropper.bob
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        try await alice.run("""
            cd '\(sandbox.spool)' && for i in $(seq 1 40); do head -c 16384 /dev/urandom > .a$i.tmp && mv .a$i.tmp a$i.jpg; done
            """)
        let store = try store(sandbox)
        let queued = try await eventually(timeout: .seconds(30)) {
            try store.jobs().count == 40 && (try store.jobs(state: .uploaded).count) >= 2
        }
        #expect(queued, "daemon log:\n\(daemon.log.suffix(3000))")
        try await bob.drop("b.jpg", size: 16384, into: sandbox.spool)
        let landed = try await eventually(timeout: .seconds(60)) {
            try store.jobs().contains { $0.ownerUID == bob.uid && $0.state == .uploaded }
        }
        #expect(landed, "daemon log:\n\(daemon.log.suffix(3000))")
        // In the log's commit order: how many of alice's were uploaded after bob's was enqueued and before it was.
        let events = try store.loggedEvents(after: 0, owner: nil, limit: 10_000).events
        let bobs = try #require(try store.jobs().first { $0.ownerUID == bob.uid }).id
        let enqueued = try #require(events.firstIndex { $0.job == bobs && $0.kind == .enqueued })
        let uploaded = try #require(events.firstIndex { $0.job == bobs && $0.kind == .uploaded })
        let before = events[enqueued..<uploaded].filter { $0.kind == .uploaded }.count
        let pendingThen = 40 - events[..<enqueued].filter { $0.kind == .uploaded }.count
        // Two in flight, four claimed ahead for their slots, then bob's turn.
        #expect(before <= 2 + 4 + 1, "\(before) of alice's went first, of the \(pendingThen) she had waiting")
        #expect(pendingThen >= 20, "alice still had most of hers waiting: \(pendingThen)")
        #expect(await daemon.terminate() < .seconds(10))
    }

    @Test("while other owners' turns come first, show and status say fair-share; the owner alone waits for a slot")
    func fairShareReason() async throws {
        // Nothing goes (the link is offline for network destinations), so the waits are as enqueued.
        let sandbox = try Sandbox(config: Self.offlineDestination("http://127.0.0.1:9/up/{name}"), concurrency: 1,
                                  spool: #"destination = "dav""#)
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice, bob = try Dropper.bob
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        for index in 1...3 { try await alice.drop("a\(index).jpg", size: 2000, into: sandbox.spool) }
        let store = try store(sandbox)
        #expect(try await eventually { try store.jobs().count == 3 })
        try await bob.drop("b.jpg", size: 2000, into: sandbox.spool)
        #expect(try await eventually { try store.jobs().count == 4 })
        // Offline, no slot is busy: each waits for the link, not its turn.
        let show = try await BinaryRunner.run(["list", "--json", "--config", sandbox.configPath])
        #expect(show.stdout.contains("\"offline\"") && !show.stdout.contains("fair-share"), "\(show.stdout)")
        _ = await daemon.terminate()
        // The holds as a runner records them when every slot is busy: alice's later ones wait for bob's turn.
        try store.recordHolds(QueueHolds([.init(scope: QueueHolds.wholeQueue, reason: .concurrency)]))
        let jobs = try store.jobs().sorted { $0.id < $1.id }
        let reasons = jobs.map { "\($0.ownerUID == bob.uid ? "bob" : "alice"):\($0.waitingReason?.rawValue ?? "-")" }
        #expect(reasons == ["alice:concurrency", "alice:fair-share", "alice:fair-share", "bob:concurrency"], "\(reasons)")
        #expect(try store.summary().waiting == [.concurrency: 2, .fairShare: 2])
    }

    @Test("a file grown to 100 GiB while it is taken: nothing past the size checked is written, the disk keeps its floor")
    func growthAfterHandOver() async throws {
        let sandbox = try Sandbox(config: Self.apiKeys(), limits: #"min_free_space = "16MiB""#,
                                  spool: #"max_file_size = "64MiB""#)
        try Dropper.openSpool(of: sandbox)
        let disk = try await TmpfsMount(at: sandbox.state, size: "64m")
        let alice = try Dropper.alice
        let (daemon, socket) = try await ControlAPITests.daemon(sandbox, socket: sandbox.root + "/api.sock")
        let home = try Self.home(of: alice, in: sandbox)
        try await alice.run("head -c 4194304 /dev/urandom > '\(home)/grows.jpg'")
        // Alice flips her file between 4 MiB and 100 GiB (sparse: no room taken on her disk) as fast as she can.
        let flipper = Task {
            try await alice.run("""
                end=$(($(date +%s) + 6)); while [ $(date +%s) -lt $end ]; do \
                truncate -s 100G '\(home)/grows.jpg'; truncate -s 4M '\(home)/grows.jpg'; done
                """)
        }
        // Meanwhile the state disk and the blobs are watched.
        let watching = Task { () -> (lowest: Int64, largestBlob: Int64) in
            var lowest = Int64.max, largest: Int64 = 0
            while !Task.isCancelled {
                if let space = DiskSpace.of(path: disk.path) { lowest = min(lowest, space.available) }
                for name in (try? FileManager.default.contentsOfDirectory(atPath: disk.path + "/blobs")) ?? [] {
                    largest = max(largest, (try? FileFingerprint.of(path: disk.path + "/blobs/" + name).size) ?? 0)
                }
                try? await Task.sleep(for: .milliseconds(5))
            }
            return (lowest, largest)
        }
        var answers: [Int] = []
        for _ in 0..<12 {
            let answer = try await ControlAPITests.curl(socket, "POST", "/v1/jobs", body: #"{"path": "\#(home)/grows.jpg"}"#,
                                                        as: alice)
            answers.append(answer.status)
        }
        _ = try await flipper.value
        watching.cancel()
        let (lowest, largest) = await watching.value
        #expect(largest <= 4 << 20, "a blob grew past the 4 MiB checked: \(largest)")
        #expect(lowest >= 16 << 20, "the state disk went below min_free_space: \(lowest) bytes free")
        // Each refused as changed (409), too large or sparse (422), for room (507), or taken at the 4 MiB examined
        // (201, 200).
        #expect(answers.allSatisfy { [200, 201, 409, 422, 507].contains($0) }, "\(answers)")
        for job in try store(sandbox).jobs() { #expect(job.size == 4 << 20, "\(job.id): \(job.size)") }
        #expect(FileManager.default.fileExists(atPath: home + "/grows.jpg"), "the file is kept")
        #expect(daemon.isRunning)
        _ = await daemon.terminate()
    }

    @Test("the API applies the spool's rules to droppers: size, sparse, a file they could not open themselves, after")
    func apiAppliesTheSpoolsRules() async throws {
        let sandbox = try Sandbox(config: Self.apiKeys(), spool: #"max_file_size = "1MiB""#)
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice, bob = try Dropper.bob
        let (daemon, socket) = try await ControlAPITests.daemon(sandbox, socket: sandbox.root + "/api.sock")
        let home = try Self.home(of: alice, in: sandbox)
        try await alice.run("""
            head -c 2097152 /dev/urandom > '\(home)/large.jpg' && truncate -s 50M '\(home)/sparse.jpg' \
            && head -c 1000 /dev/urandom > '\(home)/fine.jpg'
            """)
        for (name, words) in [("large.jpg", "max_file_size"), ("sparse.jpg", "sparse")] {
            let answer = try await ControlAPITests.curl(socket, "POST", "/v1/jobs", body: #"{"path": "\#(home)/\#(name)"}"#,
                                                        as: alice)
            #expect(answer.status == 422 && answer.body.contains(words), "\(name): \(answer)")
        }
        // Her own file, in a folder only root may enter: the daemon could read it, she could not.
        let closed = sandbox.root + "/closed"
        try FileManager.default.createDirectory(atPath: closed, withIntermediateDirectories: true)
        #expect(chmod(closed, 0o700) == 0)
        try FileManager.default.copyItem(atPath: home + "/fine.jpg", toPath: closed + "/hers.jpg")
        #expect(chown(closed + "/hers.jpg", alice.uid, 0) == 0)
        let unreachable = try await ControlAPITests.curl(socket, "POST", "/v1/jobs",
                                                         body: #"{"path": "\#(closed)/hers.jpg"}"#, as: alice)
        #expect(unreachable.status == 403, "\(unreachable)")
        // Root's own enqueue of a /proc file (its stack, which the dropper itself could not read): refused unread.
        let proc = try await ControlAPITests.curl(socket, "POST", "/v1/jobs", body: #"{"path": "/proc/1/stack"}"#)
        #expect(proc.status == 422 && ControlAPITests.errorCode(proc.body) == "not-regular-file", "\(proc)")
        let fine = try await ControlAPITests.curl(socket, "POST", "/v1/jobs", body: #"{"path": "\#(home)/fine.jpg"}"#,
                                                  as: alice)
        #expect(fine.status == 201, "\(fine)")
        let alicesJob = try #require(ControlAPITests.object(fine.body)["id"] as? String)
        // Bob's file after alice's job: refused at once, through the API as through the spool.
        let bobsHome = try Self.home(of: bob, in: sandbox)
        try await bob.run("head -c 1000 /dev/urandom > '\(bobsHome)/b.jpg'")
        let after = try await ControlAPITests.curl(socket, "POST", "/v1/jobs",
                                                   body: #"{"path": "\#(bobsHome)/b.jpg", "after": ["\#(alicesJob)"]}"#,
                                                   as: bob)
        #expect(after.status == 422 && ControlAPITests.errorCode(after.body) == "unknown-prerequisite", "\(after)")
        try await bob.run("""
            cd '\(sandbox.spool)' && printf '{"after": ["\(alicesJob)"]}' > .s && mv .s c.jpg.uploadq.json \
            && head -c 1000 /dev/urandom > .c && mv .c c.jpg
            """)
        let rejected = await eventually(timeout: .seconds(20)) {
            FileManager.default.fileExists(atPath: sandbox.spool + "/.rejected/c.jpg.reason.txt")
        }
        #expect(rejected, "daemon log:\n\(daemon.log.suffix(3000))")
        let reason = (try? String(contentsOfFile: sandbox.spool + "/.rejected/c.jpg.reason.txt", encoding: .utf8)) ?? ""
        #expect(reason.contains("no job of yours"), "\(reason)")
        #expect(!daemon.log.contains("cannot take c.jpg yet"), "tried again instead of rejected")
        _ = await daemon.terminate()
    }

    @Test("oversized meta is refused at every door; a dropper's largest listing is paged and grows the RSS by under 8 MiB")
    func boundedValuesAndListings() async throws {
        let keys = (0..<4).map { "\"k\($0)\"" }.joined(separator: ", ")
        let sandbox = try Sandbox(config: Self.apiKeys(#"idle_timeout = "3s""#), spool: "sidecar_meta_keys = [\(keys)]")
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice
        let (daemon, socket) = try await ControlAPITests.daemon(sandbox, socket: sandbox.root + "/api.sock")
        let home = try Self.home(of: alice, in: sandbox)
        try await alice.run("for i in $(seq 1 300); do head -c 1000 /dev/urandom > '\(home)'/f$i.jpg; done")
        let value = String(repeating: "v", count: 3900)
        let full = (0..<4).map { "\"k\($0)\": \"\(value)\"" }.joined(separator: ", ")
        // 50 with a value past 4 KiB: each refused, nothing queued.
        var refused = 0
        for index in 1...50 {
            let body = #"{"path": "\#(home)/f\#(index).jpg", "meta": {"k0": "\#(value + value)"}}"#
            let answer = try await ControlAPITests.curl(socket, "POST", "/v1/jobs", body: body, as: alice)
            if answer.status == 422, answer.body.contains("4 KiB") { refused += 1 }
        }
        #expect(refused == 50)
        #expect(try store(sandbox).jobs().isEmpty)
        // 300 with 15.6 KiB of meta each (within the bounds), in batches.
        for first in stride(from: 1, through: 300, by: 50) {
            let items = (first..<first + 50).map { #"{"path": "\#(home)/f\#($0).jpg", "meta": {\#(full)}}"# }
            let answer = try await ControlAPITests.curl(socket, "POST", "/v1/jobs/batch",
                                                        body: #"{"jobs": [\#(items.joined(separator: ", "))]}"#, as: alice)
            #expect(answer.status == 200 && !answer.body.contains("\"error\""), "\(answer.body.prefix(500))")
        }
        #expect(try store(sandbox).jobs().count == 300)
        // Her largest listing, once the uploads are done (what the transfers hold is not the listing's) and the
        // daemon's peak is reset to what it holds now.
        let idle = try await eventually(timeout: .seconds(60)) { try store(sandbox).jobs(state: .uploaded).count == 300 }
        #expect(idle, "daemon log:\n\(daemon.log.suffix(2000))")
        let before = try Self.resetPeak(daemon.pid)
        var pages = 0, listed = 0
        var cursor: String?
        repeat {
            let target = "/v1/jobs?limit=100000" + (cursor.map { "&before=\($0)" } ?? "")
            let page = try await ControlAPITests.curl(socket, "GET", target, as: alice)
            let object = ControlAPITests.object(page.body)
            listed += (object["jobs"] as? [Any])?.count ?? 0
            cursor = object["next"] as? String
            pages += 1
            #expect(page.body.utf8.count < 2 << 20, "a page of \(page.body.utf8.count) bytes")
        } while cursor != nil && pages < 50
        #expect(listed == 300 && pages > 1, "\(listed) jobs in \(pages) pages")
        let grown = try Self.peakKiB(daemon.pid) - before
        #expect(grown < 8 << 10, "the listing grew the daemon's peak RSS by \(grown) KiB")
        // Thirty listings pipelined on one connection, none read: one answer at a time waits for her, and the
        // connection is closed once she has taken nothing for idle_timeout.
        let pipelined = try await alice.run("""
            python3 -c "
            import socket, time
            s = socket.socket(socket.AF_UNIX); s.connect('\(socket)')
            s.sendall(b'GET /v1/jobs?limit=1000 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' * 30)
            time.sleep(8); s.setblocking(False)
            got = 0
            try:
                while True:
                    data = s.recv(1 << 20)
                    if not data: break
                    got += len(data)
            except BlockingIOError:
                print('open'); raise SystemExit
            print('closed', got)
            "
            """)
        #expect(pipelined.1.hasPrefix("closed"), "\(pipelined.1)")
        // A slow reader that takes some every moment gets its whole page, however long past idle_timeout it reads.
        // (On a Unix socket the receive buffer size means nothing: the daemon's send buffer bounds what is in
        // flight, and the reader's 100 ms pauses make the write take seconds.)
        let slow = try await alice.run("""
            python3 -c "
            import socket, time
            s = socket.socket(socket.AF_UNIX); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect('\(socket)')
            s.sendall(b'GET /v1/jobs?limit=1000 HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')
            start, got = time.monotonic(), b''
            while True:
                data = s.recv(16384)
                if not data: break
                got += data
                time.sleep(0.1)
            head, _, body = got.partition(b'\\r\\n\\r\\n')
            length = [int(l.split(b':')[1]) for l in head.split(b'\\r\\n') if l.lower().startswith(b'content-length')]
            print(round(time.monotonic() - start, 1), len(body), length[0] if length else -1)
            "
            """)
        let read = slow.1.split(whereSeparator: \.isWhitespace).compactMap { Double($0) }
        #expect(read.count == 3 && read[0] > 3.5 && read[1] == read[2] && read[1] > 500_000,
                "seconds, bytes read, bytes sent: \(slow.1)")
        let afterPipeline = try Self.peakKiB(daemon.pid) - before
        #expect(afterPipeline < 8 << 10, "thirty unread listings grew the daemon's peak RSS by \(afterPipeline) KiB")
        // Long polls under way when her four listing slots are taken (four pages she does not read) end at their
        // time with what they found, nothing new: not with a 429 half way. The four pages are all she holds.
        let beforePolls = try Self.resetPeak(daemon.pid)
        let polls = try await alice.run("""
            python3 -c "
            import socket, time
            def ask(path):
                s = socket.socket(socket.AF_UNIX); s.connect('\(socket)')
                s.sendall(b'GET ' + path + b' HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')
                return s
            def answer(s):
                got = b''
                while True:
                    data = s.recv(65536)
                    if not data: return got
                    got += data
            head = answer(ask(b'/v1/events')).split(b'\\r\\n\\r\\n')[0].lower()
            seq = [l.split(b':')[1].strip() for l in head.split(b'\\r\\n') if l.startswith(b'uploadq-seq')][0]
            polls = [ask(b'/v1/events?timeout=2'), ask(b'/v1/completions?timeout=2&since=' + seq)]
            time.sleep(0.5)
            held = [ask(b'/v1/jobs?limit=1000') for _ in range(4)]
            for p in polls:
                status, _, body = answer(p).partition(b'\\r\\n\\r\\n')
                print(status.split(b' ')[1].decode(), body.decode().replace(' ', '') or 'empty')
            "
            """)
        let pollAnswers = polls.1.split(separator: "\n")
        #expect(pollAnswers.count == 2 && pollAnswers.first == "200 empty"
                && pollAnswers.last?.hasPrefix("200 {\"completions\":[]") == true, "\(polls.1)")
        let afterPolls = try Self.peakKiB(daemon.pid) - beforePolls
        #expect(afterPolls < 4 * 8 << 10, "four unread listings grew the daemon's peak RSS by \(afterPolls) KiB")
        _ = await daemon.terminate()
    }

    /// Resets the process's peak resident size to what it holds now (`clear_refs` 5); returns that, in KiB.
    static func resetPeak(_ pid: Int32) throws -> Int {
        try "5".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8)
        return try peakKiB(pid)
    }

    /// The process's peak resident size since the last reset (`VmHWM`), in KiB.
    static func peakKiB(_ pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") })
        return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
    }

    @Test("slow droppers cannot lock the admin out: the last connections are the admin's, a slow request is closed")
    func slowClients() async throws {
        let sandbox = try Sandbox(config: Self.apiKeys("""
            max_connections = 10
            admin_connections = 4
            max_connections_per_user = 4
            request_timeout = "1s"
            idle_timeout = "3s"
            """))
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice, bob = try Dropper.bob
        let (daemon, socket) = try await ControlAPITests.daemon(sandbox, socket: sandbox.root + "/api.sock")
        // Each opens connections and sends a header byte every 200 ms; prints, per connection, how it ended.
        let slow = """
            import socket, sys, time
            conns = []
            for _ in range(int(sys.argv[2])):
                s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.setblocking(False); conns.append(s)
            request = b"GET /v1/status HTTP/1.1\\r\\nHost: x\\r\\n"
            start, ended = time.monotonic(), {}
            while len(ended) < len(conns) and time.monotonic() - start < 15:
                for i, s in enumerate(conns):
                    if i in ended: continue
                    try:
                        data = s.recv(100)
                        if data == b"": ended[i] = round(time.monotonic() - start, 1)
                        continue
                    except BlockingIOError: pass
                    except OSError: ended[i] = round(time.monotonic() - start, 1); continue
                    try: s.send(request[int((time.monotonic() - start) * 5) % len(request):][:1])
                    except OSError: ended[i] = round(time.monotonic() - start, 1)
                time.sleep(0.2)
            print(" ".join(str(ended.get(i, "open")) for i in range(len(conns))))
            """
        let script = sandbox.root + "/slow.py"
        try slow.write(toFile: script, atomically: false, encoding: .utf8)
        #expect(chmod(script, 0o644) == 0)
        let aliceSlow = Task { try await alice.run("python3 '\(script)' '\(socket)' 4") }
        try await Task.sleep(for: .milliseconds(300))
        let bobSlow = Task { try await bob.run("python3 '\(script)' '\(socket)' 4") }
        try await Task.sleep(for: .milliseconds(300))
        // Six of the droppers' connections are open (four of alice's, two of bob's): the rest are the admin's.
        let status = try await ControlAPITests.curl(socket, "GET", "/v1/status")
        #expect(status.status == 200, "the admin's status: \(status)")
        let (_, aliceEnded) = try await aliceSlow.value
        let (_, bobEnded) = try await bobSlow.value
        let times = (aliceEnded + " " + bobEnded).split(whereSeparator: \.isWhitespace).map(String.init)
        // Every one closed: bob's last two at once (no place left for droppers), the others by request_timeout.
        #expect(times.count == 8 && !times.contains("open"), "alice: \(aliceEnded), bob: \(bobEnded)")
        #expect(times.compactMap(Double.init).filter { $0 < 0.5 }.count >= 2, "refused at once: \(times)")
        #expect(times.compactMap(Double.init).allSatisfy { $0 < 6 }, "closed by the request timeout: \(times)")
        // The refusals are said once, not once each.
        let warnings = daemon.log.components(separatedBy: "connection(s) refused").count - 1
        #expect(warnings == 1, "daemon log:\n\(daemon.log.suffix(3000))")
        // A long poll outlives request_timeout: the request came whole, and its answer takes the time it asks for.
        let started = ContinuousClock.now
        let poll = try await ControlAPITests.curl(socket, "GET", "/v1/completions?timeout=2.5")
        #expect(poll.status == 200 && ContinuousClock.now - started >= .seconds(2), "\(poll)")
        // An idle connection is closed after idle_timeout.
        let idle = try await alice.run("""
            python3 -c "import socket, time; s = socket.socket(socket.AF_UNIX); s.connect('\(socket)'); \
            t = time.monotonic(); s.recv(1); print(round(time.monotonic() - t))"
            """)
        #expect(idle.1.trimmingCharacters(in: .whitespacesAndNewlines) == "3", "\(idle)")
        _ = await daemon.terminate()
    }

    @Test("a hard link to a root file readable by another group is refused; one readable by all is taken")
    func hardLinks() async throws {
        let sandbox = try Sandbox()
        try Dropper.openSpool(of: sandbox)
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        // As /etc/shadow is: root's, 0640, of a group that is not the spool's (root makes the link: no host setting
        // needs changing).
        let shadow = try sandbox.makeFile(sandbox.root + "/shadow", size: 500, seed: 51)
        #expect(chown(shadow, 0, 65_534) == 0 && chmod(shadow, 0o640) == 0)
        #expect(link(shadow, sandbox.spool + "/x.txt") == 0)
        let open = try sandbox.makeFile(sandbox.root + "/open.txt", size: 500, seed: 52)
        #expect(chmod(open, 0o644) == 0 && link(open, sandbox.spool + "/y.txt") == 0)
        let store = try store(sandbox)
        let settled = try await eventually(timeout: .seconds(20)) {
            let names = try store.jobs().map(\.originalName)
            return FileManager.default.fileExists(atPath: sandbox.spool + "/.rejected/x.txt.reason.txt") && names == ["y.txt"]
        }
        #expect(settled, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(!sandbox.deliveredFiles().contains { $0.hasSuffix("x.txt") })
        _ = await daemon.terminate()
    }

    @Test("a sidecar squatted by another user holds the file, said in status, the API and the log; then it goes")
    func squattedSidecar() async throws {
        let sandbox = try Sandbox(config: Self.apiKeys(), spool: #"sidecar_meta_keys = ["who"]"#)
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice, bob = try Dropper.bob
        let (daemon, socket) = try await ControlAPITests.daemon(sandbox, socket: sandbox.root + "/api.sock")
        try await alice.run("cd '\(sandbox.spool)' && printf '{}' > photo.jpg.uploadq.json && chmod 666 photo.jpg.uploadq.json")
        // Bob means to write his own sidecar first (the kernel may refuse him alice's file: then nothing is written).
        _ = try await bob.run("cd '\(sandbox.spool)' && printf '{\"meta\": {\"who\": \"bob\"}}' > photo.jpg.uploadq.json")
        try await bob.drop("photo.jpg", size: 3000, into: sandbox.spool)
        let store = try store(sandbox)
        let held = try await eventually(timeout: .seconds(20)) { try store.spoolHoldCount() == 1 }
        #expect(held, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(try store.jobs().isEmpty, "taken without its options")
        let status = try await BinaryRunner.run(["status", "--config", sandbox.configPath])
        #expect(status.stdout.contains("foreign-sidecar") && status.stdout.contains("photo.jpg"), "\(status.stdout)")
        let bobs = ControlAPITests.object(try await ControlAPITests.curl(socket, "GET", "/v1/spool", as: bob).body)
        let entry = (bobs["held"] as? [[String: Any]])?.first
        #expect(entry?["reason"] as? String == "foreign-sidecar" && entry?["name"] as? String == "photo.jpg", "\(bobs)")
        let alices = ControlAPITests.object(try await ControlAPITests.curl(socket, "GET", "/v1/spool", as: alice).body)
        #expect((alices["held"] as? [Any])?.isEmpty == true, "alice sees none of bob's: \(alices)")
        try await Task.sleep(for: .seconds(6))
        let said = daemon.log.components(separatedBy: "photo.jpg waits").count - 1
        #expect(said == 1, "said once, not at every look: \(said)")
        // Alice takes hers away: bob's photo waits on (his options may have gone into her file) until he writes his
        // own sidecar again; then it is taken with it.
        try await alice.run("rm '\(sandbox.spool)/photo.jpg.uploadq.json'")
        try await Task.sleep(for: .seconds(6))
        #expect(try store.jobs().isEmpty && (try store.spoolHoldCount()) == 1, "taken without bob's options")
        try await bob.run("cd '\(sandbox.spool)' && printf '{\"meta\": {\"who\": \"bob\"}}' > .s && mv .s photo.jpg.uploadq.json")
        let taken = try await eventually(timeout: .seconds(30)) {
            try store.jobs().first?.meta == ["who": "bob"] && (try store.spoolHoldCount()) == 0
        }
        #expect(taken, "daemon log:\n\(daemon.log.suffix(3000))")
        _ = await daemon.terminate()
    }

    @Test("another user's sidecar holds its file whatever its time, across a restart, until its owner's own sidecar")
    func lateForeignSidecar() async throws {
        let sandbox = try Sandbox()
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice, bob = try Dropper.bob
        // Bob's photo first, alice's sidecar for it after (a newer time proves nothing: she may touch her file).
        try await bob.drop("late.jpg", size: 3000, into: sandbox.spool)
        try await bob.drop("again.jpg", size: 3000, into: sandbox.spool)
        try await Task.sleep(for: .milliseconds(20))
        try await alice.run("cd '\(sandbox.spool)' && printf '{}' > late.jpg.uploadq.json && printf '{}' > again.jpg.uploadq.json")
        var daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let store = try store(sandbox)
        let held = try await eventually(timeout: .seconds(20)) {
            try store.spoolHolds(owner: nil, limit: 10).map(\.reason) == [.foreignSidecar, .foreignSidecar]
        }
        #expect(held, "daemon log:\n\(daemon.log.suffix(3000))")
        // She takes it away and the daemon restarts: the photo still waits for bob (his options may be in hers).
        try await alice.run("rm '\(sandbox.spool)'/late.jpg.uploadq.json '\(sandbox.spool)'/again.jpg.uploadq.json")
        _ = await daemon.terminate()
        daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        try await Task.sleep(for: .seconds(6))
        #expect(try store.jobs().isEmpty, "taken without bob's word: \(daemon.log.suffix(3000))")
        #expect(try store.spoolHolds(owner: bob.uid, limit: 10).map(\.name).sorted() == ["again.jpg", "late.jpg"])
        // The hold is the file's, not its name's: a new file of his under a name is looked at afresh (his act).
        try await bob.run("cd '\(sandbox.spool)' && head -c 3000 /dev/urandom > .n && mv .n again.jpg")
        let replaced = try await eventually(timeout: .seconds(30)) {
            try store.jobs(state: .uploaded).map(\.originalName) == ["again.jpg"] && (try store.spoolHoldCount()) == 1
        }
        #expect(replaced, "daemon log:\n\(daemon.log.suffix(3000))")
        // A change of the file by someone else (its change time moves: a link, a mode) is not bob's word.
        #expect(chmod(sandbox.spool + "/late.jpg", 0o644) == 0)
        try await Task.sleep(for: .seconds(6))
        #expect(try store.jobs().count == 1, "taken when root changed its mode: \(daemon.log.suffix(3000))")
        #expect(try store.spoolHolds(owner: nil, limit: 10).map(\.name) == ["late.jpg"])
        // Bob writes his own sidecar ('{}': no options): sent as it is.
        try await bob.run("cd '\(sandbox.spool)' && printf '{}' > .s && mv .s late.jpg.uploadq.json")
        let taken = try await eventually(timeout: .seconds(30)) {
            try store.jobs(state: .uploaded).count == 2 && (try store.spoolHoldCount()) == 0
        }
        #expect(taken, "daemon log:\n\(daemon.log.suffix(3000))")
        _ = await daemon.terminate()
    }

    @Test("a dropper's file on a FUSE mount is refused before its server is asked anything: a stopped one stalls nothing")
    func fuseRefusedUnasked() async throws {
        let work = try PowerCutTests.scratch("fuse-dropper")
        defer { try? FileManager.default.removeItem(atPath: work) }
        #expect(chmod(work, 0o755) == 0)
        let sandboxConfiguration = try Sandbox().configuration()
        let access = DropperAccess(uid: try Dropper.alice.uid, gid: 65_534, groups: [],
                                   rules: DropperRules(configuration: sandboxConfiguration,
                                                       spool: try #require(sandboxConfiguration.spool)))
        // A local mount on the way is crossed as any folder.
        let local = try await TmpfsMount(at: work + "/local", size: "1m")
        // Unmounted before the scratch folder goes (the defers run last first).
        defer {
            _ = try? ChildProcess.runBlocking(["umount", "-l", local.path], executable: "/bin/umount",
                                              environment: ProcessInfo.processInfo.environment)
        }
        #expect(chmod(local.path, 0o755) == 0)
        let localPath = local.path + "/photo.jpg"
        #expect(FileManager.default.createFile(atPath: localPath, contents: Data(repeating: 7, count: 1000)))
        #expect(chmod(localPath, 0o644) == 0)
        #expect(try SharingRulesTests.openAs(localPath, peer: access) == 0, "a file on a local mount (tmpfs)")

        let disk = PowerCutDisk(work: work, name: "disk")
        try await disk.boot()
        let path = disk.mount + "/photo.jpg"
        #expect(FileManager.default.createFile(atPath: path, contents: Data(repeating: 7, count: 1000)))
        #expect(chmod(path, 0o644) == 0 && chmod(disk.mount, 0o755) == 0)
        // Its server stopped: a stat, a statfs or a lookup on the mount would now wait for ever.
        disk.pauseServer(true)
        let answer = Mutex<Result<Int32, UploadQueueError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            let opened = Result { () throws(UploadQueueError) -> Int32 in try DropperRules.open(path, as: access) }
            answer.withLock { $0 = opened }
            done.signal()
        }
        let answered = done.wait(timeout: .now() + 10) == .success
        #expect(answered, "the walk asked the stopped FUSE server something")
        disk.pauseServer(false)
        if !answered { done.wait() }
        let result = answer.withLock { $0 }
        if case .success(let descriptor) = result { close(descriptor) }
        #expect(throws: UploadQueueError.self) { try result?.get() }
        if case .failure(let error) = result {
            #expect(error.code == .invalidArgument && error.message.contains("network or FUSE"), "\(error)")
        }
        await disk.cut()
    }

    @Test("a dropper's event numbers are its own sequence: no gap counts another's events, in every field")
    func ownEventSequence() async throws {
        let sandbox = try Sandbox(config: Self.apiKeys())
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice, bob = try Dropper.bob
        let (daemon, socket) = try await ControlAPITests.daemon(sandbox, socket: sandbox.root + "/api.sock")
        let store = try store(sandbox)
        func upload(_ dropper: Dropper, _ name: String) async throws {
            let before = try store.jobs(state: .uploaded).count
            try await dropper.drop(name, size: 2000, into: sandbox.spool)
            #expect(try await eventually { try store.jobs(state: .uploaded).count == before + 1 })
        }
        try await upload(bob, "b1.jpg")
        let first = try await ControlAPITests.curl(socket, "GET", "/v1/events?since=0", as: bob)
        let seqs = ControlAPITests.lines(first.body).compactMap { ($0["seq"] as? NSNumber)?.int64Value }
        for name in ["a1.jpg", "a2.jpg", "a3.jpg"] { try await upload(alice, name) }
        try await upload(bob, "b2.jpg")
        let later = try await ControlAPITests.curl(socket, "GET", "/v1/events?since=\(seqs.last ?? 0)", as: bob)
        let more = ControlAPITests.lines(later.body).compactMap { ($0["seq"] as? NSNumber)?.int64Value }
        let all = seqs + more
        #expect(all.count == 6, "enqueued, started, uploaded, twice: \(all)")
        #expect(zip(all, all.dropFirst()).allSatisfy { $1 == $0 + 1 }, "a gap in bob's numbers: \(all)")
        // The header of an empty read says where his own sequence is.
        let (_, headers) = try await bob.run("curl -s -D - -o /dev/null --unix-socket '\(socket)' "
            + "'http://localhost/v1/events?since=\(all.last ?? 0)'")
        #expect(headers.lowercased().contains("uploadq-seq: \(all.last ?? 0)"), "\(headers)")
        // The completions' seq, and the stream's first number, are of the same sequence.
        let completions = ControlAPITests.object(try await ControlAPITests.curl(socket, "GET", "/v1/completions?since=0",
                                                                                as: bob).body)
        #expect((completions["seq"] as? NSNumber)?.int64Value == all.last, "\(completions)")
        let stream = try await ControlAPITests.follow(socket, "/v1/events/stream", seconds: 1, as: bob)
        #expect(stream.contains("\"from_seq\":\((all.last ?? 0) + 1)"), "\(stream)")
        _ = await daemon.terminate()
    }

    @Test("a file destination keeps its source's mode, never wider; file_mode narrows it")
    func deliveredModes() async throws {
        let sandbox = try Sandbox(config: """
            [destinations.narrow]
            protocol = "file"
            url = "file://narrow"
            file_mode = "0640"
            """, spool: #"sidecar_destinations = ["default", "narrow"]"#)
        try Dropper.openSpool(of: sandbox)
        let bob = try Dropper.bob
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        try await bob.run("""
            cd '\(sandbox.spool)' && umask 077 && head -c 2000 /dev/urandom > .p && mv .p private.jpg \
            && umask 022 && printf '{"destination": "narrow"}' > .s && mv .s shared.jpg.uploadq.json \
            && head -c 2000 /dev/urandom > .q && mv .q shared.jpg && head -c 2000 /dev/urandom > .o && mv .o open.jpg
            """)
        let store = try store(sandbox)
        #expect(try await eventually(timeout: .seconds(20)) { try store.jobs(state: .uploaded).count == 3 },
                "daemon log:\n\(daemon.log.suffix(3000))")
        func mode(_ directory: String, _ name: String) throws -> UInt32 {
            let file = try #require(try FileManager.default.contentsOfDirectory(atPath: directory).first { $0.hasSuffix(name) })
            return try FileFingerprint.of(path: directory + "/" + file).mode & 0o777
        }
        #expect(try mode(sandbox.target, "private.jpg") == 0o600, "bob's private photo stays private")
        // 0644 in bob's group: others keep their read, bob's group's bits do not go to the daemon's group.
        #expect(try mode(sandbox.target, "open.jpg") == 0o604)
        #expect(try mode(sandbox.root + "/narrow", "shared.jpg") == 0o600, "file_mode 0640 of 0604")
        _ = await daemon.terminate()
    }

    @Test("over its quota a dropper's files wait in the spool (owner-quota) and its API enqueues answer 429; then they go")
    func ownerQuota() async throws {
        let dav = try TestServers.davURL()
        let sandbox = try Sandbox(config: Self.offlineDestination("\(dav)/quota-{job_id}-{name}"),
                                  limits: "owner_pending_jobs = 3", spool: #"destination = "dav""#)
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice, bob = try Dropper.bob
        let (daemon, socket) = try await ControlAPITests.daemon(sandbox, socket: sandbox.root + "/api.sock")
        for index in 1...5 { try await alice.drop("a\(index).jpg", size: 2000, into: sandbox.spool) }
        let store = try store(sandbox)
        let held = try await eventually(timeout: .seconds(20)) {
            try store.jobs().count == 3 && (try store.spoolHoldCount()) == 2
        }
        #expect(held, "daemon log:\n\(daemon.log.suffix(3000))")
        let json = try await BinaryRunner.run(["status", "--json", "--config", sandbox.configPath])
        let spool = (ControlAPITests.object(json.stdout)["spool"] as? [String: Any]) ?? [:]
        #expect((spool["held"] as? Int) == 2 && (spool["files"] as? [[String: Any]])?.first?["reason"] as? String
                == "owner-quota", "\(spool)")
        let home = try Self.home(of: alice, in: sandbox)
        try await alice.run("head -c 1000 /dev/urandom > '\(home)/api.jpg'")
        let refused = try await ControlAPITests.curl(socket, "POST", "/v1/jobs", body: #"{"path": "\#(home)/api.jpg"}"#,
                                                     as: alice)
        #expect(refused.status == 429 && ControlAPITests.errorCode(refused.body) == "owner-quota", "\(refused)")
        // Bob is not held by alice's quota.
        try await bob.drop("b.jpg", size: 2000, into: sandbox.spool)
        #expect(try await eventually { try store.jobs().contains { $0.ownerUID == bob.uid } })
        let said = daemon.log.components(separatedBy: " waits: you have 3 jobs").count - 1
        #expect(said == 2, "each held file said once: \(said)\n\(daemon.log.suffix(2000))")
        // The link comes back: alice's go, and the two waiting are taken.
        #expect(try await BinaryRunner.run(["link", "unmetered", "--config", sandbox.configPath]).status == 0)
        let drained = try await eventually(timeout: .seconds(60)) {
            try store.jobs(state: .uploaded).count == 6 && (try store.spoolHoldCount()) == 0
        }
        #expect(drained, "daemon log:\n\(daemon.log.suffix(3000))")
        _ = await daemon.terminate()
    }
}
