import CUploadQueueSystem
import Foundation
import Logging
import ServiceLifecycle

/// Watches the spool directory and takes each finished file into the queue (`move`), or moves it to
/// `SPOOL/.rejected/` with a `NAME.reason.txt` when it cannot be accepted. Never deletes anything; never stops
/// over a bad file.
///
/// The watch is added before the start-up scan, so no file slips between the two. A file is taken once it has
/// been closed by its writer and left unchanged for `quiet_period`; dot-names and `*.tmp`/`*.part`/`*.partial`
/// wait until renamed. A timer rescan (and a rescan after an inotify overflow) catches anything events missed.
package actor SpoolWatcher: Service {
    /// Runs on a thread of its own (`ActorThread`): the SQLite it calls blocks that thread, never the shared pool.
    private let thread = ActorThread(name: "uploadq-spool")
    /// This actor's thread: its SQLite calls block it alone, never Swift's shared threads.
    package nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    private struct Candidate {
        var fingerprint: FileFingerprint?
        var lastChange: ContinuousClock.Instant
        /// A writer created or modified the file and has not closed it yet.
        var writing: Bool
        var notBefore: ContinuousClock.Instant
        var failures = 0
        /// Refused for lack of room (logged once).
        var waitingForRoom = false
        /// Renamed into the spool whole (and not written since): on a network file system, taken after the
        /// ordinary quiet period.
        var renamedIn = false
    }

    private let spool: Configuration.Spool
    /// What a dropper's file, and what its sidecar chooses, must be (the API's enqueue applies the same).
    private let rules: DropperRules
    private let queue: UploadQueue
    private let logger: Logger
    private var candidates: [String: Candidate] = [:]
    /// Signalled when an event changes a candidate, so the timer looks at its due time again.
    private let candidatesChanged = WakeSignal()
    private var rejectedDirectory: String { (spool.directory as NSString).appendingPathComponent(".rejected") }
    /// Whether the spool lies on a network file system (looked at when the watch starts).
    private var onNetworkFileSystem = false
    private var watchHealthy = false
    /// Why the intake is paused (the disk is below `min_free_space`), while it is; files then stay in the spool.
    private var diskLow: String?
    private var lastSpaceCheck: ContinuousClock.Instant?
    /// Sidecars without their file, and since when this process has seen them so.
    private var straySidecars: [String: ContinuousClock.Instant] = [:]
    /// When a name that is not UTF-8 last made the spool rescan.
    private var lastUndecodableScan: ContinuousClock.Instant?
    /// Entries that could not be moved to `.rejected/` (said once each): left alone while they stay.
    private var unmovable: Set<[UInt8]> = []
    /// Which files are being taken, and whose turn is next.
    private var turns = IntakeTurns()
    /// A file left where it is for a reason of its owner's.
    private struct HeldFile {
        /// The hold, and the file it holds (its device and inode).
        var record: QueueStore.RecordedSpoolHold
        /// Whether `spool_hold` lists it (it may not, when too many are held for a quota).
        var recorded: Bool
        var hold: QueueStatus.SpoolHold { record.hold }

        /// Whether `file` is the file held: a hold is the file's, not its name's (another may take the name).
        func holds(_ file: FileFingerprint) -> Bool {
            record.device == file.device && record.inode == file.inode && record.hold.ownerUID == file.owner
        }
    }

    /// Files held, by name (recorded in `spool_hold` for `status` and the API; said in the log once a reason).
    private var held: [String: HeldFile] = [:]
    /// `spool_hold` has as many quota holds as it records: no unrecorded one is tried again until one is released.
    private var holdRowsFull = false
    /// Owners with `QueueStore.spoolHoldRowsPerOwner` quota holds recorded: theirs are not tried again until one
    /// of theirs is released (another's still are).
    private var holdRowsFullOf: Set<UInt32> = []
    /// How often a held file is looked at again.
    static let holdRecheck = Duration.seconds(5)
    /// The intakes under way, by name.
    private var running: [String: Task<Void, Never>] = [:]
    /// Stops the reading of files under way when the watch ends.
    private let stop = IntakeStop()
    /// How many times a file may fail to be taken, for a reason of its own (it cannot be read), before it is
    /// rejected rather than tried again for ever.
    static let triesBeforeRejecting = 5

    package init(spool: Configuration.Spool, queue: UploadQueue, logger: Logger) {
        self.spool = spool
        rules = DropperRules(configuration: queue.configuration, spool: spool)
        self.queue = queue
        self.logger = logger
    }

    /// Watches until cancelled or a graceful shutdown begins. Files being read then are left where they are (within
    /// a block of 1 MiB), to be taken at the next start.
    package func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                try await self.watch()
            }
        } catch {
            await endIntakes()
            throw error
        }
        await endIntakes()
    }

    /// Stops the intakes under way and waits for them.
    private func endIntakes() async {
        stop.stop()
        for task in running.values { await task.value }
    }

    private func watch() async throws {
        try BlobStore.makeDirectory(spool.directory)
        try makeRejectedDirectory()
        // What an earlier run held is found again, or not; a file held for another's sidecar waits on for its
        // owner (the first scan forgets those that are gone).
        for record in (try? queue.store.resumeSpoolHolds()) ?? [] {
            held[record.hold.name] = HeldFile(record: record, recorded: true)
        }
        onNetworkFileSystem = uploadq_is_network_fs(spool.directory) == 1
        if onNetworkFileSystem {
            logger.notice("""
                spool: \(spool.directory) is on a network file system: a file not renamed in is taken once unchanged \
                for \(max(spool.quietPeriod, spool.networkQuietPeriod)) ([spool] network_quiet_period)
                """)
        }
        while !Task.isCancelled {
            let inotify: InotifyWatch?
            do {
                inotify = try InotifyWatch(directory: spool.directory)
                watchHealthy = true
            } catch {
                logger.warning("spool: no inotify watch (\(error)); polling every 2 s instead")
                inotify = nil
                watchHealthy = false
            }
            scan()
            for name in held.keys where candidates[name] == nil { release(name) }
            await withTaskGroup(of: Void.self) { group in
                if let inotify {
                    group.addTask {
                        for await event in inotify.events {
                            if await self.handle(event) { return }
                        }
                    }
                }
                group.addTask { await self.tick() }
                await group.next()
                group.cancelAll()
            }
            withExtendedLifetime(inotify) {}
            if !Task.isCancelled {
                try? BlobStore.makeDirectory(spool.directory)
                try? makeRejectedDirectory()
            }
        }
    }

    /// Timed work: takes each file the moment its quiet period ends (woken by the events that change a
    /// candidate), and rescans on the timer. A file that was due but stays (still open for writing, no room, a
    /// failure's back-off) is looked at again every `recheckInterval`. Returns when cancelled.
    private func tick() async {
        var lastScan = ContinuousClock.now
        while !Task.isCancelled {
            let interval = watchHealthy ? spool.rescanInterval : min(spool.rescanInterval, .seconds(2))
            if ContinuousClock.now - lastScan >= interval {
                scan()
                lastScan = .now
            }
            let pass = ContinuousClock.now
            await takeQuietFiles()
            let now = ContinuousClock.now
            var next = lastScan + interval
            for candidate in candidates.values {
                let due = dueTime(of: candidate)
                next = min(next, due > now ? due : now + Self.recheckInterval)
            }
            // A writer's events come by the hundred: passes at most every 10 ms.
            await candidatesChanged.wait(timeout: max(next - now, .milliseconds(1)), spacedFrom: pass,
                                         by: .milliseconds(10))
        }
    }

    /// When a candidate may be taken, as far as time goes: once its quiet period is over, not before its back-off
    /// ends; at once while it has no fingerprint yet. (A writer that keeps it open then keeps it out: `WriterCheck`.)
    private func dueTime(of candidate: Candidate) -> ContinuousClock.Instant {
        guard candidate.fingerprint != nil else { return candidate.notBefore }
        return max(candidate.lastChange + requiredQuiet(candidate), candidate.notBefore)
    }

    private func requiredQuiet(_ candidate: Candidate) -> Duration {
        WriterCheck.requiredQuiet(quietPeriod: spool.quietPeriod, networkQuietPeriod: spool.networkQuietPeriod,
                                  onNetworkFileSystem: onNetworkFileSystem, renamedIn: candidate.renamedIn)
    }

    /// How often a file held open by a writer is asked about again.
    static let heldOpenRecheck = Duration.seconds(1)

    /// How often a file that is due but could not be taken is looked at again.
    static let recheckInterval = Duration.milliseconds(200)

    /// Applies one inotify event; returns true when the watch is gone and must be re-created.
    private func handle(_ event: InotifyWatch.Event) -> Bool {
        let now = ContinuousClock.now
        switch event {
        case .created(let name):
            // A hard link, symlink or FIFO appears whole; only a new regular file with one name has a writer.
            let path = (spool.directory as NSString).appendingPathComponent(name)
            let fresh = (try? FileFingerprint.of(path: path)).map { $0.isRegularFile && $0.links == 1 } ?? true
            note(name, writing: fresh, at: now)
        case .modified(let name):
            note(name, writing: true, at: now)
        case .closedWrite(let name):
            note(name, writing: false, at: now)
        case .movedIn(let name):
            note(name, writing: false, moved: true, at: now)
        case .overflow:
            logger.warning("spool: inotify queue overflowed; rescanning")
            // The events lost may be the closes that ended the writes: the kernel is asked afresh for each.
            for name in candidates.keys { candidates[name]?.writing = false }
            scan()
        case .undecodableName:
            // One event per write to such a name: a rescan at most once a second.
            if lastUndecodableScan.map({ now - $0 >= .seconds(1) }) ?? true {
                lastUndecodableScan = now
                scan()
            }
        case .watchLost:
            logger.warning("spool: the watched directory went away; re-creating it", metadata: ["path": "\(spool.directory)"])
            return true
        }
        return false
    }

    private func note(_ name: String, writing: Bool, moved: Bool = false, at now: ContinuousClock.Instant) {
        guard Self.isCandidateName(name), !unmovable.contains(Array(name.utf8)) else { return }
        var candidate = candidates[name] ?? Candidate(fingerprint: nil, lastChange: now, writing: writing, notBefore: now)
        candidate.writing = writing
        candidate.lastChange = now
        candidate.renamedIn = moved
        // A file renamed in or closed is measured now, so its quiet period counts from this event (a later look
        // that finds it different starts the period again).
        if !writing {
            candidate.fingerprint = try? FileFingerprint.of(path: (spool.directory as NSString).appendingPathComponent(name))
        }
        candidates[name] = candidate
        candidatesChanged.signal()
    }

    /// Adds every eligible name in the spool (files present at start-up, after an overflow, on the timer), and
    /// sets aside sidecars whose file never came or is long gone.
    private func scan() {
        guard let entries = SpoolEntries.read(spool.directory) else { return }
        let names = entries.names
        let now = ContinuousClock.now
        unmovable.formIntersection(Set(names.map { Array($0.utf8) } + entries.undecodable))
        for name in names where Self.isCandidateName(name) && candidates[name] == nil && !unmovable.contains(Array(name.utf8)) {
            candidates[name] = Candidate(fingerprint: nil, lastChange: now, writing: false, notBefore: now)
        }
        for raw in entries.undecodable where !unmovable.contains(raw) {
            // Hidden and temporary names wait to be renamed, whatever their encoding.
            let visible = String(decoding: raw, as: UTF8.self)
            guard Self.isCandidateName(visible) || visible.hasSuffix(Sidecar.suffix) && !visible.hasPrefix(".") else {
                continue
            }
            rejectUndecodable(raw)
        }
        // Aged on the monotonic clock from when this process first saw them alone: file times mean nothing
        // after a clock step or a device that was off for a day.
        let present = Set(names)
        var stray: [String: ContinuousClock.Instant] = [:]
        for name in names where name.hasSuffix(Sidecar.suffix) && !name.hasPrefix(".") {
            let file = String(name.dropLast(Sidecar.suffix.count))
            guard !present.contains(file), Self.isCandidateName(file) else { continue }
            let since = straySidecars[name] ?? now
            stray[name] = since
            if now - since > Self.straySidecarAge {
                stray[name] = nil
                reject(name, reason: "no file \(file) came with this sidecar within a day; "
                    + "put the file and its sidecar back together")
            }
        }
        straySidecars = stray
        candidatesChanged.signal()
    }

    /// How long a sidecar may wait for its file before it is set aside: a day, long past any slow copy of a
    /// large file under a temporary name.
    static let straySidecarAge: Duration = .seconds(86_400)

    /// Names the spool takes: not hidden, not a temporary name, not a sidecar.
    static func isCandidateName(_ name: String) -> Bool {
        !name.hasPrefix(".") && !name.hasSuffix(".tmp") && !name.hasSuffix(".part") && !name.hasSuffix(".partial")
            && !name.hasSuffix(Sidecar.suffix)
    }

    /// Whether the intake may take files now: false while the queue's disk is below `min_free_space` (measured
    /// at most once a second). Pausing and resuming are logged once each.
    private func hasRoom(at now: ContinuousClock.Instant) -> Bool {
        if let last = lastSpaceCheck, now - last < .seconds(1) { return diskLow == nil }
        lastSpaceCheck = now
        if let low = queue.configuration.freeSpaceGuard.check() {
            pause(String(describing: low))
            return false
        }
        if diskLow != nil {
            diskLow = nil
            logger.info("spool: there is room again; taking files")
        }
        return true
    }

    private func pause(_ reason: String) {
        let first = diskLow == nil
        diskLow = reason
        guard first else { return }
        logger.warning("""
            spool: intake paused: \(reason); files stay in the spool and are taken once there is room \
            (uploads and released copies free it)
            """)
    }

    /// Starts taking the files that are due, a few at once, their owners taking turns (`IntakeTurns`).
    private func takeQuietFiles() async {
        let now = ContinuousClock.now
        guard turns.inFlight.count < turns.slots,
              candidates.contains(where: { now >= $0.value.notBefore && turns.inFlight[$0.key] == nil }),
              hasRoom(at: now) else { return }
        var ready: [IntakeTurns.Ready] = []
        var examined: [String: FileFingerprint] = [:]
        // An owner gets at most `slots` files a pass, so no more of its files are looked at (their writers asked
        // about) in it: a drop of 10,000 files costs a few checks a pass, not 10,000.
        var readyOf: [UInt32: Int] = [:]
        for name in candidates.keys.sorted() where turns.inFlight[name] == nil {
            guard var candidate = candidates[name], now >= candidate.notBefore else { continue }
            if let owner = candidate.fingerprint?.owner, readyOf[owner, default: 0] >= turns.slots { continue }
            let path = (spool.directory as NSString).appendingPathComponent(name)
            guard let fingerprint = try? FileFingerprint.of(path: path) else {
                candidates[name] = nil
                release(name)
                continue
            }
            if candidate.fingerprint == nil || fingerprint.contentMayDiffer(from: candidate.fingerprint!) {
                candidate.fingerprint = fingerprint
                candidate.lastChange = now
                candidates[name] = candidate
                continue
            }
            guard now - candidate.lastChange >= requiredQuiet(candidate) else { continue }
            // Whoever still has it open for writing keeps it out, however long they pause (a camera that stalls,
            // a copy over a slow link): the kernel is asked, not the clock.
            if WriterCheck.isBeingWritten(path, eventsSayOpen: candidate.writing) {
                candidates[name]?.notBefore = now + Self.heldOpenRecheck
                continue
            }
            ready.append(IntakeTurns.Ready(name: name, owner: fingerprint.owner))
            readyOf[fingerprint.owner, default: 0] += 1
            examined[name] = fingerprint
        }
        for name in turns.pick(ready) {
            guard let fingerprint = examined[name] else { continue }
            let path = (spool.directory as NSString).appendingPathComponent(name)
            running[name] = Task {
                await self.take(name, path: path, fingerprint: fingerprint)
                self.tookTurn(name)
            }
        }
    }

    /// One file's intake ended: its slot goes to the next.
    private func tookTurn(_ name: String) {
        turns.finished(name)
        running[name] = nil
        candidatesChanged.signal()
    }

    private func take(_ name: String, path: String, fingerprint: FileFingerprint) async {
        if let why = rules.refusal(of: fingerprint, name: name) ?? hardLinkRefusal(name, fingerprint) {
            reject(name, reason: why)
            return
        }
        let sidecarPath = path + Sidecar.suffix
        var sidecar: Sidecar?
        var sidecarFile: FileFingerprint?
        // Nothing there, or a name too long for a sidecar to exist (a file name within 13 bytes of 255): none.
        let found = try? FileFingerprint.of(path: sidecarPath)
        if let found, found.owner != fingerprint.owner || found.links > 1 {
            let why = found.links > 1
                ? "has \(found.links) hard links (a link keeps its owner: it may be another's file)"
                : "belongs to user \(found.owner), and the file to user \(fingerprint.owner)"
            // Another user's sidecar steers nothing, and may hold its owner's options (another user may have made
            // the name first, and the file's owner written into it): the file waits, said, rather than go without
            // them, however the two files' times look (anyone may touch a file of their own). So does one with
            // several names: a hard link keeps its owner, and anyone may make one where the kernel lets them link
            // files of others (fs.protected_hardlinks = 0).
            hold(name, file: fingerprint, .foreignSidecar, """
                \(name) waits: its sidecar \(name)\(Sidecar.suffix) \(why), and a sidecar applies only to a file of \
                its own owner's. Taken now, the file would go without its own options. Have the sidecar removed (its \
                owner, or the admin), then write your own sidecar again ('{}' for none); or rename the file, and write \
                its sidecar under the new name first
                """)
            return
        } else if found == nil, let known = held[name], known.hold.reason == .foreignSidecar {
            // The other user's sidecar is gone, and the file's owner has not written its own: its options may have
            // gone into the other's file. It waits on as it was (the message said what to do). Only a sidecar of
            // the owner's own ends it: anyone who can link the file, or write it, can change its times. Another
            // file under the name (its owner's new one, or another user's) is looked at afresh.
            guard !known.holds(fingerprint) else {
                hold(name, file: fingerprint, .foreignSidecar, known.hold.message)
                return
            }
            release(name)
        }
        if let found, found.owner == fingerprint.owner, found.links == 1 {
            do throws(SidecarError) {
                if let read = try Sidecar.readExamined(at: sidecarPath) {
                    guard read.file.inode == found.inode, read.file.device == found.device else {
                        // Replaced between the two looks: both are looked at again shortly.
                        candidates[name]?.notBefore = .now + Self.recheckInterval
                        return
                    }
                    if let why = rules.options.refusal(of: read.sidecar) { throw SidecarError(message: why) }
                    sidecar = read.sidecar
                    sidecarFile = read.file
                }
            } catch {
                reject(name, reason: "its sidecar \(name)\(Sidecar.suffix) \(error.message); fix the sidecar and put "
                    + "both files back")
                return
            }
        }
        var request = EnqueueRequest(path: path, destination: sidecar?.destination ?? spool.destination,
                                     meta: sidecar?.meta ?? [:], patch: sidecar?.patch, priority: sidecar?.priority ?? 0,
                                     mode: .move, onMetered: sidecar?.onMetered, lane: sidecar?.lane,
                                     after: sidecar?.after ?? [], afterMode: sidecar?.afterMode,
                                     group: sidecar?.group)
        request.sidecar = sidecar == nil ? nil : sidecarPath
        request.sidecarFile = sidecarFile
        // What was checked above (type, links, owner) is what gets taken.
        request.examined = fingerprint
        // A dropper sees and steers its own jobs through the control API (the queue's own user's are everyone's
        // to the admin: no owner recorded).
        request.owner = fingerprint.owner == geteuid() ? nil : fingerprint.owner
        do {
            let result = try await queue.accept(request, noFollow: true, stop: stop)
            candidates[name] = nil
            release(name)
            if result.deduplicated {
                reject(name, reason: "same content as job \(result.id), already queued or uploaded to "
                    + "\(request.destination ?? spool.destination); nothing more to do")
                return
            }
            logger.info("spool: accepted \(name)", metadata: ["uploadq.job": "\(result.id)",
                                                              "uploadq.destination": "\(request.destination ?? "")"])
        } catch let error as UploadQueueError {
            switch error.code {
            case .sourceUnstable:
                candidates[name]?.lastChange = .now
                logger.info("spool: \(name) is still changing; waiting")
            case .fileNotFound:
                candidates[name] = nil
                release(name)
            case .ownerQuota:
                hold(name, file: fingerprint, .ownerQuota, "\(name) waits: \(error.message)")
            case .interrupted:
                // The daemon is stopping: the file stays where it is, for the next start.
                logger.info("spool: stopped reading \(name); it is taken at the next start")
            case .diskLow:
                // Its copy would not fit (a move across disks) or the disk filled meanwhile: the file stays, and
                // is tried again every few seconds without an error each time.
                if candidates[name]?.waitingForRoom == false {
                    logger.warning("spool: \(name) waits for room: \(error.message)")
                }
                candidates[name]?.waitingForRoom = true
                candidates[name]?.notBefore = .now + .seconds(5)
            case .symbolicLink, .notRegularFile, .unknownDestination, .invalidArgument, .sourceChanged,
                 .unknownPrerequisite, .groupClosed:
                reject(name, reason: error.message)
            default:
                backOff(name, error: error)
            }
        } catch {
            backOff(name, error: error)
        }
    }

    /// Why a file with several hard links may not be taken, or nil. Such a file is copied, not moved, and only
    /// when others, or the spool's group, may read it: a dropper could otherwise link in a file it cannot read
    /// itself, and have the daemon send it.
    private func hardLinkRefusal(_ name: String, _ fingerprint: FileFingerprint) -> String? {
        guard fingerprint.links > 1 else { return nil }
        var spoolInfo = stat()
        guard stat(spool.directory, &spoolInfo) == 0 else {
            return "\(name) has \(fingerprint.links) hard links, and the spool's owner cannot be read to check it"
        }
        // Whoever made the link may be any user who can write the spool: taken only a file every such user may
        // read anyway, one readable by others or by the spool's group. A group-readable file of another group (root's
        // /etc/shadow, group shadow) is not: readable by its group, not by the dropper.
        if fingerprint.mode & UInt32(S_IROTH) != 0 { return nil }
        if fingerprint.group == spoolInfo.st_gid && fingerprint.mode & UInt32(S_IRGRP) != 0 { return nil }
        return """
            \(name) has \(fingerprint.links) hard links, belongs to user \(fingerprint.owner), group \
            \(fingerprint.group) (mode \(String(fingerprint.mode & 0o777, radix: 8))): not a file others may read, \
            nor a group-readable one of the spool's group (\(spoolInfo.st_gid)). A hard link could bring in a file \
            its dropper cannot read; copy the file into the spool instead
            """
    }

    private func backOff(_ name: String, error: any Error) {
        guard var candidate = candidates[name] else { return }
        candidate.failures += 1
        // A failure of the file's own (it cannot be read), not of the queue: after a few, it is set aside.
        let path = (spool.directory as NSString).appendingPathComponent(name)
        let denied = [EACCES, EPERM].map { String(cString: strerror($0)) }
        if let own = error as? UploadQueueError, own.path == path, own.cause.map(denied.contains) == true,
           candidate.failures >= Self.triesBeforeRejecting {
            reject(name, reason: "\(name) could not be taken after \(candidate.failures) tries: \(error)")
            return
        }
        let delay = Duration.seconds(min(60, 1 << min(candidate.failures, 6)))
        candidate.notBefore = .now + delay
        candidates[name] = candidate
        logger.error("spool: cannot take \(name) yet (\(error)); trying again in \(delay)")
    }

    /// Moves `name` (and its sidecar) to `.rejected/` with a reason file beside it; never overwrites.
    private func reject(_ name: String, reason: String) {
        candidates[name] = nil
        release(name)
        reject(Array(name.utf8), shown: name, reason: reason)
    }

    /// Leaves `name` (the file `file`) where it is for a reason of its owner's, looked at again every
    /// `holdRecheck`; recorded for `status` and the API when the reason or the file is new (not again for a new
    /// wording: a held file costs no write each look), and said in the log when the reason is new.
    private func hold(_ name: String, file: FileFingerprint, _ reason: QueueStatus.SpoolHold.Reason,
                      _ message: String) {
        candidates[name]?.notBefore = .now + Self.holdRecheck
        let known = held[name]
        let retry = known?.recorded == false
            && (reason == .foreignSidecar || !holdRowsFull && !holdRowsFullOf.contains(file.owner))
        guard known?.hold.reason != reason || known?.holds(file) != true || retry else { return }
        let entry = QueueStatus.SpoolHold(name: name, ownerUID: file.owner, reason: reason, message: message,
                                          since: known?.hold.since ?? Date())
        let record = QueueStore.RecordedSpoolHold(hold: entry, device: file.device, inode: file.inode)
        // A foreign sidecar's hold not recorded (the database failing) is tried again at the next look.
        let answer = (try? queue.store.holdSpoolFile(record)) ?? .allFull
        switch answer {
        case .recorded: break
        case .ownerFull: holdRowsFullOf.insert(file.owner)
        case .allFull: if reason != .foreignSidecar { holdRowsFull = true }
        }
        held[name] = HeldFile(record: record, recorded: answer == .recorded)
        if known?.hold.reason != reason {
            logger.warning("""
                spool: \(message)\(answer == .recorded ? "" : " (not listed in status for now: too many files held)")
                """, metadata: ["uploadq.reason": "\(reason.rawValue)"])
        }
    }

    /// `name` is no longer held (taken, rejected, gone).
    private func release(_ name: String) {
        guard let known = held.removeValue(forKey: name), known.recorded else { return }
        // A row freed: quota holds not recorded for want of one are tried again.
        if known.hold.reason != .foreignSidecar {
            holdRowsFull = false
            holdRowsFullOf.remove(known.hold.ownerUID)
        }
        try? queue.store.releaseSpoolFile(name)
    }

    /// Moves an entry whose name is not valid UTF-8 to `.rejected/` with a reason file beside it. Such a name
    /// cannot be a job's: it could not be shown, sent as a file name, or told apart from others once decoded.
    private func rejectUndecodable(_ raw: [UInt8]) {
        let shown = SafeText.escaped(bytes: raw)
        reject(raw, shown: shown, reason: """
            the name \(shown) is not valid UTF-8 (a name from another system's encoding); rename the file with a UTF-8 \
            name and put it back
            """)
    }

    /// Moves the entry `raw` (shown as `shown`) and its sidecar to `.rejected/`, under the same name or with `.1`,
    /// `.2`… after it, with `NAME.reason.txt` beside it. Names are handled as bytes, so any name can go; one too
    /// long for its companions' names is shortened by the name rule. One that cannot be moved is left alone while
    /// it stays (said once).
    private func reject(_ raw: [UInt8], shown: String, reason: String) {
        guard let given = setAside(raw, shown: shown, reason: reason) else { return }
        // Whatever the sidecar is (a link, a FIFO): moved as it is, never opened, never over anything.
        let suffix = Array(Sidecar.suffix.utf8)
        SpoolEntries.withPath(raw + suffix, in: spool.directory) { sidecar in
            var info = stat()
            guard lstat(sidecar, &info) == 0 else { return }
            SpoolEntries.withPath(given + suffix, in: rejectedDirectory) { target in
                _ = uploadq_rename_noreplace(AT_FDCWD, sidecar, AT_FDCWD, target)
            }
        }
        syncRejection()
        logger.warning("spool: rejected \(shown): \(reason)")
    }

    /// Moves the sidecar of `name` alone to `.rejected/` with its reason: its file is taken without it.
    private func rejectSidecar(of name: String, reason: String) {
        let shown = name + Sidecar.suffix
        guard setAside(Array(shown.utf8), shown: shown, reason: reason) != nil else { return }
        syncRejection()
        logger.warning("spool: set aside \(shown): \(reason)")
    }

    /// The longest suffix that follows a name set aside in `.rejected/` (a sidecar's).
    private static let companionRoom = max(Sidecar.suffix.utf8.count, reasonSuffix.count)
    private static let reasonSuffix = Array(".reason.txt".utf8)

    /// Moves the entry `raw` to `.rejected/` and writes its reason file; the name it got there, or nil (said) when
    /// it cannot be moved.
    private func setAside(_ raw: [UInt8], shown: String, reason: String) -> [UInt8]? {
        let given: [UInt8]
        switch SpoolEntries.move(raw, from: spool.directory, to: rejectedDirectory, room: Self.companionRoom,
                                 companions: [Self.reasonSuffix, Array(Sidecar.suffix.utf8)]) {
        case .failure(let error):
            unmovable.insert(raw)
            logger.error("""
                spool: cannot move \(shown) to .rejected (\(String(cString: strerror(error.code.rawValue)))); it is \
                left alone until it is removed or renamed. It was rejected because: \(reason)
                """)
            return nil
        case .success(let name):
            given = name
        }
        let text = "\(SafeText.escaped(reason))\nrejected at \(ISO8601DateFormatter().string(from: Date()))\n"
        if !SpoolEntries.write(text, to: given + Self.reasonSuffix, in: rejectedDirectory) {
            logger.error("spool: cannot write the reason file for \(shown) in .rejected; the reason was: \(reason)")
        }
        return given
    }

    private func syncRejection() {
        try? syncDirectory(rejectedDirectory)
        try? syncDirectory(spool.directory)
    }

    /// Makes `.rejected/` the daemon's own directory (mode 0700): droppers can write the spool, so one may have
    /// put a directory of its own, or a link, under that name before. Such an entry is renamed out of the way
    /// (`.rejected.not-ours-N`), never followed into.
    private func makeRejectedDirectory() throws(UploadQueueError) {
        var info = stat()
        if lstat(rejectedDirectory, &info) == 0 {
            let isDirectory = info.st_mode & S_IFMT == S_IFDIR
            if !isDirectory || info.st_uid != geteuid() {
                var suffix = 1
                while uploadq_rename_noreplace(AT_FDCWD, rejectedDirectory, AT_FDCWD,
                                               rejectedDirectory + ".not-ours-\(suffix)") != 0 {
                    guard errno == EEXIST || errno == ENOTEMPTY, suffix < 1000 else {
                        throw .system("rename", path: rejectedDirectory)
                    }
                    suffix += 1
                }
                logger.warning("""
                    spool: \(rejectedDirectory) was a \(FileFingerprint(info).typeName) of user \(info.st_uid), not the \
                    daemon's own directory; renamed to .rejected.not-ours-\(suffix)
                    """)
            } else if info.st_mode & 0o7777 != 0o700 {
                guard chmod(rejectedDirectory, 0o700) == 0 else { throw .system("chmod", path: rejectedDirectory) }
            }
        }
        try BlobStore.makeDirectory(rejectedDirectory)
    }
}
