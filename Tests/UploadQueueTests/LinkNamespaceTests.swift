import Foundation
import Testing
@testable import UploadQueue

/// Interface rules on real interfaces: a network namespace of the test's own with veth pairs named like a modem
/// and like Ethernet, `uploadq link --json` run inside it. Needs root and iproute2 (the test set-up installs it);
/// without them the test fails and says so.
@Suite(.serialized)
struct LinkNamespaceTests {
    static let ipPath = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    @discardableResult
    func ip(_ arguments: String...) async throws -> BinaryRunner.Output { try await ip(arguments) }

    @discardableResult
    func ip(_ arguments: [String]) async throws -> BinaryRunner.Output {
        let path = try #require(Self.ipPath, "iproute2's ip is not installed: run contrib/test-servers/setup.sh")
        let output = try await BinaryRunner.run(["ip"] + arguments, executable: path)
        #expect(output.status == 0, "ip \(arguments.joined(separator: " ")): \(output.stderr)")
        return output
    }

    func link(in namespace: String, config: String) async throws -> [String: Any] {
        let output = try await ip("netns", "exec", namespace, BinaryRunner.path, "link", "--json", "--config", config)
        return try #require(try output.json() as? [String: Any], "\(output.stdout)\(output.stderr)")
    }

    @Test("wwan0 carrying the default route is metered, an eth veth unmetered, no default route offline")
    func interfaceRulesInNamespace() async throws {
        #expect(getuid() == 0, "network namespaces need root (CI runs the tests as root)")
        guard getuid() == 0, Self.ipPath != nil else {
            Issue.record("cannot create a network namespace here (root: \(getuid() == 0), ip: \(Self.ipPath ?? "missing"))")
            return
        }
        let namespace = "uq-" + UUID().uuidString.prefix(8).lowercased()
        try await ip("netns", "add", namespace)
        // Deleting a namespace returns at once; a defer cannot await.
        defer { _ = try? ChildProcess.runBlocking(["ip", "netns", "del", namespace], executable: Self.ipPath ?? "ip", environment: [:]) }
        let sandbox = try Sandbox()
        func inside(_ arguments: String...) async throws {
            try await ip(["netns", "exec", namespace, Self.ipPath ?? "ip"] + arguments)
        }
        try await inside("link", "set", "lo", "up")
        try await inside("link", "add", "wwan0", "type", "veth", "peer", "name", "wpeer0")
        try await inside("link", "set", "wwan0", "up")
        try await inside("link", "set", "wpeer0", "up")
        try await inside("addr", "add", "10.77.0.2/24", "dev", "wwan0")
        try await inside("route", "add", "default", "via", "10.77.0.1", "dev", "wwan0")

        let modem = try await link(in: namespace, config: sandbox.configPath)
        #expect(modem["class"] as? String == "metered", "\(modem)")
        #expect(modem["source"] as? String == "interface-rule")
        #expect(modem["interface"] as? String == "wwan0")

        try await inside("link", "add", "eth7", "type", "veth", "peer", "name", "epeer7")
        try await inside("link", "set", "eth7", "up")
        try await inside("link", "set", "epeer7", "up")
        try await inside("addr", "add", "10.78.0.2/24", "dev", "eth7")
        try await inside("route", "del", "default")
        try await inside("route", "add", "default", "via", "10.78.0.1", "dev", "eth7")
        let wired = try await link(in: namespace, config: sandbox.configPath)
        #expect(wired["class"] as? String == "unmetered", "\(wired)")
        #expect(wired["interface"] as? String == "eth7")

        try await inside("route", "del", "default")
        let none = try await link(in: namespace, config: sandbox.configPath)
        #expect(none["class"] as? String == "offline", "\(none)")
        #expect(none["interface"] is NSNull)
    }
}
