import CUploadQueueSystem
import Foundation
import GRDB

/// The doctor's checks of this machine: the state directory, the database, the spool, the system's limits, the
/// link, the power and the upload windows. Each reads and changes nothing (the database is opened read-only).
struct LocalCheckup: Sendable {
    let configuration: Configuration

    // MARK: State directory

    func stateDirectory() -> [DoctorFinding] {
        let path = configuration.stateDirectory
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT {
                return [DoctorFinding("state", .info, "\(path) does not exist yet: the daemon creates it (mode 0700) "
                    + "when it first starts")]
            }
            return [DoctorFinding("state", .failure, "cannot look at \(path): \(String(cString: strerror(errno)))",
                                  fix: "check the permissions of its parent directories (namei -l \(path))")]
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            return [DoctorFinding("state", .failure, "\(path) is not a directory",
                                  fix: "move it away, or set state_dir to a directory")]
        }
        var findings: [DoctorFinding] = []
        let mode = info.st_mode & 0o7777
        let owner = Self.userName(info.st_uid)
        let me = geteuid()
        if me != 0, info.st_uid != me {
            let myName = Self.userName(me)
            findings.append(DoctorFinding("state", .failure, "\(path) belongs to \(owner), not to \(myName): a daemon "
                + "run as \(myName) cannot write its queue", fix: "sudo chown -R \(myName) \(path), or run uploadq as \(owner)"))
        } else if access(path, W_OK | X_OK) != 0 {
            findings.append(DoctorFinding("state", .failure, "\(path) is not writable (mode \(Self.octal(mode)))",
                                          fix: "chmod 0700 \(path)"))
        }
        if mode & 0o077 != 0 {
            findings.append(DoctorFinding("state", .warning, "\(path) has mode \(Self.octal(mode)): other users can "
                + "read the queue (file names, URLs, the files it holds)", fix: "chmod 0700 \(path)"))
        }
        var database = stat()
        if stat(configuration.databasePath, &database) == 0, database.st_mode & 0o077 != 0 {
            findings.append(DoctorFinding("state", .warning, "\(configuration.databasePath) has mode "
                + "\(Self.octal(database.st_mode & 0o7777)): other users can read it", fix: "chmod 0600 \(configuration.databasePath)"))
        }
        if let disk = configuration.freeSpaceGuard.status() {
            if let low = disk.low {
                findings.append(DoctorFinding("state", .failure, "\(low): the intake is paused and new files wait in "
                    + "the spool", fix: "free space on that disk, or lower [limits] min_free_space "
                    + "(now \(configuration.limits.minFreeSpace))"))
            } else if findings.allSatisfy({ $0.severity < .warning }) {
                findings.append(DoctorFinding("state", .ok, "\(path): owner \(owner), mode \(Self.octal(mode)), "
                    + "\(ByteCountText.text(disk.space.available)) free (min_free_space \(ByteCountText.text(disk.minimum)))"))
            }
        }
        return findings
    }

    // MARK: Database

    /// The database's findings, and the link class set by hand that it holds (for the link check).
    func database() -> (findings: [DoctorFinding], linkOverride: String?) {
        let path = configuration.databasePath
        guard FileManager.default.fileExists(atPath: path) else {
            return ([DoctorFinding("database", .info, "\(path) does not exist yet: it is made when the queue is "
                + "first opened")], nil)
        }
        let recover = """
            stop the daemon (systemctl stop uploadq), keep a copy (cp -a \(path) \(path).broken), then \
            sqlite3 \(path).broken .recover | sqlite3 \(path).recovered && mv \(path).recovered \(path); \
            the files the queue holds stay in \(configuration.blobDirectory)
            """
        do {
            var options = GRDB.Configuration()
            options.readonly = true
            options.busyMode = .timeout(5)
            let queue = try DatabaseQueue(path: Self.readOnlyLocation(path), configuration: options)
            defer { try? queue.close() }
            return try queue.read { db in
                let problems = try String.fetchAll(db, sql: "PRAGMA quick_check(20)")
                guard problems == ["ok"] else {
                    return ([DoctorFinding("database", .failure, "\(path) fails PRAGMA quick_check: "
                        + problems.prefix(3).joined(separator: "; "), fix: recover)], nil)
                }
                // From the tally the triggers keep: no walk of the jobs, however long the history. Since migration
                // v18 its `pending` counts the jobs uploading too (a claim writes no tally row); a queue a daemon
                // has not migrated yet (the doctor only reads) still has rows of its own for them.
                let rows = try Row.fetchAll(db, sql: """
                    SELECT state, SUM(jobs) AS n FROM job_tally GROUP BY state HAVING SUM(jobs) > 0 ORDER BY state
                    """).map { ($0["state"] as String, $0["n"] as Int64) }
                let merged = !rows.contains { $0.0 == JobState.uploading.rawValue }
                let counts = rows.map { state, jobs in
                    "\(jobs) \(merged && state == JobState.pending.rawValue ? "pending or uploading" : state)"
                }
                let override = try String.fetchOne(db, sql: "SELECT value FROM setting WHERE key = ?",
                                                   arguments: [LinkMonitor.overrideSetting])
                return ([DoctorFinding("database", .ok, "\(path): quick_check ok; jobs: "
                    + (counts.isEmpty ? "none" : counts.joined(separator: ", ")))], override)
            }
        } catch {
            // Reading beside a running daemon takes writing its -shm (the log's index): a permission problem, not a
            // damaged queue.
            let shm = path + "-shm"
            let denied = access(path, R_OK) != 0 || (FileManager.default.fileExists(atPath: shm) && access(shm, R_OK | W_OK) != 0)
            return ([DoctorFinding("database", .failure, "cannot read \(path): \(error)",
                                   fix: denied ? "run uploadq doctor as the daemon's user or as root" : recover)], nil)
        }
    }

    /// Where to open the database so that nothing is written next to it. While its `-wal` and `-shm` files exist
    /// (a daemon has it open) a read-only connection shares them. Without them it would make both, owned by
    /// whoever runs the doctor (root, say), which the daemon's user could then not write: the database is then
    /// read as immutable instead (no write-ahead log, no locks), through SQLite's URI form.
    static func readOnlyLocation(_ path: String) -> String {
        let manager = FileManager.default
        if manager.fileExists(atPath: path + "-wal") && manager.fileExists(atPath: path + "-shm") { return path }
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/-._~")
        return "file:" + (path.addingPercentEncoding(withAllowedCharacters: allowed) ?? path) + "?immutable=1"
    }

    // MARK: Spool

    func spool() -> [DoctorFinding] {
        guard let spool = configuration.spool else {
            return [DoctorFinding("spool", .info, "no [spool]: files come only through `uploadq enqueue` and the library")]
        }
        let path = spool.directory
        let wanted = "install -d -o DAEMON_USER -g uploadq-drop -m 3770 \(path)"
        var info = stat()
        guard stat(path, &info) == 0 else {
            return [DoctorFinding("spool", .info, "\(path) does not exist: the daemon makes it when it starts, "
                + "writable by its own user alone", fix: wanted)]
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            return [DoctorFinding("spool", .failure, "\(path) is not a directory", fix: "move it away; then \(wanted)")]
        }
        let mode = info.st_mode & 0o7777
        let owner = Self.userName(info.st_uid)
        let group = Self.groupName(info.st_gid)
        let shown = "\(path) (\(owner):\(group), mode \(Self.octal(mode)))"
        let sticky = mode & 0o1000 != 0
        var findings: [DoctorFinding] = []
        if mode & 0o002 != 0 {
            findings.append(DoctorFinding("spool", .failure, "\(shown) is writable by every user of the machine"
                + (sticky ? "" : ", and without the sticky bit one may remove or replace another's files"),
                fix: "chgrp uploadq-drop \(path) && chmod 3770 \(path)"))
        } else if mode & 0o030 != 0o030 {
            findings.append(DoctorFinding("spool", .warning, "\(shown): droppers in group \(group) cannot add files; "
                + "only \(owner) can", fix: "chgrp uploadq-drop \(path) && chmod 3770 \(path) (and adduser DROPPER uploadq-drop)"))
        } else if !sticky {
            findings.append(DoctorFinding("spool", .failure, "\(shown) is group-writable without the sticky bit: one "
                + "dropper may remove or replace another's files before they are taken", fix: "chmod 3770 \(path)"))
        }
        if uploadq_is_network_fs(path) == 1 {
            findings.append(DoctorFinding("spool", .warning, "\(path) is on a network file system: inotify sees no "
                + "writes from other machines, so files are found by the rescans every "
                + "\(ConfigurationValues.durationText(spool.rescanInterval)) and taken once unchanged for "
                + "network_quiet_period (\(ConfigurationValues.durationText(spool.networkQuietPeriod)))",
                fix: "keep the spool on a local disk, or have writers rename finished files into it"))
        }
        if findings.isEmpty {
            findings.append(DoctorFinding("spool", .ok, "\(shown): droppers in group \(group) may add files, none may "
                + "remove another's; inotify watches it"))
        }
        return findings
    }

    // MARK: System limits

    func systemLimits() -> [DoctorFinding] {
        var findings: [DoctorFinding] = []
        let watches = Self.procValue("/proc/sys/fs/inotify/max_user_watches")
        let instances = Self.procValue("/proc/sys/fs/inotify/max_user_instances")
        if let watches, watches < 8192 {
            findings.append(DoctorFinding("limits", .warning, "fs.inotify.max_user_watches is \(watches): the spool "
                + "watch and `enqueue --wait` share it with every other program of the user",
                fix: "sysctl -w fs.inotify.max_user_watches=65536 and keep it in /etc/sysctl.d/60-uploadq.conf"))
        }
        if let instances, instances < 32 {
            findings.append(DoctorFinding("limits", .warning, "fs.inotify.max_user_instances is \(instances)",
                fix: "sysctl -w fs.inotify.max_user_instances=128 and keep it in /etc/sysctl.d/60-uploadq.conf"))
        }
        var files = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        // The database, its WAL, the lock, sockets and inotify, and a few per transfer.
        let needed = 64 + UInt64(configuration.limits.concurrency) * 8
        if files.rlim_cur < needed {
            findings.append(DoctorFinding("limits", .warning, "open files are limited to \(files.rlim_cur) (hard "
                + "\(files.rlim_max)); \(configuration.limits.concurrency) transfers want about \(needed)",
                fix: "LimitNOFILE=4096 in the unit (systemctl edit uploadq), or ulimit -n 4096"))
        }
        if findings.isEmpty {
            findings.append(DoctorFinding("limits", .ok, "inotify: max_user_watches \(watches.map(String.init) ?? "?"), "
                + "max_user_instances \(instances.map(String.init) ?? "?"); open files: \(files.rlim_cur)"))
        }
        return findings
    }

    // MARK: Link, power, windows

    /// The link class as the daemon would see it now, and whether NetworkManager answers. Runs `busctl`: call it
    /// off the cooperative pool.
    func link(override: String?) -> [DoctorFinding] {
        let monitor = LinkMonitor(configuration: configuration)
        monitor.setOverride(override)
        monitor.refresh()
        let status = monitor.overall()
        var text = "\(status.linkClass.rawValue) (source: \(status.source.rawValue)"
        if let interface = status.interface { text += ", interface \(interface)" }
        if let reason = status.reason { text += "; \(reason)" }
        text += ")"
        var findings: [DoctorFinding] = []
        switch status.linkClass {
        case .offline:
            findings.append(DoctorFinding("link", .warning, text + ": nothing is sent",
                fix: status.source == .override ? "uploadq link auto" : "check the network, or [link] mode"))
        case .portal:
            findings.append(DoctorFinding("link", .warning, text + ": a captive portal is in the way; nothing is sent "
                + "through it, and nothing fails for it", fix: "log in on the network's portal (open any web page), or wait"))
        case .metered:
            findings.append(DoctorFinding("link", .info, text + ": destinations with on_metered = \"defer\" wait"))
        case .unmetered:
            findings.append(DoctorFinding("link", .ok, text))
        }
        if configuration.link.mode != "auto" || status.source == .override {
            findings.append(DoctorFinding("networkmanager", .info, "not asked: the link class is set by hand"))
        } else if let answer = NetworkManagerProbe().query(interface: nil) {
            findings.append(DoctorFinding("networkmanager", .ok, "answers on the system bus (Metered=\(answer.global.name))"))
        } else {
            findings.append(DoctorFinding("networkmanager", .info, "does not answer (not installed, or no system bus): "
                + "links are classed by metered_interfaces (\(configuration.link.meteredInterfaces.joined(separator: ", "))) alone"))
        }
        return findings
    }

    func power() -> [DoctorFinding] {
        let state = PowerMonitor(settings: configuration.power).current(fresh: true)
        var findings = [DoctorFinding("power", .ok, state.summary + "; require = \(configuration.power.require)")]
        for name in configuration.destinations.keys.sorted() {
            let requirement = configuration.destinations[name]?.power ?? configuration.power.require
            if let unmet = state.unmet(requirement) {
                findings.append(DoctorFinding("power", .info, "destination \(name) (power = \(requirement)) waits: \(unmet)"))
            }
        }
        return findings
    }

    func windows(now: Date) -> [DoctorFinding] {
        let schedule = configuration.schedule
        let week = LocalWeek(timeZone: schedule.timeZone)
        var findings: [DoctorFinding] = []
        for name in configuration.destinations.keys.sorted() {
            let windows = configuration.destinations[name]?.windows ?? schedule.windows
            guard !windows.isEmpty else { continue }
            if windows.isOpen(at: now, in: week) {
                findings.append(DoctorFinding("windows", .ok, "destination \(name): inside its upload windows (\(windows))"))
            } else {
                let until = windows.nextChange(after: now, in: week)
                    .map { " until " + WaitingHold.clock($0, timeZone: schedule.timeZone, now: now) } ?? ""
                let urgent = schedule.urgentPriority.map { "; jobs of priority \($0) or more go anyway" } ?? ""
                findings.append(DoctorFinding("windows", .info, "destination \(name): outside its upload windows "
                    + "(\(windows))\(until)\(urgent)"))
            }
        }
        return findings
    }

    // MARK: Pieces

    static func octal(_ mode: mode_t) -> String {
        let digits = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    static func userName(_ uid: uid_t) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "uid \(uid)" }
        return String(cString: name)
    }

    static func groupName(_ gid: gid_t) -> String {
        guard let entry = getgrgid(gid), let name = entry.pointee.gr_name else { return "gid \(gid)" }
        return String(cString: name)
    }

    private static func procValue(_ path: String) -> Int? {
        (try? String(contentsOfFile: path, encoding: .utf8)).flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }
}
