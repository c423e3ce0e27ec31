import Foundation
import Testing
@testable import UploadQueue

/// The Debian package `contrib/package-deb.sh` builds (the test command builds it into `.build/deb/` first): lintian
/// finds nothing that is not overridden with a reason, and installing it into a throwaway root gives the user, the
/// group, the modes, the conffile and an enabled unit that `systemd-analyze verify` accepts; its daemon takes a
/// dropper's file; remove keeps the queue, purge deletes it and keeps the files.
@Suite(.serialized)
struct DebianPackageTests {
    static var package: String {
        // dpkg answers at once: this blocking run costs the concurrency pool nothing worth a thread.
        let arch = (try? ChildProcess.runBlocking(["dpkg", "--print-architecture"], executable: "/usr/bin/dpkg",
                                                  environment: ProcessInfo.processInfo.environment))
            .map { String(decoding: $0.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) } ?? "amd64"
        return ConfigurationTests.repositoryRoot + "/.build/deb/uploadq_\(UploadQueueVersion.current)_\(arch).deb"
    }

    func requirePackage() throws -> String {
        let path = Self.package
        try #require(FileManager.default.fileExists(atPath: path),
                     "no \(path): build it first with contrib/package-deb.sh .build/deb (contrib/run-tests.sh does)")
        return path
    }

    @Test("the package's control names the one version, the shared libraries' packages and adduser")
    func control() async throws {
        let deb = try requirePackage()
        let fields = try await BinaryRunner.run(["dpkg-deb", "-f", deb, "Package", "Version", "Depends", "Architecture"],
                                          executable: "/usr/bin/dpkg-deb")
        #expect(fields.status == 0, "\(fields.stderr)")
        #expect(fields.stdout.contains("Version: \(UploadQueueVersion.current)\n"))
        for dependency in ["adduser", "libc6", "libcurl4", "libsqlite3-0", "libmagic1"] {
            #expect(fields.stdout.contains(dependency), "Depends lacks \(dependency): \(fields.stdout)")
        }
        let listing = try await BinaryRunner.run(["dpkg-deb", "-c", deb], executable: "/usr/bin/dpkg-deb").stdout
        for path in ["./usr/bin/uploadq", "./etc/uploadq/uploadq.toml", "./lib/systemd/system/uploadq.service",
                     "./usr/share/man/man1/uploadq.1.gz", "./usr/share/man/man1/uploadq-enqueue.1.gz",
                     "./usr/share/man/man1/uploadq-config-show.1.gz", "./usr/share/man/man5/uploadq.toml.5.gz",
                     "./usr/share/doc/uploadq/copyright"] {
            #expect(listing.contains(path), "\(path) missing")
        }
    }

    @Test("the package's binary is the release build's: no exported symbol; relocations packed (glibc 2.36 asked for)")
    func releaseBuild() async throws {
        let deb = try requirePackage()
        // The binary out of the package, read by readelf: its dynamic section and the glibc versions it needs.
        let script = "dpkg-deb --fsys-tarfile \"$1\" | tar -xOf - ./usr/bin/uploadq > \"$2\" && readelf -dV \"$2\""
        let binary = FileManager.default.temporaryDirectory
            .appendingPathComponent("uploadq-deb-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: binary) }
        let elf = try await BinaryRunner.run(["bash", "-c", script, "bash", deb, binary], executable: "/bin/bash")
        #expect(elf.status == 0, "\(elf.stderr)")
        let symbols = try await BinaryRunner.run(["readelf", "--dyn-syms", "-W", binary],
                                                 executable: "/usr/bin/readelf")
        let exported = symbols.stdout.split(separator: "\n").filter { $0.contains(" GLOBAL ") && !$0.contains(" UND ") }
        #expect(exported.count < 20, "the binary exports \(exported.count) symbols: \(exported.prefix(5))")
        // glibc 2.36 brought packed relocations; dpkg-shlibdeps does not count what they need, the package says it.
        let host = try await BinaryRunner.run(["getconf", "GNU_LIBC_VERSION"], executable: "/usr/bin/getconf").stdout
        let fields = try await BinaryRunner.run(["dpkg-deb", "-f", deb, "Depends"], executable: "/usr/bin/dpkg-deb")
        func minor(_ text: String, after prefix: String) -> Int? {
            guard let start = text.range(of: prefix)?.upperBound else { return nil }
            return Int(text[start...].prefix(while: \.isNumber))
        }
        let hostMinor = try #require(minor(host, after: "glibc 2."), "getconf: \(host)")
        let asked = try #require(minor(fields.stdout, after: "libc6 (>= 2."), "Depends: \(fields.stdout)")
        if hostMinor >= 36 {
            #expect(elf.stdout.contains("(RELR)"), "no packed relocations: not built by contrib/build-release.sh")
            #expect(elf.stdout.contains("GLIBC_ABI_DT_RELR"))
            #expect(asked >= 36, "the binary needs glibc 2.36: \(fields.stdout)")
        } else {
            #expect(!elf.stdout.contains("GLIBC_ABI_DT_RELR"), "packed relocations that this host's glibc cannot load")
        }
    }

    @Test("lintian: no error, warning or info that is not overridden with its reason")
    func lintian() async throws {
        let deb = try requirePackage()
        let result = try await BinaryRunner.run(["lintian", "--fail-on", "error,warning,info", "-I", "-E", "--pedantic", deb],
                                          executable: "/usr/bin/lintian")
        #expect(result.status == 0, "lintian:\n\(result.stdout)\(result.stderr)")
        let tags = result.stdout.split(separator: "\n").filter { $0.hasPrefix("E:") || $0.hasPrefix("W:") || $0.hasPrefix("I:") || $0.hasPrefix("P:") }
        #expect(tags.isEmpty, "\(tags)")
        // Each override carries its reason: a comment right above it.
        let overrides = try String(contentsOfFile: ConfigurationTests.repositoryRoot + "/contrib/debian/lintian-overrides",
                                   encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        for (index, line) in overrides.enumerated() where line.hasPrefix("uploadq:") {
            #expect(index > 0 && overrides[index - 1].hasPrefix("# "), "override without a reason: \(line)")
        }
    }

    @Test("installed into a throwaway root: user, group, modes, conffile, enabled unit, a delivered file; remove and purge")
    func install() async throws {
        let deb = try requirePackage()
        let result = try await BinaryRunner.run(["bash", ConfigurationTests.repositoryRoot + "/contrib/debian/throwaway-install.sh", deb],
                                          executable: "/bin/bash")
        #expect(result.status == 0, "throwaway-install:\n\(result.stdout)\n\(result.stderr)")
        var facts: [String: String] = [:]
        for line in result.stdout.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            facts[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        #expect(facts["installed"] == "\(UploadQueueVersion.current) install ok installed", "\(result.stdout)")
        #expect(facts["version"] == UploadQueueVersion.current)
        #expect(facts["conffiles"]?.trimmingCharacters(in: .whitespaces) == "/etc/uploadq/uploadq.toml")
        #expect(facts["stat:/usr/bin/uploadq"] == "755 root root regular file")
        #expect(facts["stat:/etc/uploadq/uploadq.toml"] == "640 root uploadq regular file")
        #expect(facts["stat:/lib/systemd/system/uploadq.service"] == "644 root root regular file")
        #expect(facts["stat:/var/lib/uploadq"] == "700 uploadq uploadq directory")
        // Sticky and setgid, owned by the daemon (so it can take droppers' files out), writable by the droppers.
        #expect(facts["stat:/var/spool/uploadq"] == "3770 uploadq uploadq-drop directory")
        for path in ["/usr/share/man/man1/uploadq.1.gz", "/usr/share/man/man5/uploadq.toml.5.gz",
                     "/usr/share/man/man1/uploadq-status.1.gz", "/usr/share/bash-completion/completions/uploadq",
                     "/usr/share/zsh/vendor-completions/_uploadq", "/usr/share/fish/vendor_completions.d/uploadq.fish",
                     "/usr/share/doc/uploadq/copyright"] {
            #expect(facts["stat:" + path] == "644 root root regular file", "\(path)")
        }
        let user = (facts["user"] ?? "").split(separator: ":", omittingEmptySubsequences: false)
        #expect(user.count == 7 && user[0] == "uploadq", "\(facts["user"] ?? "")")
        if user.count == 7 {
            #expect((Int(user[2]) ?? 1000) < 1000, "not a system user")
            #expect(user[5] == "/var/lib/uploadq" && user[6].hasSuffix("nologin"))
        }
        #expect(facts["group"]?.hasPrefix("uploadq-drop:x:") == true)
        #expect(facts["enabled"] == "/lib/systemd/system/uploadq.service", "the unit is not enabled")
        #expect(facts["running"] == "0", "started on a machine without systemd")
        #expect(facts["verify"] == "ok", "systemd-analyze verify: \(facts["verify"] ?? "")")
        #expect(facts["check"] == "config OK: /etc/uploadq/uploadq.toml", "the daemon's user cannot read its config")
        #expect(facts["daemon"] == "stopped", "\(facts["daemon"] ?? "")")
        let delivered = (facts["delivered"] ?? "").split(separator: " ")
        #expect(delivered.count == 3 && delivered[0] == delivered[2], "the dropped file: \(facts["delivered"] ?? "")")
        #expect(facts["spool"] == "0")
        #expect(facts["upgraded:config"] == "640 root uploadq", "the upgrade opened the config up")
        #expect(facts["upgraded:enabled"] == "/lib/systemd/system/uploadq.service")
        #expect(facts["upgraded:without-config"] == "ok", "\(facts["upgraded:without-config"] ?? "")")
        #expect(facts["removed:binary"] == "gone")
        #expect(facts["removed:queue"] == "kept")
        #expect(facts["removed:config"] == "kept")
        // Purge never deletes a file the queue has not delivered: it keeps the queue with it, and says so.
        #expect(facts["purged-pending:queue"] == "kept")
        #expect(facts["purged-pending:blobs"] == "1")
        #expect(facts["purged-pending:said"] == "1")
        #expect(facts["purged:config"] == "gone")
        #expect(facts["purged:enabled"] == "no")
        // Installed again, the kept queue is finished; the next purge deletes it, and keeps the uploaded files.
        #expect(facts["reinstalled:daemon"] == "ok", "\(facts["reinstalled:daemon"] ?? "")")
        #expect(facts["reinstalled:delivered"] == "1")
        #expect(facts["purged:queue"] == "gone")
        #expect(facts["purged:uploaded"] == "2", "purge deleted an uploaded file")
    }
}
