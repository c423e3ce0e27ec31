import Foundation
import Testing
@testable import UploadQueue

/// `uploadq config show` and `config check`: the effective config loads back to the same configuration, names
/// every key it was given, and shows no secret.
struct EffectiveConfigurationTests {
    /// A config that sets every key the loader reads to something other than its default.
    static let everyKey = """
        state_dir = "state"
        [limits]
        concurrency = 7
        min_free_space = "3%"
        [retry]
        backoff = "exponential"
        initial_interval = "250ms"
        initial_attempts = 3
        later_interval = "2h"
        jitter = 0.25
        [link]
        mode = "metered"
        metered_interfaces = ["wwan0", "lte*"]
        metered_budget = "300MiB/week"
        budget_reset = "wed"
        [bandwidth]
        metered = "256KiB"
        unmetered = 1000001
        timetable = ["sat-08:00,512KiB", "19:00,off"]
        [power]
        require = "battery-not-low"
        low_battery = "35%"
        source = "sysfs"
        supply_dir = "/run/power"
        [schedule]
        windows = ["22:00-06:00", "sat 00:00-24:00"]
        urgent_priority = 9
        time_zone = "Europe/Berlin"
        [spool]
        dir = "incoming"
        destination = "photos"
        quiet_period = "3s"
        rescan_interval = "45s"
        network_quiet_period = "2m"
        sidecar_destinations = ["photos", "bucket"]
        sidecar_may_allow_metered = true
        [patch]
        method = "PUT"
        body = '{"url": "{{url}}", "id": "{{job_id}}"}'
        on_metered = "allow-below:64KiB"
        allowed_urls = ["https://api.example.com/records/"]
        token_env = "PATCH_TOKEN"
        connect_timeout = "5s"
        [mint]
        token_file = "/etc/uploadq/mint-token"
        stall_timeout = "40s"
        [metrics]
        textfile = "/var/lib/node_exporter/uploadq.prom"
        interval = "10s"
        [retention]
        uploaded_copies = "archive"
        archive_dir = "/srv/archive"
        archive_template = "{date}/{name}"
        history = "forever"
        [hooks]
        on_uploaded = ["/usr/local/bin/notify", "--photo"]
        on_failed = ["bin/alert"]
        timeout = "45s"
        pass_env = ["DISPLAY"]
        max_attempts = 0
        [events]
        reader_buffer = "64KiB"
        [destinations.photos]
        protocol = "tus"
        url = "https://tus.example.com/files/"
        chunk_size = "4MiB"
        creation_with_upload = true
        token_command = ["/usr/local/bin/get-token", "--audience", "photos"]
        token_command_timeout = "20s"
        pass_env = ["HOME"]
        stall_min_rate = 10
        min_rate = "2KiB"
        min_rate_window = "90s"
        trusted_origins = ["https://cdn.example.com:8443"]
        public_url_template = "https://cdn.example.com:8443/p/{upload_id}"
        circuit_threshold = 9
        circuit_probe_interval = "1m"
        on_metered = "allow"
        sha256 = "while-sending"
        source_after_upload = "move:sent"
        power = "ac"
        windows = ["01:00-05:00"]
        [destinations.bucket]
        protocol = "s3"
        endpoint = "http://127.0.0.1:9000"
        bucket = "field-photos"
        region = "eu-west-1"
        key_template = "{date}/{sha256}-{name}"
        multipart_threshold = "32MiB"
        part_size = "16MiB"
        part_concurrency = 3
        credentials_file = "/etc/uploadq/aws"
        profile = "field"
        source_after_upload = "delete"
        [destinations.form]
        protocol = "http-post"
        url = "https://upload.example.com/{date}/{name}"
        form_field = "photo"
        [destinations.signed]
        protocol = "http-put"
        mint_command = ["/usr/local/bin/mint", "--bucket", "b"]
        mint_command_timeout = "3s"
        pass_env = ["AWS_PROFILE"]
        [destinations.companion]
        protocol = "s3"
        mint_url = "https://companion.example.com"
        part_size = "5MiB"
        [destinations.resumable]
        protocol = "rufh"
        url = "https://rufh.example.com/uploads"
        interop_version = 8
        [destinations.local]
        protocol = "file"
        url = "file://out"
        name_template = "{date}/{name}"
        chunk_size = "1MiB"
        """

    func parse(_ text: String) throws(ConfigurationError) -> Configuration {
        try ConfigurationLoader.parse(text, file: "/etc/uploadq/test.toml", baseDirectory: "/srv/q")
    }

    @Test("show's TOML loads back to the same configuration: every key set, the embedded default, every example")
    func roundTrip() throws {
        var configurations = [try parse(Self.everyKey), try ConfigurationLoader.load(path: nil, workingDirectory: "/tmp/w")]
        let examples = ConfigurationTests.repositoryRoot + "/Config/examples"
        let names = try FileManager.default.contentsOfDirectory(atPath: examples).filter { $0.hasSuffix(".toml") }.sorted()
        #expect(names.count >= 7)
        for name in names {
            var configuration = try ConfigurationLoader.load(path: examples + "/" + name)
            configuration.file = nil
            configurations.append(configuration)
        }
        for configuration in configurations {
            let text = EffectiveConfiguration(configuration, redactingSecrets: false).toml()
            let again = try parse(text)
            #expect(again == configuration, "\(text)")
        }
        // With nothing secret in it, the redacted document is the same.
        let plain = try ConfigurationLoader.load(path: nil, workingDirectory: "/tmp/w")
        #expect(try parse(EffectiveConfiguration(plain).toml()) == plain)
    }

