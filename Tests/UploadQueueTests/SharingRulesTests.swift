import CUploadQueueSystem
import Foundation
import Testing
@testable import UploadQueue

/// The rules that keep what droppers share bounded, each tested on its own: the API's connection limits, a
/// dropper's quota, the bounds of stored values, the intake's bounded read, what a copy's mode keeps, and opening a
/// file as its dropper would.
struct SharingRulesTests {
    @Test("a connection: a request has request_timeout from its first byte, an idle one idle_timeout, an answer none")
    func connectionDeadline() {
        var deadline = ConnectionDeadline(requestTimeout: .seconds(10), idleTimeout: .seconds(60))
        #expect(deadline.opened() == .start(.seconds(60)))
        #expect(deadline.received() == .start(.seconds(10)), "the first byte of a request")
        #expect(deadline.received() == .none, "more bytes of it: the same deadline")
        #expect(deadline.requestComplete() == .cancel && deadline.state == .answering)
        #expect(deadline.received() == .none, "a pipelined request while one is answered")
        #expect(deadline.requestComplete() == .cancel)
        #expect(deadline.answered() == .none, "one answer written, one still owed")
        #expect(deadline.answered() == .start(.seconds(60)) && deadline.state == .idle)
        #expect(deadline.received() == .start(.seconds(10)))
    }

