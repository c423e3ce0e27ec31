import CUploadQueueSystem
import Foundation
import Testing
@testable import UploadQueue

/// A dropper: a real user of the test set-up's group `uq-droppers` (made by contrib/test-servers/setup.sh), who
/// writes into the spool with `runuser`, as a camera app or a sync client under its own account would.
struct Dropper {
    let name: String
    let uid: UInt32

    static let group = "uq-droppers"
    static var alice: Dropper { get throws { try Dropper("uq-alice") } }
    static var bob: Dropper { get throws { try Dropper("uq-bob") } }

    /// The user `name`; a missing one fails the calling test (run contrib/test-servers/setup.sh).
    init(_ name: String) throws {
        guard let entry = getpwnam(name) else {
            throw UploadQueueError(.configuration, "no user \(name): run contrib/test-servers/setup.sh as root")
        }
        self.name = name
        uid = entry.pointee.pw_uid
    }

    /// Runs `script` with `sh -c` as this user; returns its exit status and what it printed.
    @discardableResult
    func run(_ script: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> (Int32, String) {
        let (status, out, err) = try await ChildProcess.run(["runuser", "-u", name, "--", "/bin/sh", "-c", script],
                                                            executable: "/usr/sbin/runuser", environment: ["PATH": "/usr/bin:/bin"],
                                                            limit: .seconds(120), sourceLocation: sourceLocation)
        return (status, String(decoding: out + err, as: UTF8.self))
    }

    /// Writes a file of `size` random bytes into `directory` as this user, under a temporary name first, then
    /// renamed to `name` (as a careful dropper does).
    func drop(_ file: String, size: Int, into directory: String,
              sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let (status, output) = try await run("""
            head -c \(size) /dev/urandom > '\(directory)/.\(file).tmp' && mv '\(directory)/.\(file).tmp' '\(directory)/\(file)'
            """, sourceLocation: sourceLocation)
        #expect(status == 0, "\(name) could not drop \(file): \(output)", sourceLocation: sourceLocation)
    }

    /// Makes `sandbox`'s spool as docs/install.md says (mode 3770, group `uq-droppers`) and lets droppers reach it.
    static func openSpool(of sandbox: Sandbox) throws {
        #expect(chmod(sandbox.root, 0o711) == 0)
        try FileManager.default.createDirectory(atPath: sandbox.spool, withIntermediateDirectories: true)
        let group = try #require(getgrnam(Self.group), "run contrib/test-servers/setup.sh").pointee.gr_gid
        #expect(chown(sandbox.spool, 0, group) == 0)
        #expect(chmod(sandbox.spool, 0o3770) == 0)
    }
}

/// Droppers are strangers: none can steer, change or hold up another's file (see the spool's trust rules in
/// docs/spool.md). Every test runs its droppers as real users.
@Suite(.serialized) struct DropperTests {
    func store(_ sandbox: Sandbox) throws -> QueueStore {
        QueueStore(database: try QueueDatabase.open(path: sandbox.state + "/queue.sqlite"))
    }

