/// Every key of the config file: the one list that the loader checks its reads against, that orders
/// `config show`, and that generates the configuration reference (`docs/configuration.md`, `uploadq.toml(5)`).
package enum ConfigurationReference {
    /// One table of the file and what it is for.
    package struct Section: Sendable {
        /// The table's path: `""` for the top level, `destinations.NAME` for every destination.
        package let table: String
        /// The anchor of its part of the reference.
        package let anchor: String
        /// The heading of its part of the reference.
        package let title: String
        /// What the table is for, in a sentence or two.
        package let summary: String
    }

    /// The tables, in the order the reference and `config show` list them.
    package static let sections: [Section] = [
        Section(table: "", anchor: "state_dir", title: "The top level",
                summary: "Where the queue keeps its state."),
        Section(table: "limits", anchor: "limits", title: "[limits]",
                summary: "How much runs at once, and how much disk the queue leaves free."),
        Section(table: "retry", anchor: "retry", title: "[retry]",
                summary: "When a failed transfer is tried again. A server's Retry-After is honoured on top; "
                    + "transfers that fail for good (a 4xx that no retry can mend) are not retried."),
        Section(table: "link", anchor: "link", title: "[link]",
                summary: "Whether the link is metered, unmetered, offline or a captive portal, and how many bytes "
                    + "metered links may carry."),
        Section(table: "bandwidth", anchor: "bandwidth", title: "[bandwidth]",
                summary: "Caps in bytes per second, shared by every transfer; 0 is no cap."),
        Section(table: "power", anchor: "power", title: "[power]",
                summary: "What transfers need from the device's power, and where the power state is read."),
        Section(table: "schedule", anchor: "schedule", title: "[schedule]",
                summary: "When uploads may run: windows of local wall-clock time."),
        Section(table: "spool", anchor: "spool", title: "[spool]",
                summary: "The watched directory: files dropped there are taken into the queue. Without this table "
                    + "there is no spool. A sidecar (`NAME.uploadq.json`) may narrow what the admin allowed for "
                    + "its own file, within the limits below."),
        Section(table: "patch", anchor: "patch", title: "[patch]",
                summary: "The request that writes an uploaded file's URL into the app's record, and the "
                    + "connection it uses (the connection keys are those of a destination)."),
        Section(table: "mint", anchor: "mint", title: "[mint]",
                summary: "The connection to the backend that mints upload URLs (`mint_url` destinations): its "
                    + "credentials, headers, CA and timeouts."),
        Section(table: "metrics", anchor: "metrics", title: "[metrics]",
                summary: "A Prometheus text file for node_exporter's textfile collector."),
        Section(table: "retention", anchor: "retention", title: "[retention]",
                summary: "What happens to the queue's own copy of a file once its upload is proven, and how long "
                    + "history is kept."),
        Section(table: "hooks", anchor: "hooks", title: "[hooks]",
                summary: "Programs run after a job is uploaded or fails for good, with the job's JSON on standard "
                    + "input, at least once; no shell, no PATH search."),
        Section(table: "lanes", anchor: "lanes", title: "[lanes]",
                summary: "What a lane (`enqueue --lane NAME`: its jobs go one at a time, in the order they were "
                    + "enqueued) does when a job in it fails for good."),
        Section(table: "events", anchor: "events", title: "[events]",
                summary: "How far a follower of the event stream (`GET /v1/events/stream`, `uploadq events --follow`) may fall behind; the stream is served on `[api] socket`."),
        Section(table: "api", anchor: "api", title: "[api]",
                summary: "The Unix socket of the control API (HTTP/1.1 and JSON under `/v1`, see docs/api.md): who "
                    + "may connect; what each may do follows from its uid."),
        Section(table: "destinations.NAME", anchor: "destinations", title: "[destinations.NAME]",
                summary: "Where files go. Each destination is a table named by the caller (`[destinations.photos]`); "
                    + "`protocol` chooses its kind, and each key below says which kinds read it."),
    ]

    /// The reference's own notes on how values are written.
    package static let valueNotes = """
        Sizes are a number of bytes or a text with `B`, `KiB`, `MiB`, `GiB`, `KB`, `MB` or `GB` (`"8MiB"`). \
        Durations are a text with `ms`, `s`, `m`, `h` or `d` (`"30s"`, `"90d"`). Relative paths resolve against \
        the config file's folder. Every mistake is reported with the file, the line and the key, and the daemon \
        does not start.
        """

    /// Every key, table by table in the order of `sections`.
    package static let keys: [ConfigurationKey] = topLevel + limits + retry + link + bandwidth + power + schedule
        + spool + patch + connection("mint") + metrics + retention + hooks + lanes + events + api + destinations

    /// The keys of one table, in reference order.
    package static func keys(in table: String) -> [ConfigurationKey] { keys.filter { $0.table == table } }

    /// Why reading `key` of `table` with `reader` (for a destination of kind `variant`, when given) is not what the
    /// reference documents, or nil when it is.
    static func problem(reading key: String, in table: String, with reader: ConfigurationTable.Reader,
                        variant: ConfigurationKey.Variant?) -> String? {
        if reader == .table {
            if table.isEmpty, sections.contains(where: { $0.table == key }) || key == "destinations" { return nil }
            return "has no table [\(table.isEmpty ? key : table + "." + key)]"
        }
        guard let documented = keys.first(where: { $0.table == table && $0.name == key }) else {
            return "does not document it"
        }
        guard documented.kind.isRead(by: reader) else {
            return "documents it as \(documented.kind.description), and it is read as \(reader)"
        }
        if let variant, !documented.variants.isEmpty, !documented.variants.contains(variant) {
            return "documents it for \(documented.variants.map(\.rawValue).joined(separator: ", ")), not for "
                + variant.rawValue
        }
        return nil
    }

    /// Where a key goes in `config show` and the reference: its index in `keys`, or nil if undocumented.
    static func order(of key: String, in table: String) -> Int? {
        keys.firstIndex { $0.table == table && $0.name == key }
    }

    // MARK: The tables

    private static let topLevel: [ConfigurationKey] = [
        .init("", "state_dir", .path, .value(#"".uploadq""#), example: #""/var/lib/uploadq""#, """
            The queue's own directory: `queue.sqlite`, `blobs/` (the queue's copies of files), `cancelled/`, the \
            locks and the control socket (`api.sock`). Created 0700, the database 0600. It must be on a local disk.
            """),
    ]

    private static let limits: [ConfigurationKey] = [
        .init("limits", "concurrency", .integer(1...256), .value("4"), example: "8", """
            How many transfers run at once, all destinations together.
            """),
        .init("limits", "min_free_space", .sizeOrPercent, .value(#""256MiB""#), example: #""5%""#, """
            The free space the queue leaves on the disk of its state directory. Below it the spool waits, copies \
            into the queue are refused with a clear error, and the daemon says so; a size, a percentage of the \
            disk, or 0 for no floor.
            """),
        .init("limits", "owner_pending_jobs", .integer(0...100_000_000), .value("10000"), example: "2000", """
            How many jobs one dropper (another user, through the spool or the control API) may have in the queue \
            not uploaded yet, failed ones included; 0 for no limit. Past it the dropper's next file waits: the spool \
            leaves it where it is (`owner-quota`), the API answers 429, even for a file whose content is queued \
            already (the quota is checked before the file is read, so a full quota costs no read of it). The queue's \
            own user and root have none. \
            Ten thousand is more than a day of photos taken offline, and bounds what one dropper adds to the \
            database and to every listing.
            """),
        .init("limits", "owner_pending_bytes", .sizeOrPercent, .value(#""25%""#), example: #""4GiB""#, """
            How many bytes of files one dropper may have in the queue not uploaded yet: a size, a percentage of the \
            state directory's disk, or 0 for no limit. A quarter leaves room for three droppers more and for the \
            queue's own user's files, whatever the card; `min_free_space` still keeps the disk from filling.
            """),
    ]

    private static let retry: [ConfigurationKey] = [
        .init("retry", "backoff", .choice(RetryPolicy.Backoff.allCases.map(\.rawValue)), .value(#""steps""#), example: #""exponential""#, """
            `steps`: every `initial_interval` for `initial_attempts` failures, then every `later_interval`. \
            `exponential`: doubling from `initial_interval` up to `later_interval`.
            """),
        .init("retry", "initial_interval", .duration, .value(#""30s""#), example: #""10s""#, """
            The wait after the first failures (at least 10ms).
            """),
        .init("retry", "initial_attempts", .integer(0...1_000_000), .value("10"), example: "5", """
            How many failures wait `initial_interval` before the waits become `later_interval` (with `steps`).
            """),
        .init("retry", "later_interval", .duration, .value(#""5m""#), example: #""15m""#, """
            The wait after that, for as long as it takes: a transient failure is retried forever. With \
            `exponential`, the longest wait. At least 10ms.
            """),
        .init("retry", "jitter", .number(0...1), .value("0.1"), example: "0.2", """
            Each wait is moved at random by up to this fraction of it, so that many devices do not retry at once.
            """),
    ]

    private static let link: [ConfigurationKey] = [
        .init("link", "mode", .choice(LinkOverride.allCases.map(\.rawValue)), .value(#""auto""#),
              example: #""metered""#, """
            The link class. `auto` classifies each destination's traffic by the route to its server: \
            NetworkManager's `Metered` when it says (or guesses) yes or says a definite no, else the interface \
            rules (`metered_interfaces`, WWAN devices, USB tethering); the others set the class by hand. A class set with `uploadq link` is kept in \
            the queue, survives restarts and wins over this key; so does `uploadq link auto` once run.
            """),
        .init("link", "metered_interfaces", .texts, .value(#"["wwan*", "ppp*", "usb*", "rmnet*", "wwp*"]"#),
              example: #"["wwan*", "tun0"]"#, """
            Interface names (with `*` wildcards) that make the traffic through them metered, besides WWAN devices \
            and USB tethering. They decide where NetworkManager is absent or only guesses no.
            """),
        .init("link", "metered_budget", .text, .unset("no budget"), example: #""200MiB/day""#, """
            How many bytes metered links may carry per day, week or month (`"1GiB/week"`, `"5GiB/month"`): every \
            byte sent counts, headers and retries too. Once spent, jobs wait as `budget-spent` until the period \
            resets or the link is unmetered.
            """),
        .init("link", "budget_reset", .weekdayOrDay(1...28), .computed("local midnight; Monday for /week; the 1st for /month"),
              example: #""mon""#, context: [#"metered_budget = "1GiB/week""#], """
            When a weekly budget resets (a weekday: `"mon"`…`"sun"`) or a monthly one (a day, 1 to 28), at local \
            midnight in `[schedule] time_zone`. Only with `metered_budget`.
            """),
        .init("link", "connectivity_check", .url, .unset("no check"),
              example: #""http://connectivitycheck.gstatic.com/generate_204""#, """
            A URL that answers 204 with an empty body, asked every 30 s (every 5 s while a portal is in the way) \
            and when the default route moves. Anything else means a captive portal: traffic that takes the same \
            way is `portal`, and nothing is sent through it. No answer keeps the last verdict. Servers on the \
            local network, reached without a gateway, are not held. No user info, no placeholders.
            """),
    ]

    private static let bandwidth: [ConfigurationKey] = [
        .init("bandwidth", "metered", .size, .value("0"), example: #""256KiB""#, """
            Bytes per second for all transfers together while the link is metered; 0 is no cap.
            """),
        .init("bandwidth", "unmetered", .size, .value("0"), example: #""4MiB""#, """
            Bytes per second for all transfers together while the link is unmetered; 0 is no cap.
            """),
        .init("bandwidth", "timetable", .texts, .value("[]"), example: #"["08:00,512KiB", "19:00,off"]"#, """
            A cap by time of day, as rclone's `--bwlimit` timetable: `"HH:MM,RATE"` daily or \
            `"sat-HH:MM,RATE"` for one day, `off` for none. Before the day's first entry the last one before it \
            holds. The lower of it and the link's cap applies; a change holds within 0.1 s.
            """),
    ]

    private static let power: [ConfigurationKey] = [
        .init("power", "require", .choice(["any", "ac", "battery-not-low"]), .value(#""any""#), example: #""ac""#, """
            What every destination's transfers need, unless the destination sets its own `power`: `ac` external \
            power, `battery-not-low` a charge of at least `low_battery` or external power. A transfer that loses \
            it stops after its current chunk; jobs wait as `power`.
            """),
        .init("power", "low_battery", .text, .value(#""20%""#), example: #""30%""#, """
            The charge below which `battery-not-low` holds transfers: a percentage from 1% to 100%.
            """),
        .init("power", "source", .choice(PowerSettings.Source.allCases.map(\.rawValue)), .value(#""auto""#), example: #""sysfs""#, """
            Where the power state is read: UPower over the system bus when it is there (`auto`), else the \
            kernel's power-supply class; or one of them alone. A device with no power supply counts as on \
            external power.
            """),
        .init("power", "supply_dir", .path, .value(#""/sys/class/power_supply""#), example: #""/srv/test-supply""#, """
            The kernel's power-supply directory, or a tree of the same layout. Setting it implies \
            `source = "sysfs"` unless `source` is set.
            """),
    ]

    private static let schedule: [ConfigurationKey] = [
        .init("schedule", "windows", .texts, .value("[]"), example: #"["22:00-06:00", "sat 00:00-24:00"]"#, """
            When uploads may run, in local wall-clock time (none: always). `22:00-06:00` runs past midnight; \
            `mon-fri 12:00-13:00` and `sat,sun 08:00-20:00` name days. A destination's `windows` replace these. \
            Jobs outside them wait as `outside-window`.
            """),
        .init("schedule", "urgent_priority", .integer(-1_000_000...1_000_000), .unset("no job is urgent"),
              example: "10", """
            Jobs of this priority or more ignore the windows.
            """),
        .init("schedule", "time_zone", .text, .computed("the system's time zone"), example: #""Europe/Berlin""#, """
            The IANA time zone of the windows, the timetable and the budget's resets. They follow its daylight \
            saving changes.
            """),
    ]

    private static let spool: [ConfigurationKey] = [
        .init("spool", "dir", .path, .value(#""spool""#), example: #""/var/spool/uploadq""#, """
            The watched directory (inotify, with a rescan timer). Write a file elsewhere and rename it in, or \
            write it in place and close it.
            """),
        .init("spool", "destination", .text, .computed(#""default", or the only destination"#), example: #""photos""#, """
            The destination of files without a sidecar naming another. It must be defined; unset, it is the \
            destination named `default`, or the only one there is (several, none of them `default`: name one). \
            `uploadq enqueue` without `--destination` goes there too.
            """),
        .init("spool", "quiet_period", .duration, .value(#""1s""#), example: #""2s""#, """
            How long a file must be closed and unchanged before it is taken.
            """),
        .init("spool", "rescan_interval", .duration, .value(#""30s""#), example: #""1m""#, """
            A full rescan on this timer, in case an event was missed (at least 100ms).
            """),
        .init("spool", "network_quiet_period", .duration, .value(#""30s""#), example: #""1m""#, """
            On a network or FUSE file system (NFS, SMB, sshfs), where inotify does not see other machines' \
            writes: how long a file that was not renamed in must stay unchanged in size and modification time.
            """),
        .init("spool", "sidecar_destinations", .texts, .computed("the spool's own destination alone"),
              example: #"["default", "archive"]"#, """
            The destinations a sidecar may choose. Each must be defined.
            """),
        .init("spool", "sidecar_may_allow_metered", .boolean, .value("false"), example: "true", """
            Whether a sidecar may loosen its file's `on_metered` (let it go on a metered link when the \
            destination defers). Without it a sidecar may only make it stricter.
            """),
        .init("spool", "sidecar_meta_keys", .texts, .value("[]"), example: #"["record", "survey"]"#, """
            The meta keys a sidecar may set; any other is rejected with its file.
            """),
        .init("spool", "sidecar_lanes", .texts, .value("[]"), example: #"["survey-"]"#, """
            The prefixes of the lanes a sidecar (or a control API client other than the queue's own user) may \
            put its file in; none by default. A lane is its owner's own: another user's lane of the same name is \
            another lane.
            """),
        .init("spool", "sidecar_groups", .texts, .value("[]"), example: #"["survey-"]"#, """
            The prefixes of the groups a sidecar (or a control API client other than the queue's own user) may \
            put its file in; none by default. A group is its owner's own, closed by its owner alone.
            """),
        .init("spool", "sidecar_max_priority", .integer(-1_000_000...1_000_000),
              .computed("0, or urgent_priority - 1 when that is lower"), example: "5", """
            The highest priority a sidecar may give its file; a higher one is rejected with its file.
            """),
        .init("spool", "max_file_size", .size, .value(#""64GiB""#), example: #""2GiB""#, """
            Larger files, and sparse files, are rejected unread (moved to `.rejected/` with a reason). At least 1 \
            byte.
            """),
    ]

    private static let patch: [ConfigurationKey] = [
        .init("patch", "method", .text, .value(#""PATCH""#), example: #""PUT""#, """
            The HTTP method of the patch request (a job's own patch may choose another).
            """),
        .init("patch", "body", .text, .value(#""{\"photo_url\": \"{{url}}\"}""#),
              example: #"'{"photo_url": "{{url}}", "sha256": "{{sha256}}"}'"#, """
            The JSON body; `{{url}}`, `{{job_id}}`, `{{sha256}}`, `{{size}}`, `{{content_type}}`, `{{name}}` and \
            `{{meta.KEY}}` are filled in, JSON-escaped. A sidecar's patch always uses this body.
            """),
        .init("patch", "on_metered", .text, .value(#""allow""#), example: #""defer""#, """
            Whether patches go on a metered link: `allow` (they are a few hundred bytes), `defer`, \
            `allow-below:SIZE` or `always` (also past the metered budget). Their bytes count against the budget.
            """),
        .init("patch", "allowed_urls", .texts, .value("[]"), example: #"["https://api.example.com/records/"]"#, """
            The URL prefixes (scheme, host, port, path) under which a spool sidecar may name a patch target; none \
            by default, so a sidecar's patch target is refused until the admin lists one.
            """),
        .init("patch", "sidecar_headers", .texts, .value("[]"), example: #"["X-Tenant"]"#, """
            The headers a sidecar's patch may set. Credentials, `Host`, framing and rerouting headers cannot be \
            listed.
            """),
    ] + connection("patch")

    private static let metrics: [ConfigurationKey] = [
        .init("metrics", "textfile", .path, .unset("no metrics file"),
              example: #""/var/lib/node_exporter/textfile/uploadq.prom""#, """
            The file the daemon rewrites atomically with its metrics, for node_exporter's textfile collector.
            """),
        .init("metrics", "interval", .duration, .value(#""5s""#), example: #""15s""#, """
            How often the file is rewritten (at least 100ms).
            """),
    ]

    private static let retention: [ConfigurationKey] = [
        .init("retention", "uploaded_copies", .choice(["delete", "keep", "archive"]), .value(#""delete""#),
              example: #""archive""#, context: [#"archive_dir = "/srv/uploaded-archive""#], """
            What becomes of the queue's own copy of a file (from `--mode copy`, `move` or the spool) once its \
            upload is proven: `delete` at once, `keep` it for `keep_for` then delete it, or `archive` it under \
            `archive_dir`. The release is recorded in the transaction that marks the job uploaded, so a crash \
            leaks nothing.
            """),
        .init("retention", "keep_for", .duration, .computed(#""7d" with uploaded_copies = "keep""#),
              example: #""30d""#, context: [#"uploaded_copies = "keep""#], """
            How long a kept copy stays under `state_dir/blobs/`. Only with `uploaded_copies = "keep"`.
            """),
        .init("retention", "archive_dir", .path, .computed(#"none; uploaded_copies = "archive" needs it"#),
              example: #""/srv/uploaded-archive""#, context: [#"uploaded_copies = "archive""#], """
            Where archived copies go: a rename on the same disk, else a copy, an fsync and a rename. Only with \
            `uploaded_copies = "archive"`.
            """),
        .init("retention", "archive_template", .text, .computed(#""{date}/{job_id}-{name}" when archiving"#),
              example: #""{date}/{name}""#, context: [#"uploaded_copies = "archive""#, #"archive_dir = "archive""#], """
            The archived copy's path under `archive_dir`: `{job_id}`, `{name}`, `{ext}`, `{date}`, `{sha256}`, \
            `{meta.KEY}`, sanitised so no value leaves the directory.
            """),
        .init("retention", "history", .durationOrForever, .value(#""90d""#), example: #""30d""#, """
            Uploaded jobs last changed longer ago than this are pruned once an hour, with their attempts, \
            delivered patches and acknowledged completions, and so are old files in `cancelled/`; `"forever"` \
            keeps everything. Failed jobs are never pruned. At least 1m.
            """),
    ]

    private static let hooks: [ConfigurationKey] = [
        .init("hooks", "on_uploaded", .command, .unset("no hook"), example: #"["/usr/local/bin/notify", "--photo"]"#, """
            Run once a job is uploaded (its proof of receipt held): the program's path (a relative one against \
            the config's folder; no PATH search, no shell) and its arguments, the job's JSON on standard input.
            """),
        .init("hooks", "on_failed", .command, .unset("no hook"), example: #"["/usr/local/bin/alert"]"#, """
            Run once a job fails for good.
            """),
        .init("hooks", "on_group_uploaded", .command, .unset("no hook"), example: #"["/usr/local/bin/survey-done"]"#,
              """
            Run once a closed group's members are all uploaded: the group's JSON on standard input (`group`, \
            `members` with each one's `id`, `name`, `size`, `sha256` and `remote_url`). Owed on the member whose \
            upload completed the group (the last one uploaded when its close or a cancel completed it); \
            `UPLOADQ_JOB_ID` names that member, `UPLOADQ_GROUP` the group.
            """),
        .init("hooks", "timeout", .duration, .value(#""30s""#), example: #""1m""#, """
            A hook still running then is killed with everything it started (its process group), and tried again. \
            At least 100ms.
            """),
        .init("hooks", "pass_env", .texts, .value("[]"), example: #"["NOTIFY_URL"]"#, """
            The daemon's environment variables a hook also gets, besides `PATH`, `HOME`, `LANG` and the \
            `UPLOADQ_*` ones.
            """),
        .init("hooks", "max_attempts", .integer(0...1_000_000), .value("10"), example: "3", """
            Failed runs (on the `[retry]` schedule) before a hook is marked failed (`uploadq retry --hooks` runs \
            it again); 0 tries forever.
            """),
    ]

    private static let lanes: [ConfigurationKey] = [
        .init("lanes", "on_failure", .choice(["hold", "skip"]), .value(#""hold""#), example: #""skip""#, """
            What a lane does when a job in it fails for good: `hold` waits until the job is retried, skipped \
            (`uploadq skip JOB`) or cancelled, so nothing overtakes it; `skip` leaves the job failed and visible, \
            and the lane goes on. A transient failure always holds its lane while the job retries.
            """),
        .init("lanes", "skip", .texts, .value("[]"), example: #"["telemetry"]"#, """
            Lanes that skip a job failed for good whatever `on_failure` says.
            """),
    ]

    private static let events: [ConfigurationKey] = [
        .init("events", "socket", .path, .unset("retired"), example: #""/run/uploadq/events.sock""#, """
            Retired: the event stream is the control API's `GET /v1/events/stream`, on `[api] socket`. Still \
            loaded, and the daemon says at start that it does nothing.
            """),
        .init("events", "group", .text, .unset("retired"), example: #""uploadq-watch""#, """
            Retired with `socket`: who may follow is who may connect to the control API (`[api] group`).
            """),
        .init("events", "reader_buffer", .size, .value(#""256KiB""#), example: #""1MiB""#, """
            How far a follower's live lines (progress, patch, hook, link) may pile up before it is dropped (with \
            a last `dropped` line; it follows again with `since=` and loses nothing logged); at least 4096. A \
            follower also holds up to as much of progress lines back until the log shows their job started.
            """),
    ]

    private static let api: [ConfigurationKey] = [
        .init("api", "socket", .path, .computed("state_dir/api.sock"), example: #""/run/uploadq/api.sock""#, """
            The control API's Unix socket (at most 107 bytes of path).
            """),
        .init("api", "group", .text, .unset("0600: the daemon's user alone"), example: #""uploadq-drop""#, """
            A group whose members may connect: the socket is then 0660 for it. A member that is not the queue's \
            own user sees and steers its own jobs alone, hands over its own files by copy, and chooses only what \
            the spool's trust rules let a sidecar choose.
            """),
        .init("api", "max_connections", .integer(2...4096), .value("256"), example: "512", """
            Connections open at once, in all. One more is closed as soon as it is accepted (said in the log at \
            most once a minute).
            """),
        .init("api", "admin_connections", .integer(1...4095), .value("16"), example: "8", """
            Of `max_connections`, how many only the queue's own user and root may take: however many connections \
            droppers hold open, the admin's `status` is answered.
            """),
        .init("api", "max_connections_per_user", .integer(1...4096), .value("32"), example: "8", """
            Connections one dropper may have open at once (its long polls and event streams count).
            """),
        .init("api", "request_timeout", .duration, .value(#""10s""#), example: #""30s""#, """
            How long a request may take to arrive whole, head and body, from its first byte: a client that sends \
            a byte a second is closed, not waited for. At least 100ms.
            """),
        .init("api", "idle_timeout", .duration, .value(#""1m""#), example: #""5m""#, """
            How long a kept-alive connection may wait with no request under way before it is closed (an answer \
            being written, a long poll or an event stream is not idle), and how long a client may take none of \
            what is written to it (an answer, the event stream) before it is closed: a slow reader that takes some \
            goes on. At least 100ms.
            """),
    ]

    // MARK: Connection keys

    /// The keys of a connection: a destination's, `[patch]`'s or `[mint]`'s.
    private static func connection(_ table: String, variants: [ConfigurationKey.Variant] = [])
        -> [ConfigurationKey]
    {
        let owned = variants.filter { ![.minted, .mintedCommand, .mintedS3].contains($0) }
        let credentialVariants = variants.isEmpty ? [] : owned.filter { $0 != .s3 }
        return [
            .init(table, "headers", .headers, .unset("none"), example: #"{ "X-Client" = "uploadq" }"#,
                  variants: owned, """
                Headers sent with every request; their values are never logged or shown.
                """),
            .init(table, "token_env", .text, .unset("no token"), example: #""UPLOADQ_TOKEN""#,
                  variants: credentialVariants, """
                The environment variable holding a bearer token (`Authorization: Bearer …`). One of token_env, \
                token_file, token_command.
                """),
            .init(table, "token_file", .path, .unset("no token"), example: #""%d/upload-token""#,
                  variants: credentialVariants, """
                A file whose first line is the bearer token, read again after the server answers 401. `%d/NAME` \
                reads systemd's credential NAME (`LoadCredential=`).
                """),
            .init(table, "token_command", .command, .unset("no token"), example: #"["/usr/local/bin/get-token"]"#,
                  variants: credentialVariants, """
                A program that prints the bearer token, run without a shell, with `PATH`, `HOME`, `LANG` and \
                `pass_env` only; asked again when the server answers 401.
                """),
            .init(table, "token_command_timeout", .duration, .computed(#""10s" with token_command"#), example: #""30s""#,
                  context: [#"token_command = ["/usr/local/bin/get-token"]"#], variants: credentialVariants, """
                How long token_command may run (at least 100ms).
                """),
            .init(table, "pass_env", .texts,
                  .computed(table == "destinations.NAME" ? "[] with token_command or mint_command" : "[] with token_command"),
                  example: #"["AWS_PROFILE"]"#, context: [#"token_command = ["/usr/local/bin/get-token"]"#],
                  variants: table == "destinations.NAME" ? credentialVariants + [.mintedCommand] : [], """
                The daemon's environment variables a token_command (or a destination's mint_command) also gets.
                """),
            .init(table, "ca_file", .path, .unset("the system's CAs"), example: #""/etc/ssl/private-ca.pem""#,
                  variants: variants, """
                Trust this CA (PEM) as well. TLS is always verified.
                """),
            .init(table, "connect_timeout", .duration, .value(#""15s""#), example: #""30s""#, variants: variants, """
                How long a connection may take to open (at least 100ms).
                """),
            .init(table, "stall_timeout", .duration, .value(#""30s""#), example: #""1m""#, variants: variants, """
                A transfer below `stall_min_rate` this long is aborted as stalled and resumed later (at least 1s).
                """),
            .init(table, "stall_min_rate", .size, .value("1"), example: #""1KiB""#, variants: variants, """
                Bytes per second below which a transfer counts as stalled (at least 1).
                """),
            .init(table, "min_rate", .size, .value(#""1KiB""#), example: #""16KiB""#, variants: variants, """
                While a body is sent, at least this many bytes per second on average over `min_rate_window`, sent \
                and received together (a trickle is a stall too); 0 turns it off. It also sets each request's \
                deadline: ten minutes plus its body at this rate.
                """),
            .init(table, "min_rate_window", .duration, .value(#""1m""#), example: #""2m""#, variants: variants, """
                The window of `min_rate` (at least 1s).
                """),
        ]
    }

    // MARK: Destinations

    private static let destinations: [ConfigurationKey] = {
        let d = "destinations.NAME"
        let all = ConfigurationKey.Variant.allCases
        let network = ConfigurationKey.Variant.network
        let s3Both: [ConfigurationKey.Variant] = [.s3, .mintedS3]
        let ownURL: [ConfigurationKey.Variant] = [.tus, .rufh, .httpPut, .httpPost]
        return [
            .init(d, "protocol", .choice(Destination.TransferProtocol.allCases.map(\.rawValue)),
                  .required, example: #""tus""#, variants: all, """
                The kind of destination: a local directory, tus 1.0, IETF resumable uploads, a whole-file PUT or \
                multipart POST, or S3 and S3-compatible stores.
                """),
            .init(d, "url", .url, .required,
                  example: #""https://tus.example.com/files/""#, variants: [.file, .tus, .rufh, .httpPut, .httpPost], """
                Where files go. `file://DIR` for a directory (relative to the config's folder); the creation \
                endpoint for tus and rufh; for http-put and http-post a template whose path and query may use \
                `{job_id}`, `{name}`, `{ext}`, `{date}`, `{sha256}`, `{meta.KEY}`, and whose origin is fixed: the \
                destination's credentials go there alone.
                """),
            .init(d, "name_template", .text, .value(#""{job_id}-{name}""#), example: #""{date}/{job_id}-{name}""#,
                  variants: [.file], """
                The file's path under the directory; the placeholders of `url`, sanitised so no value leaves it.
                """),
            .init(d, "file_mode", .text, .computed("the source's mode, less write for group and others, and the group's bits when the group differs"),
                  example: #""0640""#, variants: [.file], """
                The permission bits of a delivered file (octal), within those of its source: a file never leaves \
                readable by more than its source was, whatever this says.
                """),
            .init(d, "chunk_size", .size, .value(#""8MiB""#), example: #""4MiB""#, variants: [.file, .tus, .rufh], """
                How much goes between two durable checkpoints: a chunk per request for tus and rufh, a fsync of \
                the target for a directory. A crash re-sends at most one chunk. At least 1KiB (4KiB for file).
                """),
            .init(d, "creation_with_upload", .boolean, .value("false"), example: "true", variants: [.tus, .rufh], """
                Send a file of one chunk in its creation request: tus's creation-with-upload extension; for rufh, \
                the whole file marked complete (`Upload-Complete: ?1`). One request a file less, at a risk: a \
                creation cut off after the server took the file, before uploadq learnt the upload's URL, is sent \
                again as a second upload.
                """),
            .init(d, "interop_version", .integer(6...8), .value("6"), example: "7", variants: [.rufh], """
                The resumable-uploads draft the server speaks: 6 (drafts -04 and -05, Apple's URLSession and \
                tusd), 7 or 8.
                """),
            .init(d, "verify", .choice(WholeFileVerification.allCases.map(\.rawValue)), .computed(#""head" for http-put, "response" for http-post and minted"#),
                  example: #""status""#, variants: [.httpPut, .httpPost, .minted, .mintedCommand], """
                What proves the server has the file. `head` (http-put only): a matching `Repr-Digest` in the \
                answer, else a HEAD of the stored URL showing its size (and digest, where the server sends one). \
                `response`: the answer itself; for http-post the URL at `remote_url_from`, else a `Location` on \
                a trusted origin, else a 2xx that is not an HTML page; for a minted target the storage's ETag, \
                `Content-MD5`, `x-goog-hash` or `Repr-Digest`. `status`: the status code alone, which a captive \
                portal passes; an explicit opt-out for servers that can prove nothing else.
                """),
            .init(d, "form_field", .text, .value(#""file""#), example: #""photo""#, variants: [.httpPost], """
                The form field that carries the file in an http-post's `multipart/form-data` body (the job's meta \
                go in fields of their own). A minted POST sends the backend's fields and the file as `file`.
                """),
            .init(d, "remote_url_from", .text, .unset("Location, else the request URL"), example: #""json:/data/url""#,
                  variants: [.httpPost], """
                Where the stored file's URL is in the answer: `json:/POINTER`, an RFC 6901 pointer into its JSON \
                body. It must be there for the upload to count.
                """),
            .init(d, "endpoint", .url, .computed("https://s3.REGION.amazonaws.com"), example: #""http://127.0.0.1:9000""#,
                  variants: [.s3], """
                The S3 service's address (no user info, query or fragment).
                """),
            .init(d, "bucket", .text, .required, example: #""photos""#, variants: [.s3], """
                The bucket (3 to 63 of a-z, 0-9, `.` and `-`).
                """),
            .init(d, "region", .text, .value(#""us-east-1""#), example: #""eu-central-1""#, variants: [.s3], """
                The region requests are signed for (`auto` for R2).
                """),
            .init(d, "path_style", .boolean, .computed("true for an address, localhost or an endpoint with a path; else false"),
                  example: "true", variants: [.s3], """
                Address the bucket in the path (MinIO, Ceph, moto) rather than in the host name.
                """),
            .init(d, "key_template", .text, .value(#""{job_id}-{name}""#), example: #""{date}/{job_id}-{name}""#,
                  variants: [.s3], """
                The object key: the placeholders of `url`, sanitised; no empty or `.` segment.
                """),
            .init(d, "multipart_threshold", .size, .value(#""16MiB""#), example: #""64MiB""#, variants: s3Both, """
                Files below it go up in one PutObject (or one presigned PUT); larger ones as a multipart upload, \
                resumed after a crash from ListParts. At least 5MiB, at most 5GiB.
                """),
            .init(d, "part_size", .size, .value(#""8MiB""#), example: #""16MiB""#, variants: s3Both, """
                The size of a part: at least 5MiB, at most 5GiB. A file too large for 10,000 parts of it gets parts \
                of a tenth of a thousandth of its size.
                """),
            .init(d, "part_concurrency", .integer(1...16), .value("2"), example: "4", variants: s3Both, """
                Parts in flight per file; a crash re-sends at most this many.
                """),
            .init(d, "etag", .choice(S3Settings.ETags.allCases.map(\.rawValue)), .value(#""md5""#), example: #""opaque""#, variants: s3Both, """
                `md5`: the store's ETags are the MD5 of the bytes (as AWS makes them) and prove each part. `opaque` \
                (SSE-KMS, SSE-C, stores whose ETags are not MD5s): a HEAD of each object checks its size instead.
                """),
            .init(d, "access_key_env", .text, .unset("the standard chain"), example: #""AWS_ACCESS_KEY_ID""#,
                  context: [#"secret_key_env = "AWS_SECRET_ACCESS_KEY""#], variants: [.s3], """
                The environment variable holding the access key id; with `secret_key_env`. Unset, and without \
                `credentials_file`: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`), else \
                the shared credentials file's profile.
                """),
            .init(d, "secret_key_env", .text, .unset("the standard chain"), example: #""AWS_SECRET_ACCESS_KEY""#,
                  context: [#"access_key_env = "AWS_ACCESS_KEY_ID""#], variants: [.s3], """
                The environment variable holding the secret access key.
                """),
            .init(d, "session_token_env", .text, .unset("no session token"), example: #""AWS_SESSION_TOKEN""#,
                  context: [#"access_key_env = "AWS_ACCESS_KEY_ID""#, #"secret_key_env = "AWS_SECRET_ACCESS_KEY""#],
                  variants: [.s3], """
                The environment variable holding a session token, with the two above.
                """),
            .init(d, "credentials_file", .path, .unset("the standard chain"), example: #""%d/aws""#, variants: [.s3], """
                An AWS shared credentials file (`%d/NAME`: systemd's credential NAME). Not with the `*_env` keys.
                """),
            .init(d, "profile", .text, .computed(#""default", or $AWS_PROFILE with the standard chain"#),
                  example: #""uploads""#, variants: [.s3], """
                The profile to read from the credentials file.
                """),
            .init(d, "mint_url", .url, .unset("not minted"), example: #""https://api.example.com/uploads/sign""#,
                  variants: [.minted, .mintedS3], """
                The app's backend that mints each file's target. For http-put/http-post it answers a POST with the \
                method, URL, headers and fields to use; for s3 it serves Uppy Companion's `/s3/params` and \
                `/s3/multipart` routes. Its credentials are `[mint]`'s. Not with `url`.
                """),
            .init(d, "mint_command", .command, .unset("not minted"), example: #"["/usr/local/bin/mint-upload"]"#,
                  variants: [.mintedCommand], """
                A program that mints each file's target instead of `mint_url`: the job on standard input, its \
                answer on standard output (64 KiB at most), with `PATH`, `HOME`, `LANG` and `pass_env` only.
                """),
            .init(d, "mint_command_timeout", .duration, .computed(#""10s" with mint_command"#), example: #""30s""#,
                  context: [#"mint_command = ["/usr/local/bin/mint-upload"]"#], variants: [.mintedCommand], """
                How long mint_command may run (at least 100ms).
                """),
        ] + connection(d, variants: network) + [
            .init(d, "trusted_origins", .texts, .value("[]"), example: #"["https://storage.example.com"]"#,
                  variants: ownURL, """
                Other origins (scheme, host, port) that may receive the destination's token and headers, where \
                its server hands out upload URLs. Any other origin gets requests without them.
                """),
            .init(d, "allow_private_targets", .boolean, .value("false"), example: "true", variants: network, """
                Whether a URL the server chose (a Location, a minted URL) may lead to a loopback, private, \
                link-local or CGNAT address when the destination is not itself there.
                """),
            .init(d, "public_url_template", .text, .unset("the upload's own URL"),
                  example: #""https://cdn.example.com/{name}""#, variants: [.tus, .rufh, .httpPut, .httpPost, .s3], """
                The URL reported for an uploaded file (in completions, patches and hooks): `{url}`, `{upload_id}` \
                (tus, rufh) or `{key}` (s3), and the job's placeholders.
                """),
            .init(d, "circuit_threshold", .integer(0...1000), .value("5"), example: "10", variants: network, """
                Consecutive failures before the destination is probed rather than used (its jobs wait as \
                `circuit-open`); 0 never opens the circuit.
                """),
            .init(d, "circuit_probe_interval", .duration, .value(#""30s""#), example: #""1m""#, variants: network, """
                How often an open circuit is probed (at least 100ms); it doubles while the probe fails, up to 5 \
                minutes.
                """),
            .init(d, "on_metered", .text, .value(#""defer""#), example: #""allow-below:1MiB""#, variants: network, """
                On a metered link: `defer` (wait for an unmetered one), `allow`, `allow-below:SIZE` (small files \
                go), or `always` (also past the metered budget, for small event-like uploads).
                """),
            .init(d, "sha256", .choice(Destination.HashTiming.allCases.map(\.rawValue)), .value(#""at-intake""#),
                  example: #""while-sending""#,
                  variants: [.file, .tus, .rufh, .httpPut, .httpPost, .s3, .minted, .mintedCommand], """
                When the file's SHA-256 is taken: at intake (a read of its own), or from the bytes the upload reads \
                (one read; de-duplication then waits for it). A template naming `{sha256}` needs `at-intake`.
                """),
            .init(d, "source_after_upload", .text, .value(#""keep""#), example: #""move:done""#, variants: all, """
                What becomes of a `reference` file (the caller's own) once uploaded: `keep`, `delete` or \
                `move:DIR`. Fixed per job when it is enqueued; a job's own choice wins.
                """),
            .init(d, "power", .choice(["any", "ac", "battery-not-low"]), .computed("[power] require"), example: #""ac""#,
                  variants: all, """
                This destination's power requirement, instead of `[power] require`.
                """),
            .init(d, "windows", .texts, .computed("[schedule] windows"), example: #"["22:00-06:00"]"#, variants: all, """
                This destination's upload windows, instead of `[schedule] windows`.
                """),
        ]
    }()
}