    @Test("every key a config sets appears in show, and show names the defaults of keys it did not set")
    func everyKeyShown() throws {
        let document = EffectiveConfiguration(try parse(Self.everyKey), redactingSecrets: false)
        var missing: [String] = []
        func walk(_ given: TOMLTable, _ shown: EffectiveConfiguration.Table, path: String) {
            for key in given.keys {
                guard let value = shown[key] else {
                    missing.append(path + key)
                    continue
                }
                if case .table(let inner)? = given[key]?.kind, case .table(let innerShown) = value, key != "headers" {
                    walk(inner, innerShown, path: path + key + ".")
                }
            }
        }
        walk(try TOMLParser.parse(Self.everyKey), document.root, path: "")
        #expect(missing.isEmpty, "not shown: \(missing)")

        let defaults = EffectiveConfiguration(try parse("""
            [destinations.default]
            protocol = "tus"
            url = "https://tus.example.com/files/"
            """))
        guard case .table(let destinations)? = defaults.root["destinations"],
              case .table(let tus)? = destinations["default"],
              case .table(let retry)? = defaults.root["retry"] else {
            Issue.record("no destinations or retry table")
            return
        }
        #expect(tus["chunk_size"] == .string("8MiB"))
        #expect(tus["on_metered"] == .string("defer"))
        #expect(tus["connect_timeout"] == .string("15s"))
        #expect(retry["initial_interval"] == .string("30s"))
        #expect(defaults.root["state_dir"] == .string("/srv/q/.uploadq"))
    }

    @Test("show redacts header values, URL credentials and query values, and program arguments, in TOML and JSON")
    func secretsRedacted() throws {
        let configuration = try parse("""
            [patch]
            headers = { Authorization = "Bearer patch-secret-1" }
            [destinations.default]
            protocol = "tus"
            url = "https://user:pass-secret-2@tus.example.com/files/?token=query-secret-3"
            headers = { X-Api-Key = "header-secret-4" }
            token_command = ["/usr/local/bin/get-token", "--password", "argument-secret-5"]
            [destinations.minted]
            protocol = "http-put"
            mint_url = "https://mint.example.com/sign?key=query-secret-6"
            [destinations.signed]
            protocol = "http-post"
            mint_command = ["/usr/local/bin/mint", "argument-secret-7"]
            """)
        let document = EffectiveConfiguration(configuration)
        for output in [document.toml(), document.json()] {
            for secret in ["patch-secret-1", "pass-secret-2", "query-secret-3", "header-secret-4", "argument-secret-5",
                           "query-secret-6", "argument-secret-7"] {
                #expect(!output.contains(secret), "\(secret) shown")
            }
            #expect(output.contains("/usr/local/bin/get-token"))
            #expect(output.contains("X-Api-Key"))
            #expect(output.contains(EffectiveConfiguration.redacted))
        }
        let json = try JSONSerialization.jsonObject(with: Data(document.json().utf8)) as? [String: Any]
        let destinations = json?["destinations"] as? [String: Any]
        #expect((destinations?["default"] as? [String: Any])?["protocol"] as? String == "tus")
        #expect(json?["state_dir"] as? String == "/srv/q/.uploadq")
    }

    @Test("uploadq config check says OK or exits 1 with file:line:key; config show prints loadable TOML and JSON")
    func commands() async throws {
        let sandbox = try Sandbox()
        let good = try await BinaryRunner.run(["config", "check", "--config", sandbox.configPath])
        #expect(good.status == 0, "\(good.stderr)")
        #expect(good.stdout.contains("config OK: \(sandbox.configPath)"))

        let bad = sandbox.root + "/bad.toml"
        try "state_dir = \"s\"\n[limits]\nconcurrency = 0\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let failed = try await BinaryRunner.run(["config", "check", "--config", bad])
        #expect(failed.status == 1)
        #expect(failed.stderr.contains("\(bad):3: key `limits.concurrency`"), "\(failed.stderr)")
        #expect(!FileManager.default.fileExists(atPath: sandbox.root + "/s"), "check created the state directory")

        let shown = try await BinaryRunner.run(["config", "show", "--config", sandbox.configPath])
        #expect(shown.status == 0, "\(shown.stderr)")
        let copy = sandbox.root + "/shown.toml"
        try shown.stdout.write(toFile: copy, atomically: true, encoding: .utf8)
        var original = try ConfigurationLoader.load(path: sandbox.configPath)
        var reloaded = try ConfigurationLoader.load(path: copy)
        (original.file, reloaded.file) = (nil, nil)
        #expect(original == reloaded)
        let json = try await BinaryRunner.run(["config", "show", "--json", "--config", sandbox.configPath])
        #expect((try json.json() as? [String: Any])?["state_dir"] as? String == original.stateDirectory)
    }
}
