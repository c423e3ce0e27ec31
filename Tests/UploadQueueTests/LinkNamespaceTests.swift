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
    func ip(_ arguments: String...) throws -> BinaryRunner.Output { try ip(arguments) }

    @discardableResult
    func ip(_ arguments: [String]) throws -> BinaryRunner.Output {
        let path = try #require(Self.ipPath, "iproute2's ip is not installed: run contrib/test-servers/setup.sh")
        let output = try BinaryRunner.run(["ip"] + arguments, executable: path)
        #expect(output.status == 0, "ip \(arguments.joined(separator: " ")): \(output.stderr)")
        return output
    }

    func link(in namespace: String, config: String) throws -> [String: Any] {
        let output = try ip("netns", "exec", namespace, BinaryRunner.path, "link", "--json", "--config", config)
        return try #require(try output.json() as? [String: Any], "\(output.stdout)\(output.stderr)")
    }

    @Test("wwan0 carrying the default route is metered, an eth veth unmetered, no default route offline")
    func interfaceRulesInNamespace() throws {
        #expect(getuid() == 0, "network namespaces need root (CI runs the tests as root)")
        guard getuid() == 0, Self.ipPath != nil else {
            Issue.record("cannot create a network namespace here (root: \(getuid() == 0), ip: \(Self.ipPath ?? "missing"))")
            return
        }
        let namespace = "uq-" + UUID().uuidString.prefix(8).lowercased()
        try ip("netns", "add", namespace)
        defer { _ = try? BinaryRunner.run(["ip", "netns", "del", namespace], executable: Self.ipPath) }
        let sandbox = try Sandbox()
        func inside(_ arguments: String...) throws {
            try ip(["netns", "exec", namespace, Self.ipPath ?? "ip"] + arguments)
        }
        try inside("link", "set", "lo", "up")
        try inside("link", "add", "wwan0", "type", "veth", "peer", "name", "wpeer0")
        try inside("link", "set", "wwan0", "up")
        try inside("link", "set", "wpeer0", "up")
        try inside("addr", "add", "10.77.0.2/24", "dev", "wwan0")
        try inside("route", "add", "default", "via", "10.77.0.1", "dev", "wwan0")

        let modem = try link(in: namespace, config: sandbox.configPath)
        #expect(modem["class"] as? String == "metered", "\(modem)")
        #expect(modem["source"] as? String == "interface-rule")
        #expect(modem["interface"] as? String == "wwan0")

        try inside("link", "add", "eth7", "type", "veth", "peer", "name", "epeer7")
        try inside("link", "set", "eth7", "up")
        try inside("link", "set", "epeer7", "up")
        try inside("addr", "add", "10.78.0.2/24", "dev", "eth7")
        try inside("route", "del", "default")
        try inside("route", "add", "default", "via", "10.78.0.1", "dev", "eth7")
        let wired = try link(in: namespace, config: sandbox.configPath)
        #expect(wired["class"] as? String == "unmetered", "\(wired)")
        #expect(wired["interface"] as? String == "eth7")

        try inside("route", "del", "default")
        let none = try link(in: namespace, config: sandbox.configPath)
        #expect(none["class"] as? String == "offline", "\(none)")
        #expect(none["interface"] is NSNull)
    }
}
