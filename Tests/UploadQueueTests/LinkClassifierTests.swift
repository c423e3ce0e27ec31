import Foundation
import Testing
@testable import UploadQueue

/// The pieces of link classification that need no network: the routing table as the kernel writes it, interface
/// rules, NetworkManager's answers as busctl and nmcli print them, and the policy a job follows.
struct LinkClassifierTests {
    // Recorded from a machine with a Wi-Fi default route, a modem and a VPN-like /24.
    static let ipv4 = """
        Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
        wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0
        wwan0\t00000000\t01000A0A\t0003\t0\t0\t700\t00000000\t0\t0\t0
        wlan0\t0001A8C0\t00000000\t0001\t0\t0\t600\t00FFFFFF\t0\t0\t0
        tun0\t0000080A\t00000000\t0001\t0\t0\t50\t0000FFFF\t0\t0\t0
        eth9\t0000090A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0
        """
    static let ipv6 = """
        00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo
        20010db8000000000000000000000000 20 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001    wwan0
        00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
        """

    @Test("routes: most specific first, then the lowest metric; down and reject routes ignored; loopback is lo")
    func routes() {
        let table = RouteTable(ipv4: Self.ipv4, ipv6: Self.ipv6)
        #expect(table.defaultInterface == "wlan0")
        #expect(table.interface(for: [192, 168, 1, 20]) == "wlan0")
        #expect(table.interface(for: [10, 8, 3, 4]) == "tun0")
        #expect(table.interface(for: [10, 9, 0, 1]) == "wlan0", "eth9's route is down")
        #expect(table.interface(for: [93, 184, 216, 34]) == "wlan0")
        #expect(table.interface(for: [127, 0, 0, 1]) == "lo")
        let v6 = [UInt8]([0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [7])
        #expect(table.interface(for: v6) == "wwan0")
        #expect(table.interface(for: [0x26, 0x06] + [UInt8](repeating: 0, count: 14)) == nil, "the reject default")
        #expect(RouteTable(ipv4: "Iface\tDestination\n", ipv6: "").defaultInterface == nil)
        #expect(LinkMonitor.literalAddress("127.0.0.1") == [127, 0, 0, 1])
        #expect(LinkMonitor.literalAddress("[::1]")?.count == 16)
        #expect(LinkMonitor.literalAddress("example.com") == nil)
    }

    @Test("interface rules: globs from link.metered_interfaces")
    func globs() {
        #expect(InterfaceRules.glob("wwan*", matches: "wwan0"))
        #expect(InterfaceRules.glob("wwp*s?", matches: "wwp0s2"))
        #expect(!InterfaceRules.glob("wwan*", matches: "eth0"))
        #expect(!InterfaceRules.glob("ppp?", matches: "ppp10"))
        let rules = InterfaceRules(meteredNames: ["wwan*", "usb*"], sysClassNet: "/nonexistent")
        #expect(rules.meteredReason("usb0") == "name matches usb*")
        #expect(rules.meteredReason("eth0") == nil)
        #expect(rules.meteredReason("lo") == nil)
    }

    @Test("NetworkManager: busctl and nmcli outputs for all five Metered values")
    func networkManagerParsing() {
        let busctl = ["u 0": NetworkManagerProbe.Metered.unknown, "u 1": .yes, "u 2": .no, "u 3": .guessYes,
                      "u 4\n": .guessNo]
        for (output, value) in busctl { #expect(NetworkManagerProbe.parseProperty(output) == value, "\(output)") }
        let nmcli = ["unknown": NetworkManagerProbe.Metered.unknown, "yes": .yes, "no": .no,
                     "yes (guessed)": .guessYes, "no (guessed)\n": .guessNo]
        for (output, value) in nmcli { #expect(NetworkManagerProbe.parseNmcli(output) == value, "\(output)") }
        #expect(NetworkManagerProbe.parseProperty("s \"x\"") == nil)
        #expect(NetworkManagerProbe.parseObjectPath("o \"/org/freedesktop/NetworkManager/Devices/3\"\n")
            == "/org/freedesktop/NetworkManager/Devices/3")
        #expect(NetworkManagerProbe.Metered.guessYes.isMetered && NetworkManagerProbe.Metered.yes.isMetered)
        #expect(!NetworkManagerProbe.Metered.guessNo.isMetered && !NetworkManagerProbe.Metered.unknown.isMetered)
    }

    @Test("classification: override, then NetworkManager (the more metered of device and global), then rules")
    func classification() {
        let classifier = LinkClassifier(meteredInterfaces: ["wwan*"], networkManager: nil)
        #expect(classifier.classify(interface: "eth0", override: .metered, networkManager: nil).source == .override)
        #expect(classifier.classify(interface: nil, override: .auto, networkManager: nil).linkClass == .offline)
        let modem = classifier.classify(interface: "wwan0", override: .auto, networkManager: nil)
        #expect(modem.linkClass == .metered && modem.source == .interfaceRule && modem.interface == "wwan0")
        #expect(classifier.classify(interface: "eth0", override: .auto, networkManager: nil).linkClass == .unmetered)
        let vpn = classifier.classify(interface: "tun0", override: .auto, networkManager: (.guessYes, .unknown))
        #expect(vpn.linkClass == .metered && vpn.source == .networkmanager && vpn.networkManager == "guess-yes")
        let wifi = classifier.classify(interface: "wlan0", override: .auto, networkManager: (.no, .guessNo))
        #expect(wifi.linkClass == .unmetered && wifi.source == .networkmanager)
        let phone = classifier.classify(interface: "wlan0", override: .auto, networkManager: (.no, .yes))
        #expect(phone.linkClass == .metered, "the device's own value counts")
        #expect(classifier.classify(interface: "lo", override: .auto, networkManager: nil).linkClass == .unmetered)
    }

    @Test("policy: defer waits, allow goes, allow-below by size; offline holds every network job, never a file copy")
    func policy() throws {
        let dav = try Destination.httpPut(name: "dav", url: "http://h/{name}")
        let metered = LinkStatus(linkClass: .metered, source: .override)
        let offline = LinkStatus(linkClass: .offline, source: .interfaceRule)
        var job = try #require(try JSONDecoder().decode(Job.self, from: Data(Self.jobJSON.utf8)))
        #expect(LinkPolicy.waitingReason(for: job, destination: dav, link: metered) == .meteredLink)
        job.onMetered = "allow"
        #expect(LinkPolicy.waitingReason(for: job, destination: dav, link: metered) == nil)
        job.onMetered = "allow-below:1MiB"
        #expect(LinkPolicy.waitingReason(for: job, destination: dav, link: metered) == nil)
        job.size = 2 << 20
        #expect(LinkPolicy.waitingReason(for: job, destination: dav, link: metered) == .meteredLink)
        #expect(LinkPolicy.waitingReason(for: job, destination: dav, link: offline) == .offline)
        let local = Destination.localDirectory(name: "local", directory: "/tmp")
        #expect(LinkPolicy.waitingReason(for: job, destination: local, link: offline) == nil)
        #expect(MeteredPolicy(MeteredPolicy.allowBelow(1 << 20).description) == .allowBelow(1 << 20))
    }

    static let jobJSON = """
        {"id":"01a20701-c701-7000-9b62-3909668de43a","state":"pending","permanent":false,"attempts":0,"failures":0,
         "file":"/f","source_path":"/f","original_name":"f.jpg","mode":"copy","size":1000,"sha256":"00",
         "content_type":"image/jpeg","mtime_ns":0,"inode":1,"device":1,"destination":"dav","priority":0,
         "bytes_confirmed":0,"rate_bytes_per_s":0,"meta":{},"patch_state":"none","intake_complete":true,
         "cancel_requested":false,"created_at":0,"updated_at":0}
        """
}
