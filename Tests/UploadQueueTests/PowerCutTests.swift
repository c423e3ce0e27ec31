import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// One or two disks of powercutfs (contrib/powercut/powercutfs.py) for a test: a FUSE file system that keeps only
/// what was fsynced, names only once their directory was, and loses the rest at a cut. Needs root, /dev/fuse and
/// Debian's python3-pyfuse3 (contrib/test-servers/setup.sh installs it); a machine without them fails the test.
final class PowerCutDisk: @unchecked Sendable {
    let work: String
    let mount: String
    private let image: String
    private let control: String
    private let peerControl: String?
    private var process: ChildProcess?

    /// A disk at `work/name`; `peer` is the control socket of a second disk that dies with this one.
    init(work: String, name: String, peer: String? = nil) {
        self.work = work
        mount = work + "/" + name
        image = work + "/" + name + ".image"
        control = work + "/" + name + ".sock"
        peerControl = peer
    }

    var controlSocket: String { control }

    /// Stops its server (every request to the file system then waits), or lets it go on.
    func pauseServer(_ paused: Bool) {
        _ = process?.signal(paused ? SIGSTOP : SIGCONT)
    }

    /// A disk a failing test left mounted goes with the test: its file system ends, its mount is taken away.
    deinit {
        guard let process else { return }
        process.signal(SIGKILL)
        _ = process.wait()
        if Self.isMounted(mount) {
            _ = try? ChildProcess.runBlocking(["fusermount3", "-u", "-z", mount], executable: "/usr/bin/fusermount3",
                                              environment: [:])
        }
    }

    /// Boots the disk on what the last cut left; with `dieAt`, the power goes at the `count`-th fsync whose
    /// `KIND:PATH` matches (right after it, or `before` it instead).
    func boot(dieAt: String? = nil, count: Int = 1, before: Bool = false,
              sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let script = ConfigurationTests.repositoryRoot + "/contrib/powercut/powercutfs.py"
        #expect(FileManager.default.fileExists(atPath: "/dev/fuse"), "no /dev/fuse", sourceLocation: sourceLocation)
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        unlink(control)
        var arguments = ["/usr/bin/python3", script, mount, "--image", image, "--control", control,
                         "--fsync-log", work + "/fsyncs.log"]
        if let peerControl { arguments += ["--peer", peerControl] }
        if let dieAt { arguments += ["--die-at", dieAt, "--die-count", "\(count)"] + (before ? ["--die-before"] : []) }
        let log = open(work + "/powercutfs.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        defer { close(log) }
        process = try ChildProcess(arguments, executable: "/usr/bin/python3",
                                   environment: ProcessInfo.processInfo.environment, input: nil, output: log, errors: log)
        let mounted = await eventually(timeout: .seconds(20)) {
            FileManager.default.fileExists(atPath: self.control) && Self.isMounted(self.mount)
        }
        let log2 = (try? String(contentsOfFile: work + "/powercutfs.log", encoding: .utf8)) ?? ""
        #expect(mounted, "powercutfs did not mount at \(mount) (python3-pyfuse3 and root needed): \(log2.suffix(2000))",
                sourceLocation: sourceLocation)
        guard mounted else { throw POSIXError(.ENODEV) }
    }

    static func isMounted(_ path: String) -> Bool {
        ((try? String(contentsOfFile: "/proc/mounts", encoding: .utf8)) ?? "")
            .split(separator: "\n").contains { $0.split(separator: " ").dropFirst().first.map(String.init) == path }
    }

    /// One line to the control socket, its answer ("" when none came: a socket that refuses for 5 s).
    func command(_ line: String) -> String {
        for attempt in 0..<50 {
            if attempt > 0 { usleep(100_000) }
            if let answer = commandOnce(line) { return answer }
        }
        return ""
    }