    @Test("intakes at once count what the others under way admitted, against the room and the quota, until they go")
    func reservations() throws {
        let ledger = IntakeReservations()
        let none = OwnerQuota.Holding(jobs: 0, bytes: 0)
        let nothingHeld = { () throws(UploadQueueError) -> OwnerQuota.Holding in none }
        var first: IntakeReservations.Reservation? = try ledger.admit(
            copyBytes: 400, rowBytes: 100, size: 400, owner: 1001, holding: nothingHeld) { bytes, own, _ in
            #expect(bytes == 0 && own == none)
            return nil
        }
        let second = try ledger.admit(copyBytes: 0, rowBytes: 300, size: 300, owner: 1002,
                                      holding: nothingHeld) { bytes, own, _ in
            #expect(bytes == 500 && own.jobs == 0, "another owner's bytes count for the disk, not for its quota")
            return nil
        }
        #expect {
            _ = try ledger.admit(copyBytes: 0, rowBytes: 10, size: 10, owner: 1001, holding: nothingHeld) { bytes, own, _ in
                #expect(bytes == 800 && own == OwnerQuota.Holding(jobs: 1, bytes: 400))
                return UploadQueueError(.ownerQuota, "over")
            }
        } throws: { ($0 as? UploadQueueError)?.code == .ownerQuota }
        // Its copy written, the disk counts it: the reservation keeps its row's bytes and its place in the quota.
        first?.copied()
        first?.copied()
        _ = try ledger.admit(copyBytes: 0, rowBytes: 1, size: 1, owner: 1001, holding: nothingHeld) { bytes, own, _ in
            #expect(bytes == 400 && own == OwnerQuota.Holding(jobs: 1, bytes: 400), "once, its copy's bytes")
            return nil
        }
        #expect(first?.size == 400)
        first = nil
        _ = try ledger.admit(copyBytes: 0, rowBytes: 1, size: 1, owner: 1001, holding: nothingHeld) { bytes, own, _ in
            #expect(bytes == 300 && own.jobs == 0, "the first went: only the second is under way")
            return nil
        }
        withExtendedLifetime(second) {}
    }

    @Test("an owner's holding read while an intake under way is recorded is read again: the job counts in one of them")
    func reservationReadAgainAfterRelease() throws {
        let ledger = IntakeReservations()
        var underWay: IntakeReservations.Reservation? = try ledger.admit(
            copyBytes: 0, rowBytes: 10, size: 100, owner: 1001,
            holding: { () throws(UploadQueueError) in OwnerQuota.Holding(jobs: 0, bytes: 0) }) { _, _, _ in nil }
        // The first read finds the queue without the job under way; it is recorded (and its reservation goes)
        // before that read is judged: the second read finds it in the queue.
        var reads = 0
        _ = try ledger.admit(copyBytes: 0, rowBytes: 10, size: 50, owner: 1001, holding: {
            () throws(UploadQueueError) -> OwnerQuota.Holding in
            reads += 1
            if reads == 1 {
                underWay = nil
                return OwnerQuota.Holding(jobs: 0, bytes: 0)
            }
            return OwnerQuota.Holding(jobs: 1, bytes: 100)
        }) { _, own, held in
            #expect(own.jobs + held.jobs == 1 && own.bytes + held.bytes == 100, "the recorded job, counted once")
            return nil
        }
        #expect(reads == 2 && underWay == nil)
        // A ledger that releases on every read judges the third read as it is: admit ends.
        var churn: [IntakeReservations.Reservation] = []
        for _ in 0..<3 {
            churn.append(try ledger.admit(copyBytes: 0, rowBytes: 1, size: 1, owner: 1002,
                                          holding: { () throws(UploadQueueError) in OwnerQuota.Holding(jobs: 0, bytes: 0) })
                         { _, _, _ in nil })
        }
        reads = 0
        _ = try ledger.admit(copyBytes: 0, rowBytes: 1, size: 1, owner: 1001, holding: {
            () throws(UploadQueueError) -> OwnerQuota.Holding in
            reads += 1
            churn.removeLast()
            return OwnerQuota.Holding(jobs: 0, bytes: 0)
        }) { _, _, _ in nil }
        #expect(reads == 3 && churn.isEmpty)
    }

    @Test("held spool files recorded: a quota's 100 an owner, 1,000 in all; a foreign sidecar's each, kept at a start")
    func spoolHoldRows() throws {
        let store = QueueStore(database: try QueueDatabase.inMemory())
        let since = Date(timeIntervalSince1970: 1_800_000_000)
        func hold(_ name: String, owner: UInt32, _ reason: QueueStatus.SpoolHold.Reason = .ownerQuota,
                  _ message: String = "held", inode: Int64 = 7) -> QueueStore.RecordedSpoolHold {
            QueueStore.RecordedSpoolHold(hold: QueueStatus.SpoolHold(name: name, ownerUID: owner, reason: reason,
                                                                     message: message, since: since),
                                         device: 2049, inode: inode)
        }
        // Bob over his quota: 100 of his files listed, the 101st not.
        for index in 0..<100 {
            #expect(try store.holdSpoolFile(hold("b\(index)", owner: 1002)) == .recorded)
        }
        #expect(try store.holdSpoolFile(hold("b100", owner: 1002)) == .ownerFull)
        #expect(try store.holdSpoolFile(hold("b0", owner: 1002, .ownerQuota, "another reason")) == .recorded,
                "a file recorded already is updated, whatever the count")
        // 150 of his files beside alice's sidecars: each recorded, whatever his quota's count.
        for index in 0..<150 {
            #expect(try store.holdSpoolFile(hold("f\(index)", owner: 1002, .foreignSidecar, inode: Int64(index))) == .recorded)
        }
        for user in UInt32(1003)...1011 {
            for index in 0..<100 {
                #expect(try store.holdSpoolFile(hold("u\(user)-\(index)", owner: user)) == .recorded)
            }
        }
        #expect(try store.spoolHoldCount() == 1150)
        #expect(try store.holdSpoolFile(hold("late", owner: 1012)) == .allFull, "1,000 quota holds in all")
        #expect(try store.holdSpoolFile(hold("late-foreign", owner: 1012, .foreignSidecar)) == .recorded)
        // A foreign sidecar's file that then waits for its owner's quota counts against the bounds; refused, its
        // row goes (it no longer says why the file waits).
        #expect(try store.holdSpoolFile(hold("f0", owner: 1002)) == .allFull)
        #expect(try store.spoolHolds(owner: 1002, limit: 1000).count == 249)
        #expect(try store.spoolHolds(owner: 1002, limit: 1000).first { $0.name == "b0" }?.message == "another reason")

        // A start looks at the quota holds afresh; the foreign sidecars' stay, each with its file. A damaged row goes.
        try store.writer.write { db in
            try db.execute(sql: """
                INSERT INTO spool_hold (name, owner_uid, reason, message, since, file_device, file_inode)
                VALUES ('damaged', 'x', 'foreign-sidecar', 'held', '2027-01-15 08:00:00.000', 2049, 1)
                """)
        }
        let resumed = try store.resumeSpoolHolds()
        #expect(resumed.count == 150)
        #expect(resumed.allSatisfy { $0.hold.reason == .foreignSidecar && $0.device == 2049 })
        #expect(resumed.first { $0.hold.name == "f9" }?.inode == 9)
        #expect(try store.spoolHoldCount() == 150)
        #expect(try store.holdSpoolFile(hold("b0", owner: 1002)) == .recorded)
    }

    @Test("a dropper's slots: a few at once, the next refused with 429; a slot goes back once, the admin takes none")
    func perUserSlots() throws {
        let slots = PerUserSlots(limit: 2, what: "listings")
        let alice = ControlPeer(uid: 1001, gid: 1001, pid: 1, queueOwner: 0)
        let first = try slots.slot(alice)
        let second = try slots.slot(alice)
        #expect { try slots.take(alice) } throws: { ($0 as? ControlAPIError)?.status == 429 }
        first.give()
        first.give()
        var third: PerUserSlots.Slot? = try slots.slot(alice)
        #expect { try slots.take(alice) } throws: { ($0 as? ControlAPIError)?.status == 429 }
        // A slot let go without a word (a reply dropped unwritten) goes back too.
        third = nil
        #expect(third == nil)
        let fourth = try slots.slot(alice)
        withExtendedLifetime((second, fourth)) {}
        let root = ControlPeer(uid: 0, gid: 0, pid: 1, queueOwner: 999)
        for _ in 0..<10 { try slots.take(root) }
    }

    @Test("connections: a dropper up to its own cap and never into the admin's; the admin up to the total")
    func connectionCaps() {
        var settings = Configuration.ControlSettings()
        settings.maxConnections = 10
        settings.adminConnections = 4
        settings.maxConnectionsPerUser = 4
        let mayOpen = ControlServer.Registry.mayOpen
        #expect(mayOpen(false, 3, 5, settings) && !mayOpen(false, 4, 5, settings), "its own cap")
        #expect(!mayOpen(false, 0, 6, settings), "the last four are the admin's")
        #expect(mayOpen(true, 9, 9, settings) && !mayOpen(true, 0, 10, settings), "the admin, up to the total")
    }

    @Test("a dropper's quota: jobs and bytes, a percentage of the state disk, 0 for none")
    func ownerQuota() {
        var limits = Configuration.Limits()
        limits.ownerPendingJobs = 3
        limits.ownerPendingBytes = .percent(25)
        let quota = OwnerQuota(limits, diskBytes: 4 << 30)
        #expect(quota.bytes == 1 << 30)
        #expect(quota.refusal(holding: .init(jobs: 2, bytes: 0), adding: 10) == nil)
        let full = quota.refusal(holding: .init(jobs: 3, bytes: 0), adding: 10)
        #expect(full?.contains("owner_pending_jobs") == true && full?.contains("(3)") == true, "\(full ?? "")")
        let heavy = quota.refusal(holding: .init(jobs: 0, bytes: (1 << 30) - 5), adding: 10)
        #expect(heavy?.contains("owner_pending_bytes") == true, "\(heavy ?? "")")
        limits.ownerPendingJobs = 0
        limits.ownerPendingBytes = .bytes(0)
        let none = OwnerQuota(limits, diskBytes: 4 << 30)
        #expect(none.jobs == nil && none.bytes == nil)
        #expect(none.refusal(holding: .init(jobs: 1_000_000, bytes: 1 << 40), adding: 1 << 30) == nil)
    }

    @Test("stored values: meta, after and patches are bounded, whichever door they come through")
    func storedValues() throws {
        let big = String(repeating: "x", count: 4096)
        #expect(throws: Never.self) { try StoredValueLimits.check(meta: ["a": big, "b": big, "c": big]) }
        for (meta, bound) in [(["a": big + "x"], "4 KiB"), (["": "x"], "1 to 128"),
                              ([String(repeating: "k", count: 129): "x"], "1 to 128"),
                              (Dictionary(uniqueKeysWithValues: (0..<65).map { ("k\($0)", "v") }), "at most 64"),
                              (Dictionary(uniqueKeysWithValues: (0..<5).map { ("k\($0)", big) }), "16 KiB in all")] {
            #expect {
                try StoredValueLimits.check(meta: meta)
            } throws: { error in
                (error as? UploadQueueError)?.code == .invalidArgument && "\(error)".contains(bound)
            }
        }
        #expect(throws: UploadQueueError.self) {
            try StoredValueLimits.check(after: [String(repeating: "k", count: 256)])
        }
        #expect(throws: UploadQueueError.self) {
            try StoredValueLimits.check(after: (0..<1001).map { "\($0)" })
        }
        let longURL = "https://api.example.com/" + String(repeating: "p", count: 2048)
        #expect(throws: UploadQueueError.self) { try PatchAuthority.check(PatchTarget(url: longURL)) }
        let headers = Dictionary(uniqueKeysWithValues: (0..<33).map { ("X-H\($0)", "v") })
        #expect(throws: UploadQueueError.self) {
            try PatchAuthority.check(PatchTarget(url: "https://api.example.com/r", headers: headers))
        }
        #expect(throws: Never.self) { try PatchAuthority.check(PatchTarget(url: "https://api.example.com/r")) }
    }

    @Test("the intake's read: at most one byte past the size it checked; a file that grew or shrank is refused")
    func boundedRead() throws {
        let sandbox = try Sandbox()
        let path = try sandbox.makeFile(sandbox.root + "/grown.jpg", size: 3 << 20, seed: 40)
        let descriptor = open(path, O_RDONLY)
        defer { close(descriptor) }
        var passed: Int64 = 0
        #expect {
            // Admitted at 1 MiB + 5 bytes; the file holds 3 MiB.
            _ = try SHA256Digest.ofFile(descriptor: descriptor, path: path, size: (1 << 20) + 5) { block, _ in
                passed += Int64(block.count)
            }
        } throws: { error in
            (error as? UploadQueueError)?.code == .sourceUnstable && "\(error)".contains("grew")
        }
        #expect(passed <= (1 << 20) + 5, "copied past the admitted size: \(passed)")
        #expect {
            _ = try SHA256Digest.ofFile(descriptor: descriptor, path: path, size: 4 << 20)
        } throws: { error in
            (error as? UploadQueueError)?.code == .sourceUnstable && "\(error)".contains("shrank")
        }
        let whole = try SHA256Digest.ofFile(descriptor: descriptor, path: path, size: 3 << 20)
        #expect(whole == (try sha256(ofFile: path)))
    }

    @Test("a file of /proc or /sys is refused before a byte is read, through the library as through any door")
    func pseudoFileSystems() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        for path in ["/proc/self/status", "/proc/self/pagemap", "/sys/kernel/mm/transparent_hugepage/enabled"] {
            guard FileManager.default.fileExists(atPath: path) else { continue }
            await #expect {
                try await queue.enqueue(path)
            } throws: { error in
                (error as? UploadQueueError)?.code == .notRegularFile && "\(error)".contains("pseudo file system")
            }
        }
        #expect(try queue.store.jobs().isEmpty)
        let blobs = (try? FileManager.default.contentsOfDirectory(atPath: sandbox.state + "/blobs")) ?? []
        #expect(blobs.isEmpty, "nothing was copied: \(blobs)")
    }

    @Test("a file adopted by move and later found larger than admitted is refused as changed: nothing more is sent")
    func adoptedFileGrows() async throws {
        // The file grows before the queue runs: its upload finds it larger than the size recorded.
        let sandbox = try Sandbox()
        let path = try sandbox.makeFile(sandbox.root + "/in/moved.jpg", size: 100_000, seed: 43)
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let id = try await queue.enqueue(path, mode: .move)
        let blob = try #require(try await queue.job(id)).file
        #expect(!FileManager.default.fileExists(atPath: path) && FileManager.default.fileExists(atPath: blob))
        let handle = try #require(FileHandle(forWritingAtPath: blob))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(repeating: 7, count: 50_000))
        try handle.close()
        let runner = Task { try await queue.run() }
        defer { runner.cancel() }
        let failed = try await eventually(timeout: .seconds(30)) {
            try queue.store.job(id).map { $0.state == .failed && $0.permanent } ?? false
        }
        let job = try queue.store.job(id)
        #expect(failed, "\(String(describing: job))")
        #expect(try queue.store.job(id)?.lastError?.contains("size 100000 → 150000") == true)
        #expect(sandbox.deliveredFiles().isEmpty, "nothing delivered: \(sandbox.deliveredFiles())")
    }

    @Test("a copy keeps its source's bits less write, the group's only in the same group; file_mode narrows")
    func modes() {
        var info = stat()
        info.st_mode = S_IFREG | 0o664
        info.st_gid = 100
        let file = FileFingerprint(info)
        #expect(file.modeKept(inGroup: 100) == 0o644)
        #expect(file.modeKept(inGroup: 200) == 0o604, "another group gains nothing")
        info.st_mode = S_IFREG | 0o600
        #expect(FileFingerprint(info).modeKept(inGroup: 100) == 0o600)
        let narrowed = Destination.LocalDirectorySettings(directory: "/srv", fileMode: 0o640)
        #expect(narrowed.deliveredMode(kept: 0o644) == 0o640 && narrowed.deliveredMode(kept: 0o600) == 0o600)
        #expect(Destination.LocalDirectorySettings(directory: "/srv").deliveredMode(kept: 0o604) == 0o604)
    }

    /// A POSIX access ACL as the kernel stores it (`system.posix_acl_access`): version 2, then (tag, perm, id).
    static func acl(_ entries: [(tag: UInt16, perm: UInt16, id: UInt32)]) -> [UInt8] {
        var bytes: [UInt8] = [2, 0, 0, 0]
        for entry in entries {
            bytes += withUnsafeBytes(of: entry.tag.littleEndian, Array.init)
            bytes += withUnsafeBytes(of: entry.perm.littleEndian, Array.init)
            bytes += withUnsafeBytes(of: entry.id.littleEndian, Array.init)
        }
        return bytes
    }

    /// Opens `path` as `access` would, and gives the owner of what it opened.
    static func openAs(_ path: String, peer access: DropperAccess) throws -> UInt32 {
        let descriptor = try DropperRules.open(path, as: access)
        defer { close(descriptor) }
        return try FileFingerprint.of(descriptor: descriptor, path: path).owner
    }

    @Test("a file opened as its dropper: every folder searchable and the file readable by it, by modes and ACLs")
    func openAsUser() throws {
        let alice = try Dropper.alice, bob = try Dropper.bob
        let sandbox = try Sandbox()
        #expect(chmod(sandbox.root, 0o711) == 0)
        let folder = sandbox.root + "/box"
        let path = try sandbox.makeFile(folder + "/photo.jpg", size: 1000, seed: 41)
        #expect(chown(path, alice.uid, 0) == 0 && chmod(path, 0o600) == 0)
        let sandboxConfiguration = try sandbox.configuration()
        let rules = DropperRules(configuration: sandboxConfiguration, spool: try #require(sandboxConfiguration.spool))
        let peer = { (dropper: Dropper) in DropperAccess(uid: dropper.uid, gid: 65_534, groups: [], rules: rules) }
        #expect(chmod(folder, 0o755) == 0)
        #expect(try Self.openAs(path, peer: peer(alice)) == alice.uid)
        #expect(throws: UploadQueueError.self, "bob may not read alice's 0600 file") {
            try Self.openAs(path, peer: peer(bob))
        }
        // The daemon (root) reaches the folder; alice does not.
        #expect(chmod(folder, 0o700) == 0)
        #expect {
            try Self.openAs(path, peer: peer(alice))
        } throws: { error in
            (error as? UploadQueueError)?.code == .forbidden && "\(error)".contains("you may not open it yourself")
        }
        // An ACL that lets alice search it: she does; bob, named with nothing, does not.
        let acl = Self.acl([(0x01, 7, 0), (0x02, 1, alice.uid), (0x02, 0, bob.uid), (0x04, 0, 0), (0x10, 7, 0),
                            (0x20, 1, 0)])
        let hex = acl.map { String(format: "%02x", $0) }.joined()
        let set = try ChildProcess.runBlocking(["python3", "-c", """
            import os, sys; os.setxattr(sys.argv[1], "system.posix_acl_access", bytes.fromhex(sys.argv[2]))
            """, folder, hex], executable: "/usr/bin/python3", environment: ["PATH": "/usr/bin:/bin"])
        #expect(set.status == 0, "ACLs on the test's disk: \(String(decoding: set.stderr, as: UTF8.self))")
        #expect(try Self.openAs(path, peer: peer(alice)) == alice.uid)
        #expect(chmod(path, 0o644) == 0)
        #expect(throws: UploadQueueError.self, "bob's entry gives him nothing, though others may search") {
            try Self.openAs(path, peer: peer(bob))
        }
        // A group she may be in counts both ways: mode 0604 shuts its members out, so she is refused while her
        // groups are not known (more than SO_PEERGROUPS holds), and let in as a stranger once they are.
        #expect(chmod(folder, 0o755) == 0 && chown(path, bob.uid, 0) == 0 && chmod(path, 0o604) == 0)
        var uncertain = peer(alice)
        #expect(try Self.openAs(path, peer: uncertain) == bob.uid)
        uncertain.groupsUncertain = .any
        #expect(throws: UploadQueueError.self, "maybe in group 0, which may not read") {
            try Self.openAs(path, peer: uncertain)
        }
        uncertain.groupsUncertain = .groupZero
        #expect(throws: UploadQueueError.self, "maybe in group 0 alone") { try Self.openAs(path, peer: uncertain) }
        #expect(chmod(path, 0o644) == 0)
        #expect(try Self.openAs(path, peer: uncertain) == bob.uid, "in it or not, she may read")
        // The same through an ACL: a named group she may be in, with nothing, shuts her out while her groups are
        // not known; known (she is not in it), the others' entry lets her read.
        let fileACL = Self.acl([(0x01, 6, 0), (0x04, 4, 0), (0x08, 0, 4242), (0x10, 4, 0), (0x20, 4, 0)])
        let setFile = try ChildProcess.runBlocking(["python3", "-c", """
            import os, sys; os.setxattr(sys.argv[1], "system.posix_acl_access", bytes.fromhex(sys.argv[2]))
            """, path, fileACL.map { String(format: "%02x", $0) }.joined()], executable: "/usr/bin/python3",
            environment: ["PATH": "/usr/bin:/bin"])
        #expect(setFile.status == 0, "\(String(decoding: setFile.stderr, as: UTF8.self))")
        uncertain.groupsUncertain = .none
        #expect(try Self.openAs(path, peer: uncertain) == bob.uid, "in no group of the ACL's: the others' entry")
        uncertain.groupsUncertain = .groupZero
        #expect(try Self.openAs(path, peer: uncertain) == bob.uid, "group 0's entry and the others' both read")
        uncertain.groupsUncertain = .any
        #expect(throws: UploadQueueError.self, "maybe in group 4242, whose entry gives nothing") {
            try Self.openAs(path, peer: uncertain)
        }
        let cleared = try ChildProcess.runBlocking(["python3", "-c", """
            import os, sys; os.removexattr(sys.argv[1], "system.posix_acl_access")
            """, path], executable: "/usr/bin/python3", environment: ["PATH": "/usr/bin:/bin"])
        #expect(cleared.status == 0)
        #expect(chown(path, alice.uid, 0) == 0 && chmod(path, 0o600) == 0)
        // A symbolic link on the way is followed as the kernel would; a final one is not.
        #expect(symlink(folder, sandbox.root + "/link") == 0 && symlink(path, sandbox.root + "/final.jpg") == 0)
        #expect(try Self.openAs(sandbox.root + "/link/photo.jpg", peer: peer(alice)) == alice.uid)
        #expect(throws: UploadQueueError.self) { try Self.openAs(sandbox.root + "/final.jpg", peer: peer(alice)) }
        #expect(throws: UploadQueueError.self, "a FIFO is not opened") {
            #expect(mkfifo(folder + "/fifo", 0o666) == 0)
            try Self.openAs(folder + "/fifo", peer: peer(alice))
        }
    }

    @Test("SO_PEERGROUPS' answer: ascending groups then zeros; group 0 alone cannot be told from none")
    func peerGroups() {
        var answer = uploadq_peer_groups()
        withUnsafeMutableBytes(of: &answer.groups) { raw in
            let groups = raw.bindMemory(to: gid_t.self)
            groups[0] = 0
            groups[1] = 27
            groups[2] = 1002
        }
        #expect(ControlPeer.groups(in: answer).groups == [0, 27, 1002] && ControlPeer.groups(in: answer).uncertain == .none)
        withUnsafeMutableBytes(of: &answer.groups) { raw in raw.bindMemory(to: gid_t.self)[0] = 5 }
        #expect(ControlPeer.groups(in: answer).groups == [5, 27, 1002])
        let zeros = ControlPeer.groups(in: uploadq_peer_groups())
        #expect(zeros.groups.isEmpty && zeros.uncertain == .groupZero, "none, or group 0 alone")
    }

    @Test("no destination named: `default`, else the only one; several and no default: say which to name")
    func implicitDestination() async throws {
        let sandbox = try Sandbox()
        let path = try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 1000, seed: 42)
        let one = try ConfigurationLoader.parse("""
            state_dir = "state"
            [destinations.photos]
            protocol = "file"
            url = "file://photos"
            """, file: sandbox.configPath, baseDirectory: sandbox.root)
        let queue = try UploadQueue(configuration: one)
        let id = try await queue.enqueue(path)
        #expect(try await queue.job(id)?.destination == "photos")
        let two = try ConfigurationLoader.parse("""
            state_dir = "state2"
            [destinations.photos]
            protocol = "file"
            url = "file://photos"
            [destinations.archive]
            protocol = "file"
            url = "file://archive"
            """, file: sandbox.configPath, baseDirectory: sandbox.root)
        await #expect {
            try await UploadQueue(configuration: two).enqueue(path)
        } throws: { error in
            (error as? UploadQueueError)?.code == .unknownDestination && "\(error)".contains("archive, photos")
                && "\(error)".contains("name one")
        }
        #expect(throws: ConfigurationError.self, "a spool without a destination, and none to take its place") {
            try ConfigurationLoader.parse("""
                [spool]
                dir = "spool"
                [destinations.photos]
                protocol = "file"
                url = "file://photos"
                [destinations.archive]
                protocol = "file"
                url = "file://archive"
                """, file: sandbox.configPath, baseDirectory: sandbox.root)
        }
    }
}