    @Test("alice's sidecar, valid or not, never steers bob's file (it waits until hers is gone); bob's own does; .rejected is the daemon's own")
    func sidecarBelongsToItsFile() async throws {
        let sandbox = try Sandbox(config: """
            [destinations.evil]
            protocol = "file"
            url = "file://evil"
            """, spool: """
            sidecar_destinations = ["default", "evil"]
            sidecar_meta_keys = ["who"]
            """)
        try Dropper.openSpool(of: sandbox)
        // A directory alice made under the name before the daemon ever started: not the daemon's to use.
        let alice = try Dropper.alice, bob = try Dropper.bob
        try await alice.run("mkdir '\(sandbox.spool)/.rejected' && chmod 777 '\(sandbox.spool)/.rejected'")
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        // Alice's set aside, then the daemon's own made (a moment after: looked at together).
        let replaced = await eventually {
            var info = stat()
            return FileManager.default.fileExists(atPath: sandbox.spool + "/.rejected.not-ours-1")
                && lstat(sandbox.spool + "/.rejected", &info) == 0 && info.st_uid == 0 && info.st_mode & 0o777 == 0o700
        }
        #expect(replaced, "alice's set aside, the daemon's own made: \(daemon.log.suffix(2000))")

        try await alice.run("""
            cd '\(sandbox.spool)' && printf '%s' '{"destination": "evil", "meta": {"who": "alice"}}' > IMG_0001.jpg.uploadq.json \
            && printf '{' > IMG_0002.jpg.uploadq.json
            """)
        try await bob.run("""
            cd '\(sandbox.spool)' && printf '%s' '{"destination": "evil", "meta": {"who": "bob"}}' > .s && mv .s IMG_0003.jpg.uploadq.json
            """)
        for file in ["IMG_0001.jpg", "IMG_0002.jpg", "IMG_0003.jpg"] {
            try await bob.drop(file, size: 20_000, into: sandbox.spool)
        }
        let store = try store(sandbox)
        // Bob's own goes; his two beside alice's sidecars wait in the spool, neither taken nor rejected.
        let waiting = try await eventually(timeout: .seconds(30)) {
            try store.jobs().filter { $0.state == .uploaded }.count == 1 && (try store.spoolHoldCount()) == 2
        }
        #expect(waiting, "daemon log:\n\(daemon.log.suffix(3000))")
        let holds = try store.spoolHolds(owner: bob.uid, limit: 10)
        #expect(holds.map(\.name) == ["IMG_0001.jpg", "IMG_0002.jpg"] && holds.allSatisfy { $0.reason == .foreignSidecar },
                "\(holds)")
        #expect(holds.first?.message.contains("belongs to user \(alice.uid)") == true, "\(holds)")
        let rejected = sandbox.spool + "/.rejected"
        #expect(try FileManager.default.contentsOfDirectory(atPath: rejected).isEmpty, "nothing of bob's rejected")
        // Alice's sidecars gone, bob's files still wait for him (his options may have gone into hers); he writes
        // his own sidecars ('{}': none), and they go, steered by nothing of hers.
        try await alice.run("rm '\(sandbox.spool)'/IMG_0001.jpg.uploadq.json '\(sandbox.spool)'/IMG_0002.jpg.uploadq.json")
        try await Task.sleep(for: .seconds(6))
        #expect(try store.spoolHoldCount() == 2 && (try store.jobs().count) == 1, "taken before bob acted")
        try await bob.run("""
            cd '\(sandbox.spool)' && for f in IMG_0001.jpg IMG_0002.jpg; do printf '{}' > .s && mv .s "$f.uploadq.json"; done
            """)
        let settled = try await eventually(timeout: .seconds(30)) {
            try store.jobs().filter { $0.state == .uploaded }.count == 3 && (try store.spoolHoldCount()) == 0
        }
        #expect(settled, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(5))
        let jobs = Dictionary(uniqueKeysWithValues: try store.jobs().map { ($0.originalName, $0) })
        #expect(jobs["IMG_0001.jpg"]?.destination == "default" && jobs["IMG_0001.jpg"]?.meta == [:],
                "alice's valid sidecar steers nothing")
        #expect(jobs["IMG_0002.jpg"]?.destination == "default", "alice's broken sidecar rejects nothing of bob's")
        #expect(jobs["IMG_0003.jpg"]?.destination == "evil" && jobs["IMG_0003.jpg"]?.meta == ["who": "bob"],
                "bob's own sidecar applies")
    }

    @Test("names of 243 to 255 bytes: the file is taken (it can have no sidecar); a rejected one gets shortened companions")
    func longNames() async throws {
        let sandbox = try Sandbox()
        try Dropper.openSpool(of: sandbox)
        let bob = try Dropper.bob
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        let long = String(repeating: "é", count: 120) + "-IMG.jpg"  // 248 bytes
        #expect(long.utf8.count == 248)
        try await bob.drop(long, size: 5_000, into: sandbox.spool)
        // A stale reason under the name a rejected `stale.jpg` would get: the new one goes beside, whole.
        try "old reason\n".write(toFile: sandbox.spool + "/.rejected/stale.jpg.reason.txt", atomically: false, encoding: .utf8)
        try await bob.run("mkfifo '\(sandbox.spool)/stale.jpg'")
        let fifo = String(repeating: "p", count: 251) + ".jpg"  // 255 bytes, and not a regular file
        try await bob.run("mkfifo '\(sandbox.spool)/\(fifo)'")
        let store = try store(sandbox)
        let rejected = sandbox.spool + "/.rejected"
        let settled = try await eventually(timeout: .seconds(30)) {
            let reasons = (try? FileManager.default.contentsOfDirectory(atPath: rejected))?.filter { $0.hasSuffix(".reason.txt") }
            return try store.jobs().first?.state == .uploaded && reasons?.count == 3
        }
        #expect(settled, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(5))
        #expect(try store.jobs().map(\.originalName) == [long])
        let names = try FileManager.default.contentsOfDirectory(atPath: rejected)
        let moved = try #require(names.first { !$0.hasSuffix(".reason.txt") && $0.hasPrefix("ppp") })
        #expect(moved.utf8.count <= 255 - Sidecar.suffix.utf8.count && moved.hasPrefix("ppp") && moved.hasSuffix(".jpg"),
                "shortened by the name rule so that its reason and sidecar names fit: \(moved)")
        let reason = try String(contentsOfFile: rejected + "/" + moved + ".reason.txt", encoding: .utf8)
        #expect(reason.contains("FIFO") && reason.contains(fifo), "the reason names the file as it was: \(reason)")
        #expect(try String(contentsOfFile: rejected + "/stale.jpg.reason.txt", encoding: .utf8) == "old reason\n")
        let stale = try String(contentsOfFile: rejected + "/stale.jpg.1.reason.txt", encoding: .utf8)
        #expect(stale.contains("FIFO") && FileManager.default.fileExists(atPath: rejected + "/stale.jpg.1"),
                "the new rejection takes a name whose reason is free: \(stale)")
    }

    @Test("sparse and oversized files are refused unread; large ones hold up no other owner's; SIGTERM mid-hash within 2 s")
    func boundedIntake() async throws {
        // The large files go to a destination that is not there: they wait, and no upload of gigabytes runs.
        let sandbox = try Sandbox(config: """
            [destinations.hold]
            protocol = "http-put"
            url = "http://127.0.0.1:9/{name}"
            """, spool: """
            max_file_size = "7GiB"
            sidecar_destinations = ["default", "hold"]
            """)
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice, bob = try Dropper.bob
        var daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        try await alice.run("cd '\(sandbox.spool)' && truncate -s 1T huge.jpg && truncate -s 100M holes.jpg")
        // Two large files of another owner's (the admin's: taken by rename, so only hashed; allocated, so not
        // sparse, and read as zeros without a disk read: seconds of hashing each), then bob's photo, named after
        // them: one by one it would wait for both.
        #expect(try ChildProcess.runBlocking(["sh", "-c", """
            cd '\(sandbox.spool)' && for n in 1 2; do echo '{"destination": "hold"}' > a-large-$n.bin.uploadq.json; done \
                && fallocate -l 6G a-large-1.bin && fallocate -l 6145M a-large-2.bin
            """], executable: "/bin/sh", environment: [:]).status == 0)
        try await Task.sleep(for: .milliseconds(600))
        try await bob.drop("b-photo.jpg", size: 30_000, into: sandbox.spool)
        let store = try store(sandbox)
        let bobs = try await eventually(timeout: .seconds(20)) {
            try store.jobs().contains { $0.originalName == "b-photo.jpg" }
        }
        let large = try store.jobs().filter { $0.originalName.hasPrefix("a-large") }
        #expect(bobs && large.isEmpty, """
            bob's photo taken while alice's large files are read: \(large.map(\.originalName)); \(daemon.log.suffix(3000))
            """)
        // Mid-hash (seconds of reading left): the daemon ends at once, and leaves them where they are.
        let stopped = await daemon.terminate()
        #expect(stopped < .seconds(2), "SIGTERM honoured in \(stopped)")
        #expect(try store.jobs().filter { $0.originalName.hasPrefix("a-large") }.isEmpty)
        for name in ["a-large-1.bin", "a-large-2.bin"] {
            #expect(FileManager.default.fileExists(atPath: sandbox.spool + "/" + name), "\(name) stays in the spool")
        }
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: sandbox.state + "/blobs").filter { $0.hasSuffix(".tmp") }
        #expect(leftovers.isEmpty, "no half copy is left: \(leftovers)")
        let rejected = sandbox.spool + "/.rejected"
        let huge = try String(contentsOfFile: rejected + "/huge.jpg.reason.txt", encoding: .utf8)
        #expect(huge.contains("larger than [spool] max_file_size (7GiB)"), "\(huge)")
        let holes = try String(contentsOfFile: rejected + "/holes.jpg.reason.txt", encoding: .utf8)
        #expect(holes.contains("sparse"), "\(holes)")

        // The next start takes both, whole.
        daemon = try DaemonProcess(sandbox: sandbox, name: "daemon-2")
        let taken = try await eventually(timeout: .seconds(90)) {
            try store.jobs().filter { $0.originalName.hasPrefix("a-large") && $0.size >= 6 << 30 }.count == 2
        }
        #expect(taken, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(5))
    }

    @Test("alice cannot change the queue's copy through a descriptor she kept: the server gets the bytes that were hashed")
    func queueCopyIsTheDaemons() async throws {
        let davPrefix = "/droppers-" + UUID().uuidString.prefix(8).lowercased()
        let sandbox = try Sandbox(config: """
            [destinations.put]
            protocol = "http-put"
            url = "\(try TestServers.davURL())\(davPrefix)/{job_id}-{name}"
            """, spool: "sidecar_destinations = [\"put\"]")
        try Dropper.openSpool(of: sandbox)
        let alice = try Dropper.alice
        let daemon = try DaemonProcess(sandbox: sandbox)
        #expect(await daemon.waitUntilReady(sandbox), "daemon log:\n\(daemon.log.suffix(2000))")
        // Nothing goes out until alice has done her worst.
        let offline = try await BinaryRunner.run(["link", "offline", "--config", sandbox.configPath])
        #expect(offline.status == 0, "\(offline.stderr)")
        let spool = sandbox.spool
        let (status, output) = try await alice.run("""
            exec python3 -c '
            import os, sys, time, hashlib
            spool = sys.argv[1]
            data = os.urandom(200000)
            with open(spool + "/.kept.jpg.tmp", "wb") as f:
                f.write(data)
            with open(spool + "/.s", "w") as f:
                f.write("{\\"destination\\": \\"put\\"}")
            os.rename(spool + "/.s", spool + "/kept.jpg.uploadq.json")
            fd = os.open(spool + "/.kept.jpg.tmp", os.O_RDONLY)
            os.rename(spool + "/.kept.jpg.tmp", spool + "/kept.jpg")
            deadline = time.time() + 30
            while os.path.exists(spool + "/kept.jpg") and time.time() < deadline:
                time.sleep(0.05)
            print("sha", hashlib.sha256(data).hexdigest())
            try:
                w = os.open("/proc/self/fd/%d" % fd, os.O_WRONLY)
                os.pwrite(w, bytes(4096), 0)
                os.close(w)
                print("rewrote the original")
            except OSError as error:
                print("refused", error.errno)
            ' '\(spool)'
            """)
        #expect(status == 0, "\(output)")
        let original = try #require(output.split(separator: "\n").first { $0.hasPrefix("sha ") }).dropFirst(4)
        let store = try store(sandbox)
        let job = try #require(try store.jobs().first)
        #expect(job.sha256 == String(original))
        let blob = try FileFingerprint.of(path: job.file)
        #expect(blob.owner == geteuid() && blob.mode & 0o777 == 0o600, "the queue's copy is the daemon's own")
        let online = try await BinaryRunner.run(["link", "unmetered", "--config", sandbox.configPath])
        #expect(online.status == 0, "\(online.stderr)")
        let uploaded = try await eventually(timeout: .seconds(30)) { try store.job(job.id)?.state == .uploaded }
        #expect(uploaded, "daemon log:\n\(daemon.log.suffix(3000))")
        #expect(await daemon.terminate() < .seconds(5))
        let stored = try TestServers.davRoot() + davPrefix + "/\(job.id)-kept.jpg"
        #expect(try sha256(ofFile: stored) == String(original), "the server holds the bytes whose SHA-256 was recorded")
    }

    @Test("bytes changed in place after intake (same size, mtime put back) are never uploaded, in every protocol")
    func changedInPlaceNeverUploaded() async throws {
        let destinations = try await PortalTests.Destinations.make()
        let sandbox = try Sandbox(config: destinations.config)
        var jobs: [JobID] = []
        for (index, destination) in ["default", "tus", "s3", "rufh", "put", "post"].enumerated() {
            let file = try sandbox.makeFile(sandbox.root + "/in/\(destination).jpg", size: 300_000, seed: UInt64(40 + index))
            jobs.append(try await BinaryRunner.enqueue(["--config", sandbox.configPath, "--destination", destination,
                                                        "--mode", "copy", file]))
        }
        // An S3 multipart upload too (its parts are read out of order, and hashed beside).
        let large = try sandbox.makeFile(sandbox.root + "/in/large.jpg", size: 12 << 20, seed: 49)
        jobs.append(try await BinaryRunner.enqueue(["--config", sandbox.configPath, "--destination", "s3",
                                                    "--mode", "copy", large]))
        let store = try store(sandbox)
        for id in jobs {
            // What a writer holding a descriptor does: other bytes, same size, and the mtime put back.
            let job = try #require(try store.job(id))
            var info = stat()
            #expect(stat(job.file, &info) == 0)
            let descriptor = open(job.file, O_WRONLY)
            #expect(descriptor >= 0)
            #expect(pwrite(descriptor, [UInt8](repeating: 0x5A, count: 4096), 4096, 8192) == 4096)
            var times = [info.st_atim, info.st_mtim]
            #expect(futimens(descriptor, &times) == 0)
            close(descriptor)
        }
        let daemon = try DaemonProcess(sandbox: sandbox)
        let settled = try await eventually(timeout: .seconds(60)) {
            try jobs.allSatisfy { try store.job($0)?.state == .failed }
        }
        #expect(settled, "daemon log:\n\(daemon.log.suffix(4000))")
        #expect(await daemon.terminate() < .seconds(5))
        for id in jobs {
            let job = try #require(try store.job(id))
            // RUFH sends the intake's digest with its last bytes (Repr-Digest): its server refuses them first.
            let refused = job.lastError?.contains("changed in place") == true
                || job.destination == "rufh" && job.lastError?.contains("Repr-Digest does not match") == true
            #expect(job.state == .failed && refused, "\(job.destination): \(job.state) \(job.lastError ?? "")")
            #expect(FileManager.default.fileExists(atPath: job.file), "the file is kept")
        }
    }

    @Test("helpers get neither the daemon's ambient CAP_LEASE nor its environment (a token program, busctl)")
    func helpersGetLittle() async throws {
        let sandbox = try Sandbox()
        #expect(chmod(sandbox.root, 0o711) == 0)
        let out = sandbox.root + "/helper"
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        #expect(chmod(out, 0o777) == 0)
        let script = out + "/probe.sh"
        try """
            #!/bin/sh
            grep -E '^Cap(Amb|Eff):' /proc/self/status > "\(out)/$1.txt"
            env >> "\(out)/$1.txt"
            echo token-from-probe
            """.write(toFile: script, atomically: true, encoding: .utf8)
        #expect(chmod(script, 0o755) == 0)
        let config = out + "/uploadq.toml"
        try """
            state_dir = "\(out)/state"
            [destinations.default]
            protocol = "http-put"
            url = "\(try TestServers.davURL())/helpers/{name}"
            token_command = ["\(script)", "token"]
            """.write(toFile: config, atomically: true, encoding: .utf8)
        // As the unit runs the daemon: its own user, CAP_LEASE ambient, a token in its environment.
        let (_, _, _) = try await ChildProcess.run([
            "setpriv", "--reuid=uq-alice", "--regid=\(Dropper.group)", "--init-groups", "--inh-caps=+lease",
            "--ambient-caps=+lease", "--", BinaryRunner.path, "doctor", "--config", config,
        ], executable: "/usr/bin/setpriv", environment: ["PATH": "/usr/bin:/bin", "UPLOADQ_TEST_SECRET": "s3cr3t-value"],
           limit: .seconds(60))
        let seen = try String(contentsOfFile: out + "/token.txt", encoding: .utf8)
        #expect(seen.contains("CapAmb:\t0000000000000000") && seen.contains("CapEff:\t0000000000000000"), "\(seen)")
        #expect(!seen.contains("s3cr3t-value"))

        // busctl (and nmcli) get a scrubbed environment too.
        setenv("UPLOADQ_TEST_SECRET", "s3cr3t-value", 1)
        defer { unsetenv("UPLOADQ_TEST_SECRET") }
        _ = SystemBus(busctl: script).call(["bus"])
        let bus = try String(contentsOfFile: out + "/--system.txt", encoding: .utf8)
        #expect(bus.contains("PATH=") && !bus.contains("s3cr3t-value"), "\(bus)")
    }

    @Test("`sudo uploadq enqueue` into another user's queue refuses, saying how, and leaves nothing of root's there")
    func cliAsAnotherUser() async throws {
        let sandbox = try Sandbox()
        let bob = try Dropper.bob
        #expect(chmod(sandbox.root, 0o755) == 0)
        let state = sandbox.root + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        #expect(chown(state, bob.uid, getgid()) == 0 && chmod(state, 0o700) == 0)
        let photo = try sandbox.makeFile(sandbox.root + "/in/p.jpg", size: 4000, seed: 95)
        #expect(chmod(sandbox.root + "/in", 0o755) == 0 && chmod(photo, 0o644) == 0)
        let refused = try await BinaryRunner.run(["enqueue", "--config", sandbox.configPath, photo])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("belongs to user uq-bob") && refused.stderr.contains("sudo -u uq-bob"),
                "\(refused.stderr)")
        let left = try FileManager.default.contentsOfDirectory(atPath: state)
        #expect(left.isEmpty, "nothing of root's in bob's queue: \(left)")
        // As the queue's own user, the same command works.
        let (status, output) = try await bob.run("\(BinaryRunner.path) enqueue --config '\(sandbox.configPath)' '\(photo)'")
        #expect(status == 0, "\(output)")
        #expect(try FileFingerprint.of(path: state + "/queue.sqlite").owner == bob.uid)
    }
}