    /// One line to the control socket, its answer; nil when it could not connect.
    private func commandOnce(_ line: String) -> String? {
        let sock = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard sock >= 0 else { return nil }
        defer { close(sock) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        _ = withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            control.utf8CString.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(buffer.count - 1))) }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(sock, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { return nil }
        let bytes = Array((line + "\n").utf8)
        guard write(sock, bytes, bytes.count) == bytes.count else { return "" }
        var answer = [UInt8](repeating: 0, count: 4096)
        let count = read(sock, &answer, answer.count)
        return count > 0 ? String(decoding: answer[0..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : ""
    }

    /// Where the power went (`KIND:PATH` of the fsync it died at), if it did at one.
    var diedAt: String? {
        guard let data = command("stats").data(using: .utf8),
              let stats = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
        return stats["died_at"] as? String
    }

    var isDead: Bool {
        guard let data = command("stats").data(using: .utf8),
              let stats = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return true }
        return stats["dead"] as? Bool ?? true
    }

    /// The power goes: what was not durable is lost, and the disk is unmounted (every process using it must be
    /// gone first).
    func cut(sourceLocation: SourceLocation = #_sourceLocation) async {
        _ = command("die")
        let answer = command("cut")
        #expect(answer == "cut", "powercutfs answered \(answer) to cut", sourceLocation: sourceLocation)
        if let process {
            // One that did not take the cut would never end by itself: the test fails, and does not hang.
            if answer != "cut" { process.signal(SIGKILL) }
            _ = await process.exit()
        }
        process = nil
        if Self.isMounted(mount) {
            _ = try? await BinaryRunner.run(["fusermount3", "-u", "-z", mount], executable: "/usr/bin/fusermount3")
        }
    }
}

/// Power cuts at the fsyncs the power-cut harness (contrib/powercut/run.sh) found missing or misordered: each test
/// cuts at that fsync and checks that nothing accepted is lost, and nothing is left half-done.
@Suite(.serialized) struct PowerCutTests {
    /// A scratch folder on the real disk, with a config of `text`.
    static func scratch(_ name: String) throws -> String {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("uploadq-powercut-\(name)-\(UUID())").path
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        return work
    }

