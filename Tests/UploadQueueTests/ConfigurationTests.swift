import Foundation
import Testing
@testable import UploadQueue

/// Config loading: the embedded default, path resolution, and one test per kind of error, each naming the file,
/// the line and the key.
struct ConfigurationTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    func parse(_ text: String) throws(ConfigurationError) -> Configuration {
        try ConfigurationLoader.parse(text, file: "/etc/uploadq/test.toml", baseDirectory: "/srv/q")
    }

    func failure(_ text: String) -> ConfigurationError? {
        do {
            _ = try parse(text)
            return nil
        } catch {
            return error
        }
    }

    @Test("the embedded default is exactly Config/uploadq.toml and describes spool → uploaded")
    func embeddedDefault() throws {
        let file = try String(contentsOfFile: Self.repositoryRoot + "/Config/uploadq.toml", encoding: .utf8)
        #expect(file == DefaultConfiguration.text)
        let configuration = try ConfigurationLoader.load(path: nil, workingDirectory: "/tmp/work")
        #expect(configuration.stateDirectory == "/tmp/work/.uploadq")
        #expect(configuration.spool?.directory == "/tmp/work/spool")
        #expect(configuration.spool?.destination == "default")
        #expect(configuration.destinations["default"]?.settings
                == .localDirectory(LocalDirectorySettings(directory: "/tmp/work/uploaded")))
        #expect(configuration.limits.concurrency == 4)
        #expect(configuration.retry == RetryPolicy())
    }

    @Test("device constraints: power, windows, timetable and budget are read, and each mistake names its key")
    func deviceConstraints() throws {
        let base = """
            [destinations.default]
            protocol = "file"
            url = "file:///srv/out"
            """
        let configuration = try parse("""
            [power]
            require = "battery-not-low"
            low_battery = "35%"
            supply_dir = "power"
            [schedule]
            windows = ["22:00-06:00"]
            urgent_priority = 5
            time_zone = "Europe/Berlin"
            [bandwidth]
            timetable = ["08:00,512KiB", "19:00,off"]
            [link]
            metered_budget = "1GiB/month"
            budget_reset = 5
            \(base)
            power = "ac"
            windows = ["sat 00:00-24:00"]
            """)
        #expect(configuration.power.require == .batteryNotLow(percent: 35))
        #expect(configuration.power.source == .sysfs && configuration.power.supplyDirectory == "/srv/q/power")
        #expect(configuration.schedule.windows.texts == ["22:00-06:00"] && configuration.schedule.urgentPriority == 5)
        #expect(configuration.schedule.timeZone.identifier == "Europe/Berlin")
        #expect(configuration.bandwidth.timetable.entries.count == 14)
        #expect(configuration.link.meteredBudget == MeteredBudget(bytes: 1 << 30, period: .month, resetDay: 5))
        #expect(configuration.destinations["default"]?.power == .ac)
        #expect(configuration.destinations["default"]?.windows?.texts == ["sat 00:00-24:00"])
        let weekly = try parse("[link]\nmetered_budget = \"200MiB/week\"\nbudget_reset = \"wed\"\n\(base)")
        #expect(weekly.link.meteredBudget == MeteredBudget(bytes: 200 << 20, period: .week, resetDay: 2))

        for (text, key) in [
            ("[power]\nrequire = \"solar\"", "power.require"),
            ("[power]\nlow_battery = \"120%\"", "power.low_battery"),
            ("[power]\nsource = \"acpi\"", "power.source"),
            ("[schedule]\nwindows = [\"22:00-22:00\"]", "schedule.windows"),
            ("[schedule]\ntime_zone = \"Mars/Olympus\"", "schedule.time_zone"),
            ("[bandwidth]\ntimetable = [\"8:00,1MiB\"]", "bandwidth.timetable"),
            ("[link]\nmetered_budget = \"200MiB/year\"", "link.metered_budget"),
            ("[link]\nmetered_budget = \"0B/day\"", "link.metered_budget"),
            ("[link]\nbudget_reset = 3", "link.budget_reset"),
            ("[link]\nmetered_budget = \"1GiB/month\"\nbudget_reset = 31", "link.budget_reset"),
        ] {
            let error = failure("\(text)\n\(base)")
            #expect(error?.key == key, "\(text): \(String(describing: error))")
        }
        #expect(failure("\(base)\npower = \"sometimes\"")?.key == "destinations.default.power")
        #expect(failure("\(base)\nwindows = [\"sun\"]")?.key == "destinations.default.windows")
    }

    @Test("relative paths resolve against the config file's directory")
    func relativePaths() throws {
        let configuration = try ConfigurationLoader.load(path: Self.repositoryRoot + "/Config/uploadq.toml")
        #expect(configuration.stateDirectory == Self.repositoryRoot + "/Config/.uploadq")
        #expect(configuration.spool?.directory == Self.repositoryRoot + "/Config/spool")
        #expect(configuration.destinations["default"]?.settings == .localDirectory(LocalDirectorySettings(
            directory: Self.repositoryRoot + "/Config/uploaded")))
        #expect(configuration.file == Self.repositoryRoot + "/Config/uploadq.toml")
    }

    @Test("the systemd example config under contrib/ loads and uses absolute system paths")
    func systemdExample() throws {
        let configuration = try ConfigurationLoader.load(path: Self.repositoryRoot + "/contrib/systemd/uploadq.toml")
        #expect(configuration.stateDirectory.hasPrefix("/var/lib/uploadq"))
        #expect(configuration.spool?.directory.hasPrefix("/") == true)
        #expect(!configuration.destinations.isEmpty)
    }

    @Test("the lookup order is --config, $UPLOADQ_CONFIG, ./Config/uploadq.toml, then the embedded default")
    func lookupOrder() {
        #expect(ConfigurationLoader.locate(explicit: "/a.toml", environment: ["UPLOADQ_CONFIG": "/b.toml"]) == "/a.toml")
        #expect(ConfigurationLoader.locate(explicit: nil, environment: ["UPLOADQ_CONFIG": "/b.toml"]) == "/b.toml")
        #expect(ConfigurationLoader.locate(explicit: nil, environment: [:], workingDirectory: Self.repositoryRoot)
            == Self.repositoryRoot + "/Config/uploadq.toml")
        let empty = FileManager.default.temporaryDirectory.path
        if !FileManager.default.fileExists(atPath: "/etc/uploadq/uploadq.toml") {
            #expect(ConfigurationLoader.locate(explicit: nil, environment: [:], workingDirectory: empty) == nil)
        }
    }

    @Test("sizes, durations and templates are read in all their forms")
    func valueForms() throws {
        let configuration = try parse("""
            [retry]
            backoff = "exponential"
            initial_interval = "500ms"
            later_interval = "1h"
            jitter = 0
            [bandwidth]
            metered = "1.5MiB"
            unmetered = 1000
            [destinations.archive]
            protocol = "file"
            url = "file:///var/archive"
            name_template = "{date}/{meta.device}-{name}"
            chunk_size = "64KiB"
            """)
        #expect(configuration.retry.initialInterval == .milliseconds(500))
        #expect(configuration.retry.laterInterval == .seconds(3600))
        #expect(configuration.retry.backoff == .exponential)
        #expect(configuration.bandwidth.metered == 1_572_864)
        #expect(configuration.bandwidth.unmetered == 1000)
        guard case .localDirectory(let archive) = configuration.destinations["archive"]?.settings else {
            Issue.record("archive is not a local directory")
            return
        }
        #expect(archive.directory == "/var/archive" && archive.checkpointSize == 65536)
        #expect(configuration.spool == nil)
    }

    @Test("a TOML syntax error names the file and the line")
    func syntaxError() throws {
        let error = try #require(failure("state_dir = \".q\"\n[limits]\nconcurrency = = 4\n"))
        #expect(error.file == "/etc/uploadq/test.toml")
        #expect(error.line == 3)
        #expect(error.description.hasPrefix("/etc/uploadq/test.toml:3: "))
    }

    @Test("an unknown key names itself and its line, with the known keys")
    func unknownKey() throws {
        let error = try #require(failure("[limits]\nconcurrency = 2\nconcurency = 3\n"))
        #expect(error.key == "limits.concurency")
        #expect(error.line == 3)
        #expect(error.message.contains("concurrency"))
        let top = try #require(failure("stat_dir = \"x\"\n"))
        #expect(top.key == "stat_dir" && top.line == 1)
        let inDestination = try #require(failure("[destinations.a]\nprotocol = \"file\"\nurl = \"file://x\"\nbucket = \"b\"\n"))
        #expect(inDestination.key == "destinations.a.bucket" && inDestination.line == 4)
    }

    @Test("a wrong type names the key, the line and both types")
    func wrongType() throws {
        let error = try #require(failure("[limits]\n\nconcurrency = \"four\"\n"))
        #expect(error.key == "limits.concurrency")
        #expect(error.line == 3)
        #expect(error.message.contains("integer") && error.message.contains("string"))
        let section = try #require(failure("limits = 3\n"))
        #expect(section.key == "limits" && section.message.contains("table"))
    }

    @Test("impossible values are refused with key and line", arguments: [
        ("[limits]\nconcurrency = 0\n", "limits.concurrency", 2),
        ("[retry]\ninitial_interval = \"soon\"\n", "retry.initial_interval", 2),
        ("[retry]\njitter = 1.5\n", "retry.jitter", 2),
        ("[bandwidth]\nmetered = \"fast\"\n", "bandwidth.metered", 2),
        ("[bandwidth]\nmetered = -1\n", "bandwidth.metered", 2),
        ("[destinations.x]\nprotocol = \"ftp\"\nurl = \"ftp://x\"\n", "destinations.x.protocol", 2),
        ("[destinations.x]\nprotocol = \"file\"\nurl = \"http://x\"\n", "destinations.x.url", 3),
        ("[destinations.x]\nprotocol = \"file\"\nurl = \"file://x\"\nname_template = \"{nmae}\"\n", "destinations.x.name_template", 4),
        ("[destinations.x]\nprotocol = \"file\"\nurl = \"file://x\"\nname_template = \"../{name}\"\n", "destinations.x.name_template", 4),
        ("[destinations.x]\nprotocol = \"file\"\nurl = \"file://x\"\n[spool]\ndestination = \"y\"\n", "spool.destination", 5),
        ("[destinations.x]\nurl = \"file://x\"\n", "destinations.x.protocol", 1),
        ("[link]\nmode = \"sometimes\"\n", "link.mode", 2),
        ("[limits]\nmin_free_space = \"plenty\"\n", "limits.min_free_space", 2),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/\"\non_metered = \"later\"\n",
         "destinations.t.on_metered", 4),
        ("[patch]\nbody = '{\"u\": \"{{link}}\"}'\n", "patch.body", 2),
        ("[patch]\nmethod = \"patch me\"\n", "patch.method", 2),
        ("[destinations.t]\nprotocol = \"tus\"\nurl = \"https://h/files/{job_id}\"\n", "destinations.t.url", 3),
        ("[destinations.t]\nprotocol = \"tus\"\nurl = \"file://x\"\n", "destinations.t.url", 3),
        ("[destinations.t]\nprotocol = \"tus\"\nurl = \"https://h/\"\nchunk_size = 10\n", "destinations.t.chunk_size", 4),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/{x}\"\n", "destinations.t.url", 3),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/\"\nchunk_size = \"1MiB\"\n",
         "destinations.t.chunk_size", 4),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/\"\ntoken_env = \"A\"\ntoken_file = \"f\"\n",
         "destinations.t.token_file", 5),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/\"\ntoken_command = []\n",
         "destinations.t.token_command", 4),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/\"\ntoken_command = \"get-token\"\n",
         "destinations.t.token_command", 4),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/\"\nca_file = \"/nonexistent.pem\"\n",
         "destinations.t.ca_file", 4),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/\"\nheaders = { \"Bad Name\" = \"v\" }\n",
         "destinations.t.headers", 4),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/\"\nstall_timeout = \"0s\"\n",
         "destinations.t.stall_timeout", 4),
        ("[destinations.t]\nprotocol = \"http-post\"\nurl = \"https://h/\"\npublic_url_template = \"{url}\"\n",
         "destinations.t.public_url_template", 4),
        ("[destinations.t]\nprotocol = \"s4\"\nurl = \"https://h/\"\n", "destinations.t.protocol", 2),
        ("[destinations.t]\nprotocol = \"tus\"\nurl = \"https://h/\"\nsha256 = \"later\"\n", "destinations.t.sha256", 4),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/{sha256}\"\nsha256 = \"while-sending\"\n",
         "destinations.t.sha256", 4),
        ("[destinations.t]\nprotocol = \"http-put\"\nurl = \"https://h/\"\nsha256 = \"while-sending\"\n"
            + "public_url_template = \"https://cdn/{sha256}\"\n", "destinations.t.sha256", 4),
        ("[destinations.x]\nprotocol = \"file\"\nurl = \"file://x\"\nname_template = \"{sha256}\"\n"
            + "sha256 = \"while-sending\"\n", "destinations.x.sha256", 5),
        ("[destinations.t]\nprotocol = \"s3\"\nbucket = \"b-1\"\nurl = \"https://h/\"\n", "destinations.t.url", 4),
    ])
    func impossibleValues(text: String, key: String, line: Int) throws {
        let error = try #require(failure(text))
        #expect(error.key == key)
        #expect(error.line == line)
        #expect(error.description.contains("test.toml:\(line): key `\(key)`"))
    }

    @Test("network destinations read their URL, chunking, headers, credentials, TLS, timeouts and breaker")
    func networkDestinations() throws {
        let configuration = try parse("""
            [destinations.photos]
            protocol = "tus"
            url = "https://uploads.example.com/files/"
            chunk_size = "6MiB"
            headers = { "X-Client" = "uploadq", "X-Tenant" = "t1" }
            token_file = "secrets/token"
            connect_timeout = "5s"
            stall_timeout = "45s"
            stall_min_rate = "1KiB"
            public_url_template = "https://cdn.example.com/{upload_id}/{name}"
            circuit_threshold = 3
            circuit_probe_interval = "10s"
            [destinations.dav]
            protocol = "http-put"
            url = "https://files.example.com/photos/{date}/{job_id}-{name}"
            sha256 = "while-sending"
            token_command = ["bin/get-token", "--audience", "files"]
            token_command_timeout = "3s"
            [destinations.api]
            protocol = "http-post"
            url = "https://api.example.com/photos"
            form_field = "photo"
            token_env = "API_TOKEN"
            """)
        let photos = try #require(configuration.destinations["photos"])
        #expect(photos.settings == .tus(TusSettings(endpoint: photos.url, chunkSize: 6 << 20)))
        #expect(photos.http.headers == ["X-Client": "uploadq", "X-Tenant": "t1"])
        #expect(photos.http.credentials == .file("/srv/q/secrets/token"))
        #expect(photos.http.connectTimeout == .seconds(5))
        #expect(photos.http.stall == StallDetection(minimumRate: 1024, window: .seconds(45)))
        #expect(photos.publicURLTemplate?.description == "https://cdn.example.com/{upload_id}/{name}")
        #expect(photos.circuitBreaker.threshold == 3 && photos.circuitBreaker.probeInterval == .seconds(10))
        let dav = try #require(configuration.destinations["dav"])
        guard case .httpPut(let put) = dav.settings, case .template(let url) = put.target else {
            Issue.record("dav is not http-put to a template")
            return
        }
        #expect(!url.isConstant)
        #expect(dav.http.credentials == .command(["/srv/q/bin/get-token", "--audience", "files"], timeout: .seconds(3)))
        #expect(dav.http.stall == StallDetection())
        #expect(dav.hashTiming == .whileSending && photos.hashTiming == .atIntake)
        let api = try #require(configuration.destinations["api"])
        #expect(api.settings == .httpPost(HTTPPostSettings(url: try URLTemplate(api.url), formField: "photo")))
        #expect(api.http.credentials == .environment("API_TOKEN"))
        let minimal = try parse("[destinations.t]\nprotocol = \"tus\"\nurl = \"https://h.example/files/\"\n")
        #expect(minimal.destinations["t"] == (try Destination.tus(name: "t", endpoint: "https://h.example/files/")),
                "a tus destination built in code equals the one read from TOML")
    }

    @Test("an s3 destination: endpoint, bucket, region, addressing, keys, part sizes, credential sources")
    func s3Destination() throws {
        let configuration = try parse("""
            [destinations.archive]
            protocol = "s3"
            endpoint = "http://127.0.0.1:9000/"
            bucket = "photos"
            key_template = "{date}/{meta.album}/{job_id}-{name}"
            part_size = "6MiB"
            multipart_threshold = "64MiB"
            part_concurrency = 4
            access_key_env = "MINIO_KEY"
            secret_key_env = "MINIO_SECRET"
            public_url_template = "https://cdn.example.com/{key}"
            [destinations.aws]
            protocol = "s3"
            bucket = "my.bucket-1"
            region = "eu-west-1"
            profile = "uploads"
            """)
        let archive = try #require(configuration.destinations["archive"])
        guard case .s3(let settings) = archive.settings else {
            Issue.record("archive is not s3")
            return
        }
        #expect(archive.url == "http://127.0.0.1:9000/photos")
        #expect(settings.pathStyle, "an IP address means path style")
        #expect(settings.region == "us-east-1")
        #expect(settings.partSize == 6 << 20 && settings.multipartThreshold == 64 << 20)
        #expect(settings.partConcurrency == 4)
        #expect(settings.credentials == .environment(accessKey: "MINIO_KEY", secretKey: "MINIO_SECRET", sessionToken: nil))
        #expect(archive.publicURLTemplate?.description == "https://cdn.example.com/{key}")
        guard case .s3(let aws) = configuration.destinations["aws"]?.settings else {
            Issue.record("aws is not s3")
            return
        }
        #expect(aws.endpoint == "https://s3.eu-west-1.amazonaws.com")
        #expect(!aws.pathStyle)
        #expect(configuration.destinations["aws"]?.url == "https://my.bucket-1.s3.eu-west-1.amazonaws.com")
        #expect(aws.credentials == .standard(profile: "uploads"))
        #expect(aws.partSize == 8 << 20 && aws.multipartThreshold == 16 << 20)
    }

    @Test("s3 mistakes name the key", arguments: [
        ("bucket = \"Photos_Bucket\"", "bucket"),
        ("bucket = \"photos\"\npart_size = \"1MiB\"", "part_size"),
        ("bucket = \"photos\"\npart_concurrency = 0", "part_concurrency"),
        ("bucket = \"photos\"\nmultipart_threshold = \"6GiB\"", "multipart_threshold"),
        ("bucket = \"photos\"\nurl = \"http://x/\"", "url"),
        ("bucket = \"photos\"\ntoken_env = \"T\"", "token_env"),
        ("bucket = \"photos\"\naccess_key_env = \"A\"", "secret_key_env"),
        ("bucket = \"photos\"\nendpoint = \"ftp://x\"", "endpoint"),
        ("bucket = \"photos\"\nendpoint = \"http://10.0.0.1:9000\"\npath_style = false", "path_style"),
        ("bucket = \"photos\"\nendpoint = \"https://p.supabase.co/storage/v1/s3\"\npath_style = false", "path_style"),
        ("bucket = \"photos\"\nkey_template = \"a/./{name}\"", "key_template"),
        ("bucket = \"photos\"\npublic_url_template = \"https://cdn/{upload_id}\"", "public_url_template"),
        ("endpoint = \"http://127.0.0.1:9000\"", "bucket"),
        ("bucket = \"photos\"\nendpoint = \"https://admin:hunter2@s3.example.com\"", "endpoint"),
        ("bucket = \"photos\"\nsha256 = \"while-sending\"\nkey_template = \"{sha256}\"", "sha256"),
    ])
    func s3Mistakes(lines: String, key: String) {
        let error = failure("[destinations.s]\nprotocol = \"s3\"\n\(lines)\n")
        #expect(error?.key == "destinations.s.\(key)", "\(String(describing: error)) for \(lines)")
        #expect(error?.description.contains("hunter2") != true, "a password in the endpoint is not repeated")
    }

    @Test("[link] mode and on_metered: a hand-set class and each destination's metered policy")
    func linkSettings() throws {
        let configuration = try parse("""
            [link]
            mode = "metered"
            metered_interfaces = ["wwan*", "enx*"]
            [bandwidth]
            metered = "256KiB"
            unmetered = "10MiB"
            [destinations.photos]
            protocol = "tus"
            url = "https://h.example/files/"
            [destinations.events]
            protocol = "http-post"
            url = "https://h.example/events"
            on_metered = "allow-below:1MiB"
            [destinations.archive]
            protocol = "s3"
            bucket = "photos"
            on_metered = "allow"
            """)
        #expect(configuration.link.mode == "metered")
        #expect(configuration.link.meteredInterfaces == ["wwan*", "enx*"])
        #expect(configuration.bandwidth.metered == 256 << 10 && configuration.bandwidth.unmetered == 10 << 20)
        #expect(configuration.destinations["photos"]?.onMetered == .defer)
        #expect(configuration.destinations["events"]?.onMetered == .allowBelow(1 << 20))
        #expect(configuration.destinations["archive"]?.onMetered == .allow)
    }

    @Test("[patch]: method, body template, credentials, metered policy")
    func patchSettings() throws {
        let configuration = try parse("""
            [patch]
            method = "PUT"
            body = '{"url": "{{url}}", "record": "{{meta.record}}"}'
            token_env = "API_TOKEN"
            on_metered = "defer"
            """)
        #expect(configuration.patch.method == "PUT")
        #expect(configuration.patch.body.description == #"{"url": "{{url}}", "record": "{{meta.record}}"}"#)
        #expect(configuration.patch.http.credentials == .environment("API_TOKEN"))
        #expect(configuration.patch.onMetered == .defer)
        let defaults = try parse("")
        #expect(defaults.patch == PatchSettings())
        #expect(defaults.patch.body.description == #"{"photo_url": "{{url}}"}"#)
    }

    @Test("the example configs under Config/examples/ load")
    func examples() throws {
        let directory = Self.repositoryRoot + "/Config/examples"
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".toml") }
        #expect(names.count >= 4)
        for name in names {
            let configuration = try ConfigurationLoader.load(path: directory + "/" + name)
            #expect(!configuration.destinations.isEmpty, "\(name)")
        }
    }

    @Test("a missing config file is an error naming it")
    func missingFile() {
        #expect(throws: ConfigurationError.self) { try ConfigurationLoader.load(path: "/nonexistent/uploadq.toml") }
    }
}