    static func write(_ data: Data, to path: String) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw UploadQueueError.system("open", path: path) }
        defer { close(descriptor) }
        _ = data.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        fsync(descriptor)
    }

    /// fsyncs each folder, as a careful dropper does after writing into it.
    static func syncDirectories(_ paths: [String]) {
        for path in paths {
            let descriptor = open(path, O_RDONLY | O_DIRECTORY)
            fsync(descriptor)
            close(descriptor)
        }
    }

    /// Runs the daemon until `done` holds (or `limit` passes), then kills it as a power cut would.
    @discardableResult
    static func runDaemon(_ config: String, limit: Duration = .seconds(20),
                          until done: @escaping () async throws -> Bool) async throws -> Bool {
        let log = open("/dev/null", O_WRONLY | O_CLOEXEC)
        defer { close(log) }
        let daemon = try ChildProcess([BinaryRunner.path, "daemon", "--config", config], executable: BinaryRunner.path,
                                      environment: ProcessInfo.processInfo.environment, input: nil, output: log,
                                      errors: log)
        let reached = await eventually(timeout: limit) { (try? await done()) ?? false }
        daemon.signal(SIGKILL)
        _ = await daemon.exit()
        return reached
    }

    /// A disk (booted) whose queue holds one photo, enqueued by copy for a local target under `work`.
    static func queueWithOnePhoto(_ work: String, sourceLocation: SourceLocation = #_sourceLocation) async throws
        -> (disk: PowerCutDisk, config: String, photo: Data, id: String)
    {
        let disk = PowerCutDisk(work: work, name: "disk")
        let config = work + "/uploadq.toml"
        try """
            state_dir = "\(disk.mount)/state"
            [destinations.local]
            protocol = "file"
            url = "file://\(work)/delivered"
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let photo = Data((0..<30_000).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        try write(photo, to: work + "/photo.jpg")
        try await disk.boot()
        let enqueued = try await BinaryRunner.run(["enqueue", work + "/photo.jpg", "--destination", "local",
                                                   "--config", config])
        let id = enqueued.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(enqueued.status == 0 && JobID(id) != nil, "\(enqueued.stderr)", sourceLocation: sourceLocation)
        return (disk, config, photo, id)
    }

    /// Runs the daemon on `config` until the power goes right after the `k`-th fsync of the database's log, boots the
    /// disk again and drains what is left with a batch run; returns where the power went.
    static func drainThroughLogCut(_ k: Int, disk: PowerCutDisk, config: String) async throws -> String? {
        try await disk.boot(dieAt: "^file:state/queue\\.sqlite-wal$", count: k)
        _ = try await runDaemon(config) { disk.isDead }
        let died = disk.diedAt
        await disk.cut()
        try await disk.boot()
        _ = try await BinaryRunner.run(["daemon", "--exit-when-idle", "--config", config])
        return died
    }

    static func jobs(_ config: String) async throws -> [[String: Any]] {
        let output = try await BinaryRunner.run(["list", "--json", "--config", config])
        return (try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [[String: Any]]) ?? []
    }

    @Test("a local target's new {date}/ folder is fsynced into its parent: a cut there, or after, loses no delivery")
    func newTargetFolder() async throws {
        let work = try Self.scratch("target")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let disk = PowerCutDisk(work: work, name: "disk")
        let config = work + "/uploadq.toml"
        try """
            state_dir = "state"
            [destinations.local]
            protocol = "file"
            url = "file://\(disk.mount)/delivered"
            name_template = "{date}/{job_id}-{name}"
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let photo = Data((0..<50_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try Self.write(photo, to: work + "/photo.jpg")
        let enqueued = try await BinaryRunner.run(["enqueue", work + "/photo.jpg", "--destination", "local",
                                                   "--config", config])
        #expect(enqueued.status == 0, "\(enqueued.stderr)")

        // The power goes instead of the fsync of delivered/ that makes the new {date}/ folder durable.
        try await disk.boot(dieAt: "^dir:delivered$", before: true)
        _ = try await BinaryRunner.run(["daemon", "--exit-when-idle", "--config", config])
        #expect(disk.diedAt == "dir:delivered", "the power did not go at the new folder's fsync")
        #expect(try await Self.jobs(config).first?["state"] as? String != "uploaded")
        await disk.cut()

        // Booted again, the upload goes through (at once: no waiting out the retry); then the power goes right
        // after it.
        try await disk.boot()
        let jobID = try #require(try await Self.jobs(config).first?["id"] as? String)
        _ = try await BinaryRunner.run(["retry", jobID, "--config", config])
        _ = try await BinaryRunner.run(["daemon", "--exit-when-idle", "--config", config])
        let job = try #require(try await Self.jobs(config).first)
        #expect(job["state"] as? String == "uploaded", "\(job["last_error"] ?? "")")
        await disk.cut()

        // What the job says was delivered is there, byte for byte.
        try await disk.boot()
        let remote = try #require(job["remote_url"] as? String)
        let delivered = FileManager.default.contents(atPath: String(remote.dropFirst("file://".count)))
        #expect(delivered == photo, "\(remote) is \(delivered.map { "\($0.count) bytes" } ?? "gone") after the cut")
        await disk.cut()
    }

    @Test("a queued file is the same file on a disk numbered anew after the cut (a reboot may renumber devices)")
    func deviceNumberedAnew() async throws {
        let work = try Self.scratch("device")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let (disk, config, _, _) = try await Self.queueWithOnePhoto(work)
        var before = stat()
        stat(disk.mount + "/state", &before)
        await disk.cut()

        // Another disk takes the freed number meanwhile, as another device may at the next boot. (Mounts made by
        // tests running beside this one take numbers too: until the disk comes back under another number, it is
        // cut and booted again, with one more disk holding numbers.)
        var others: [PowerCutDisk] = []
        var after = stat()
        for attempt in 0..<5 {
            let other = PowerCutDisk(work: work, name: "other-\(attempt)")
            try await other.boot()
            others.append(other)
            try await disk.boot()
            stat(disk.mount + "/state", &after)
            if before.st_dev != after.st_dev { break }
            await disk.cut()
        }
        #expect(before.st_dev != after.st_dev, "the disk kept its device number: the test proves nothing")
        _ = try await BinaryRunner.run(["daemon", "--exit-when-idle", "--config", config])
        let job = try #require(try await Self.jobs(config).first)
        #expect(job["state"] as? String == "uploaded", "\(job["last_error"] ?? "")")
        await disk.cut()
        for other in others { await other.cut() }
    }

    @Test("an uploaded copy archived across disks: a cut at any fsync of its upload and release ends with it archived")
    func archiveAcrossDisks() async throws {
        var k = 1
        var slowLives = 0
        while k <= 30 {
            let work = try Self.scratch("archive")
            defer { try? FileManager.default.removeItem(atPath: work) }
            let state = PowerCutDisk(work: work, name: "state", peer: work + "/archive.sock")
            let archive = PowerCutDisk(work: work, name: "archive", peer: work + "/state.sock")
            let config = work + "/uploadq.toml"
            try """
                state_dir = "\(state.mount)/state"
                [retry]
                initial_interval = "100ms"
                [retention]
                uploaded_copies = "archive"
                archive_dir = "\(archive.mount)/archive"
                [destinations.local]
                protocol = "file"
                url = "file://\(work)/delivered"
                """.write(toFile: config, atomically: true, encoding: .utf8)
            let photo = Data((0..<40_000).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ k) })
            try Self.write(photo, to: work + "/photo.jpg")
            try await state.boot()
            try await archive.boot()
            let enqueued = try await BinaryRunner.run(["enqueue", work + "/photo.jpg", "--destination", "local",
                                                       "--config", config])
            #expect(enqueued.status == 0, "\(enqueued.stderr)")
            await state.cut()
            await archive.cut()

            // The power goes at the k-th fsync of either disk once the daemon runs.
            try await state.boot(dieAt: "^(file|dir):(state|archive)", count: k)
            try await archive.boot(dieAt: "^(file|dir):(state|archive)", count: k)
            try await Self.runDaemon(config, limit: .seconds(10)) { state.isDead || archive.isDead }
            let died = state.diedAt ?? archive.diedAt
            await state.cut()
            await archive.cut()

            // With the power on, the upload and the release finish: the copy archived, nothing owed.
            try await state.boot()
            try await archive.boot()
            // No cut, and the life got through the upload and its release: the sweep is at its end. No cut short
            // of that: the daemon was too slow (a loaded machine) to reach the k-th fsync; k is tried again.
            let blobsLeft = ((try? FileManager.default.contentsOfDirectory(atPath: state.mount + "/state/blobs")) ?? [])
                .filter { !$0.hasPrefix(".") }
            let throughInThatLife = try await Self.jobs(config).first?["state"] as? String == "uploaded" && blobsLeft.isEmpty
            let released = try await Self.runDaemon(config, limit: .seconds(20)) {
                let status = try await BinaryRunner.run(["status", "--json", "--config", config])
                let summary = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
                let owed = (summary?["releases"] as? [String: Any])?["owed"] as? Int
                let blobs = (try? FileManager.default.contentsOfDirectory(atPath: state.mount + "/state/blobs")) ?? []
                return try await Self.jobs(config).first?["state"] as? String == "uploaded" && owed == 0
                    && blobs.filter { !$0.hasPrefix(".") }.isEmpty
            }
            #expect(released, "cut at fsync \(k) (\(died ?? "none")): the release never finished")
            let archived = FileManager.default.enumerator(atPath: archive.mount + "/archive")?
                .compactMap { $0 as? String }.filter { !($0 as NSString).lastPathComponent.hasPrefix(".") }
                .compactMap { FileManager.default.contents(atPath: archive.mount + "/archive/" + $0) }
                .filter { $0.count > 1_000 } ?? []
            let statusAfter = try await BinaryRunner.run(["status", "--json", "--config", config]).stdout
            let listing = try await BinaryRunner.run(["list", "--json", "--config", config]).stdout
            #expect(archived == [photo], """
                cut at fsync \(k) (\(died ?? "none")): \(archived.count) archived copies; \(statusAfter.prefix(600)) \
                \(listing.prefix(800))
                """)
            let blobs = (try? FileManager.default.contentsOfDirectory(atPath: state.mount + "/state/blobs")) ?? []
            #expect(blobs.filter { !$0.hasPrefix(".") }.isEmpty, "cut at fsync \(k): \(blobs) left in blobs/")
            await state.cut()
            await archive.cut()
            if died == nil {
                if throughInThatLife { break }
                slowLives += 1
                #expect(slowLives < 5, "the daemon reached neither fsync \(k) nor the end in 5 lives")
                if slowLives >= 5 { break }
                continue
            }
            k += 1
            slowLives = 0
        }
        #expect(k > 5, "the upload and release made only \(k - 1) fsyncs: the sweep proves little")
    }

    @Test("a library enqueue that returned is in the queue after a cut at any fsync of the intake, its copy whole")
    func libraryEnqueueSurvives() async throws {
        // A sync engine enqueues through the library in its own process (this one): the power goes instead of the
        // k-th fsync on the state's disk, for every k until both enqueues are through. What returned must be in
        // the queue with its SHA-256, and its copy must upload byte for byte; what threw may be there or not.
        var k = 1
        var acknowledgedInAll = 0
        while k <= 40 {
            let work = try Self.scratch("library")
            defer { try? FileManager.default.removeItem(atPath: work) }
            let disk = PowerCutDisk(work: work, name: "disk")
            let config = work + "/uploadq.toml"
            try """
                state_dir = "\(disk.mount)/state"
                [destinations.local]
                protocol = "file"
                url = "file://\(work)/delivered"
                """.write(toFile: config, atomically: true, encoding: .utf8)
            let photos = (0..<2).map { n in Data((0..<(30_000 + n * 5_000)).map { UInt8(truncatingIfNeeded: $0 &* 5 &+ n &+ k) }) }
            for (n, photo) in photos.enumerated() { try Self.write(photo, to: work + "/photo-\(n).jpg") }
            // The queue exists before the power is armed: the sweep is over the enqueues.
            try await disk.boot()
            _ = try UploadQueue(configuration: try ConfigurationLoader.load(path: config))
            await disk.cut()

            try await disk.boot(dieAt: "^(file|dir):", count: k, before: true)
            var acknowledged: [(id: String, photo: Data)] = []
            do {
                let queue = try UploadQueue(configuration: try ConfigurationLoader.load(path: config))
                for (n, photo) in photos.enumerated() {
                    let id = try await queue.enqueue(work + "/photo-\(n).jpg", destination: "local")
                    acknowledged.append((id.rawValue, photo))
                }
            } catch {
                #expect(disk.isDead, "cut at fsync \(k): the enqueue failed with the power on: \(error)")
            }
            let died = disk.diedAt
            await disk.cut()

            try await disk.boot()
            let jobs = try await Self.jobs(config)
            for (id, photo) in acknowledged {
                let job = jobs.first { $0["id"] as? String == id }
                #expect(job?["sha256"] as? String == SigV4Signer.sha256Hex([UInt8](photo)),
                        "cut at fsync \(k) (\(died ?? "none")): acknowledged job \(id) is \(job.map { "\($0)" } ?? "lost")")
            }
            _ = try await BinaryRunner.run(["daemon", "--exit-when-idle", "--config", config])
            for job in try await Self.jobs(config) {
                let remote = (job["remote_url"] as? String).map { String($0.dropFirst("file://".count)) }
                let delivered = remote.flatMap { FileManager.default.contents(atPath: $0) }
                #expect(job["state"] as? String == "uploaded" && delivered.map { photos.contains($0) } == true,
                        "cut at fsync \(k) (\(died ?? "none")): job \(job["id"] ?? "") is \(job["state"] ?? ""): \(job["last_error"] ?? "")")
            }
            await disk.cut()
            acknowledgedInAll += acknowledged.count
            if died == nil {
                #expect(acknowledged.count == photos.count)
                break
            }
            k += 1
        }
        #expect(k > 4 && k <= 40, "the two enqueues made \(k - 1) fsyncs: the sweep proves little, or never ended")
        #expect(acknowledgedInAll > 2, "no cut came after an enqueue returned")
    }

    @Test("a reference file moved to another folder after its upload is in one of the two after a cut at the move")
    func referenceMoveSurvives() async throws {
        // A move is two names in two folders. The power goes instead of the fsync of the folder it arrives in,
        // while another process's fsync of the folder it leaves (a dropper writing there) got through the instant
        // before: a rename would end in neither folder; a link first, the unlink once the arrival is durable, ends
        // in one of them. Found by the power-cut run (a reference's file lost).
        let work = try Self.scratch("move")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let disk = PowerCutDisk(work: work, name: "disk")
        let config = work + "/uploadq.toml"
        try """
            state_dir = "\(disk.mount)/state"
            [retry]
            initial_interval = "100ms"
            [destinations.local]
            protocol = "file"
            url = "file://\(work)/delivered"
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let photo = Data((0..<30_000).map { UInt8(truncatingIfNeeded: $0 &* 17) })
        try await disk.boot()
        for folder in ["refs", "sent"] {
            try FileManager.default.createDirectory(atPath: disk.mount + "/" + folder, withIntermediateDirectories: true)
        }
        try Self.write(photo, to: disk.mount + "/refs/photo.jpg")
        PowerCutTests.syncDirectories([disk.mount + "/refs", disk.mount])
        let enqueued = try await BinaryRunner.run(["enqueue", disk.mount + "/refs/photo.jpg", "--mode", "reference",
                                                   "--then", "move:" + disk.mount + "/sent", "--destination", "local",
                                                   "--config", config])
        #expect(enqueued.status == 0, "\(enqueued.stderr)")
        await disk.cut()

        try await disk.boot(dieAt: "^dir:sent$", before: true)
        let died = try await Self.runDaemon(config) { disk.isDead }
        #expect(died && disk.diedAt == "dir:sent", "the power did not go at sent/'s fsync: \(disk.diedAt ?? "none")")
        #expect(disk.command("syncdir refs") == "synced")
        await disk.cut()

        try await disk.boot()
        var found: [String] = []
        for folder in ["refs", "sent"] {
            let directory = disk.mount + "/" + folder
            let names: [String] = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            for name in names where FileManager.default.contents(atPath: directory + "/" + name) == photo {
                found.append(folder + "/" + name)
            }
        }
        #expect(!found.isEmpty, "after the cut the file is in neither folder")
        // With the power on, the move finishes: the file in sent/, whole, and nowhere else.
        let moved = try await Self.runDaemon(config) {
            FileManager.default.contents(atPath: disk.mount + "/sent/photo.jpg") == photo
                && ((try? FileManager.default.contentsOfDirectory(atPath: disk.mount + "/refs")) ?? ["?"]).isEmpty
        }
        let left = (try? FileManager.default.contentsOfDirectory(atPath: disk.mount + "/refs")) ?? []
        #expect(moved, "the move did not finish: refs/ holds \(left)")
        await disk.cut()
    }

    @Test("a cancelled job's file is in blobs/ or cancelled/ after a cut at its move, and kept once the cancel ends")
    func cancelledFileSurvives() async throws {
        // As a release's move: the power goes instead of cancelled/'s fsync, while another intake's fsync of
        // blobs/ got through the instant before. A rename would keep the file in neither folder.
        let work = try Self.scratch("cancel")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let (disk, config, photo, id) = try await Self.queueWithOnePhoto(work)
        await disk.cut()

        // No daemon runs: the CLI cancels in the database itself, and the power goes at cancelled/'s fsync.
        try await disk.boot(dieAt: "^dir:state/cancelled$", before: true)
        _ = try await BinaryRunner.run(["cancel", id, "--config", config])
        #expect(disk.diedAt == "dir:state/cancelled", "the power did not go at cancelled/'s fsync: \(disk.diedAt ?? "none")")
        #expect(disk.command("syncdir state/blobs") == "synced")
        await disk.cut()

        try await disk.boot()
        func copies() -> [String] {
            ["blobs", "cancelled"].flatMap { folder -> [String] in
                let directory = disk.mount + "/state/" + folder
                let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
                return names.filter { FileManager.default.contents(atPath: directory + "/" + $0) == photo }
                    .map { folder + "/" + $0 }
            }
        }
        #expect(!copies().isEmpty, "after the cut the cancelled job's file is in neither blobs/ nor cancelled/")
        // The cancel, asked again, ends: the job gone, its file kept under cancelled/ alone.
        let again = try await BinaryRunner.run(["cancel", id, "--config", config])
        #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
        let kept = copies()
        #expect(kept.count == 1 && kept.first?.hasPrefix("cancelled/") == true, "\(kept)")
        #expect(try await Self.jobs(config).isEmpty)
        await disk.cut()
    }

    @Test("a file set aside from the spool keeps its reason: a cut right after .rejected/ is fsynced")
    func rejectionKeepsItsReason() async throws {
        let work = try Self.scratch("reason")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let disk = PowerCutDisk(work: work, name: "disk")
        let config = work + "/uploadq.toml"
        try """
            state_dir = "\(work)/state"
            [spool]
            dir = "\(disk.mount)/spool"
            destination = "local"
            quiet_period = "100ms"
            network_quiet_period = "100ms"
            [destinations.local]
            protocol = "file"
            url = "file://\(work)/local"
            """.write(toFile: config, atomically: true, encoding: .utf8)
        try await disk.boot()
        try FileManager.default.createDirectory(atPath: disk.mount + "/spool", withIntermediateDirectories: true)
        // A sidecar naming a destination the spool may not use: the file is set aside, with why.
        try Self.write(Data(#"{"destination": "elsewhere"}"#.utf8), to: disk.mount + "/spool/photo.jpg.uploadq.json")
        try Self.write(Data(repeating: 7, count: 5_000), to: disk.mount + "/spool/photo.jpg")
        PowerCutTests.syncDirectories([disk.mount + "/spool", disk.mount])
        await disk.cut()

        // The power goes right after the fsync of .rejected/ that the set-aside file's name needs.
        try await disk.boot(dieAt: "^dir:spool/\\.rejected$")
        let died = try await Self.runDaemon(config) { disk.isDead }
        #expect(died, "the power never went at .rejected/'s fsync")
        #expect(disk.diedAt == "dir:spool/.rejected")
        await disk.cut()

        try await disk.boot()
        let reason = try? String(contentsOfFile: disk.mount + "/spool/.rejected/photo.jpg.reason.txt", encoding: .utf8)
        #expect(FileManager.default.fileExists(atPath: disk.mount + "/spool/.rejected/photo.jpg"))
        #expect(reason?.contains("elsewhere") == true, "the reason after the cut: \(reason ?? "missing")")
        await disk.cut()
    }

    @Test("two lanes through power cuts at the queue's commits: every try of a lane's job reaches the server before any of the next one's")
    func laneOrderThroughPowerCuts() async throws {
        // The power goes right after the k-th fsync of the database's log while the daemon works through two
        // lanes; what was durable then is all the next daemon knows. A job's upload is recorded durably before
        // the next of its lane is claimed: a cut can make a job go again, never one after it go first.
        for k in [3, 8, 14] {
            let work = try Self.scratch("lanes")
            defer { try? FileManager.default.removeItem(atPath: work) }
            let recorder = try RecorderSession()
            let disk = PowerCutDisk(work: work, name: "disk")
            let config = work + "/uploadq.toml"
            try """
                state_dir = "\(disk.mount)/state"
                [limits]
                concurrency = 4
                [destinations.rec]
                protocol = "http-put"
                url = "\(recorder.url("/{name}"))"
                """.write(toFile: config, atomically: true, encoding: .utf8)
            try await disk.boot()
            var lanes: [[String]] = []
            for lane in 0..<2 {
                var files: [String] = []
                for index in 0..<4 {
                    let path = work + "/L\(lane)-\(index).bin"
                    try Self.write(Data((0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ lane &+ index) }), to: path)
                    files.append(path)
                    // One file a call: a batch's copies are flushed by one syncfs, which needs the harness's shim.
                    let enqueued = try await BinaryRunner.run(["enqueue", path, "--destination", "rec", "--lane",
                                                               "l\(lane)", "--config", config])
                    #expect(enqueued.status == 0, "\(enqueued.stderr)")
                }
                lanes.append(files.map { ($0 as NSString).lastPathComponent })
            }
            await disk.cut()

            let died = try await Self.drainThroughLogCut(k, disk: disk, config: config)
            #expect(died == "file:state/queue.sqlite-wal", "the power never went at log fsync \(k)")
            let jobs = try await Self.jobs(config)
            #expect(jobs.count == 8 && jobs.allSatisfy { $0["state"] as? String == "uploaded" },
                    "cut at log fsync \(k) (\(died ?? "none")): \(jobs.map { "\($0["state"] ?? "") \($0["last_error"] ?? "")" })")
            await disk.cut()
            let received = try await recorder.requests().filter { $0["method"] as? String == "PUT" }
                .compactMap { ($0["path"] as? String)?.split(separator: "/").last.map(String.init) }
            for lane in lanes {
                let order = received.compactMap { lane.firstIndex(of: $0) }
                #expect(order == order.sorted() && Set(order) == Set(0..<4),
                        "cut at log fsync \(k) (\(died ?? "none")): lane \(lane.first ?? "") reached the server as \(order)")
            }
        }
    }

    @Test("jobs claimed ahead through power cuts at the queue's commits: each start is counted once, before its end")
    func claimedAheadThroughPowerCuts() async throws {
        // Twelve small files, two slots: the rounds claim four more ahead, the transfers that end hand their slots
        // on, and a later commit writes those starts before their ends. The power goes right after the k-th fsync of
        // the database's log; after the reboot every job is uploaded, and each job's attempts, its attempt rows and
        // its `started` events agree: no job claimed ahead counts an attempt it never made, none ends unstarted.
        for k in [2, 4, 7] {
            let work = try Self.scratch("ahead")
            defer { try? FileManager.default.removeItem(atPath: work) }
            let recorder = try RecorderSession()
            let disk = PowerCutDisk(work: work, name: "disk")
            let config = work + "/uploadq.toml"
            try """
                state_dir = "\(disk.mount)/state"
                [limits]
                concurrency = 2
                [destinations.rec]
                protocol = "http-put"
                url = "\(recorder.url("/{name}"))"
                """.write(toFile: config, atomically: true, encoding: .utf8)
            try await disk.boot()
            for index in 0..<12 {
                let path = work + "/a\(index).bin"
                try Self.write(Data((0..<8_192).map { UInt8(truncatingIfNeeded: $0 &* 5 &+ index) }), to: path)
                // One file a call: a batch's copies are flushed by one syncfs, which needs the harness's shim.
                let enqueued = try await BinaryRunner.run(["enqueue", path, "--destination", "rec", "--config", config])
                #expect(enqueued.status == 0, "\(enqueued.stderr)")
            }
            await disk.cut()

            let died = try await Self.drainThroughLogCut(k, disk: disk, config: config)
            #expect(died == "file:state/queue.sqlite-wal", "the power never went at log fsync \(k)")
            let database = try DatabaseQueue(path: disk.mount + "/state/queue.sqlite")
            let rows = try database.read { db in
                try Row.fetchAll(db, sql: """
                    SELECT j.id, j.state, j.attempts, j.waiting_reason,
                        (SELECT COUNT(*) FROM job_attempt a WHERE a.job_id = j.id) AS attempt_rows,
                        (SELECT COUNT(*) FROM job_attempt a WHERE a.job_id = j.id AND a.ended_at IS NULL) AS open_rows,
                        (SELECT COUNT(*) FROM event e WHERE e.job_id = j.id AND e.kind = 'started') AS starts,
                        (SELECT COUNT(*) FROM event e WHERE e.job_id = j.id AND e.kind = 'uploaded') AS uploads
                    FROM job j
                    """)
            }
            try database.close()
            #expect(rows.count == 12, "cut at log fsync \(k)")
            for row in rows {
                let state: String = row["state"], attempts: Int = row["attempts"]
                let attemptRows: Int = row["attempt_rows"], starts: Int = row["starts"]
                let facts = "cut at log fsync \(k): job \(row["id"] as String): \(state), \(attempts) attempt(s), " +
                    "\(attemptRows) row(s), \(starts) start(s), \(row["uploads"] as Int) upload(s)"
                #expect(state == "uploaded" && (row["waiting_reason"] as String?) == nil, "\(facts)")
                #expect(attempts >= 1 && attempts == attemptRows && attempts == starts, "\(facts)")
                #expect((row["open_rows"] as Int) == 0 && (row["uploads"] as Int) == 1, "\(facts)")
            }
            await disk.cut()
            let received = try await recorder.requests().filter { $0["method"] as? String == "PUT" }.count
            #expect(received >= 12, "cut at log fsync \(k): \(received) PUTs")
        }
    }
}
