import Foundation
import Testing
@testable import UploadQueue

/// What proves a success and what unmasks a portal, without a network: the answers as servers and portals send
/// them, read by the pure parts.
struct ProofTests {
    static func response(_ status: Int, _ headers: [(String, String)] = [], body: String = "") -> HTTPResponse {
        HTTPResponse(status: status, headers: headers.map { HTTPHeader($0.0, $0.1) }, body: Array(body.utf8), bytesSent: 0)
    }

    static let page = "<!DOCTYPE html><html><head><title>  Hotel\n Wi-Fi <b>login</b> </title></head><body>…</body></html>"

    @Test("portal signals: 511, a redirect to another origin, a 2xx page; not a redirect home, an error page, an empty text/html")
    func portalSignals() {
        let url = "https://uploads.example.com/files/"
        #expect(PortalSignal.read(Self.response(511, body: "login"), requestURL: url)?.kind == .networkAuthentication)
        let away = PortalSignal.read(Self.response(302, [("Location", "http://wifi.hotel.test/login?u=1")]), requestURL: url)
        #expect(away?.kind == .redirect(origin: "http://wifi.hotel.test"))
        #expect(away?.account == "HTTP 302, a redirect to http://wifi.hotel.test")
        #expect(PortalSignal.read(Self.response(307, [("Location", "/files/2")]), requestURL: url) == nil, "its own origin")
        #expect(PortalSignal.read(Self.response(301, [("Location", "https://uploads.example.com:443/x")]), requestURL: url) == nil)
        let page = PortalSignal.read(Self.response(200, [("Content-Type", "text/html; charset=utf-8")], body: Self.page),
                                     requestURL: url)
        #expect(page?.kind == .htmlPage(title: "Hotel Wi-Fi <b>login</b>"))
        #expect(PortalSignal.read(Self.response(200, body: "  \n<html><body>hi</body></html>"), requestURL: url) != nil,
                "no Content-Type: the body says it")
        #expect(PortalSignal.read(Self.response(200, [("Content-Type", "text/html")]), requestURL: url) == nil,
                "moto labels every empty answer text/html")
        #expect(PortalSignal.read(Self.response(502, [("Content-Type", "text/html")], body: Self.page), requestURL: url) == nil,
                "an error page is the server's (or its proxy's) own verdict")
        #expect(PortalSignal.read(Self.response(200, [("Content-Type", "text/html")], body: Self.page), requestURL: url,
                                  htmlExpected: true) == nil)
        #expect(PortalSignal.read(Self.response(200, [("Content-Type", "application/json")], body: "{}"), requestURL: url) == nil)
        // From a server that never answers in HTML (S3, a JSON backend), a 4xx page is a portal's; a 413 stays a cap.
        let forbidden = Self.response(403, [("Content-Type", "text/html")], body: Self.page)
        #expect(PortalSignal.read(forbidden, requestURL: url, pagesAreForeign: true) != nil)
        #expect(PortalSignal.read(forbidden, requestURL: url) == nil, "a DAV server's own 403 page")
        #expect(PortalSignal.read(Self.response(413, [("Content-Type", "text/html")], body: Self.page), requestURL: url,
                                  pagesAreForeign: true) == nil)
        // Redirects to the same host (an https upgrade) or to a trusted origin are the server's own.
        #expect(PortalSignal.read(Self.response(301, [("Location", "https://uploads.example.com/files/")]),
                                  requestURL: "http://uploads.example.com/files/") == nil)
        let cdn = Self.response(302, [("Location", "https://cdn.example.net/x")])
        #expect(PortalSignal.read(cdn, requestURL: url, trusted: [URLOrigin(url: "https://cdn.example.net")!]) == nil)
        #expect(PortalSignal.read(cdn, requestURL: url) != nil)
        // What the failure says, and that it is no verdict.
        let failure = page!.failure(request: "PUT https://uploads.example.com/files/a.jpg", destination: "photos")
        #expect(failure.kind == .interrupted && failure.code == TransferFailure.portalAnswerCode && failure.isUnverified
                && failure.bearsPortalMarks)
        #expect(failure.message.contains("HTTP 200, an HTML page (\"Hotel Wi-Fi <b>login</b>\")")
                && failure.message.contains("log in on the network, or wait"), "\(failure.message)")
        // A title that would write control characters into the log is escaped.
        let hostile = PortalSignal.title(of: Array("<title>\u{1B}[31mred</title>".utf8))
        #expect(hostile?.contains("\u{1B}") == false, "\(hostile ?? "")")
    }

    @Test("answer digests: Repr-Digest sha-256 and md5, Content-MD5, x-goog-hash; an ETag only where it is an MD5")
    func answerDigests() async throws {
        let sha = String(repeating: "ab", count: 32)
        let shaField = "sha-256=:\(Data(repeating: 0xAB, count: 32).base64EncodedString()):"
        let md5 = [UInt8](repeating: 0x11, count: 16)
        let md5Base64 = Data(md5).base64EncodedString()
        let reader = { () async throws(TransferFailure) -> [UInt8] in md5 }
        let repr = AnswerDigests(Self.response(201, [("Repr-Digest", shaField)]), etagIsMD5: false)
        #expect(try await repr.agree(sha256: sha, fileMD5: reader)?.0 == true)
        #expect(try await repr.agree(sha256: String(repeating: "cd", count: 32), fileMD5: reader)?.0 == false)
        let both = AnswerDigests(Self.response(201, [("Repr-Digest", "md5=:\(md5Base64):, unknown=:AA==:")]), etagIsMD5: false)
        #expect(both.md5?.field == "Repr-Digest" && both.sha256 == nil)
        #expect(AnswerDigests(Self.response(200, [("Content-MD5", md5Base64)]), etagIsMD5: false).md5?.field == "Content-MD5")
        #expect(AnswerDigests(Self.response(200, [("x-goog-hash", "crc32c=AAAAAA==, md5=\(md5Base64)")]), etagIsMD5: false)
            .md5?.bytes == md5)
        let etag = Self.response(200, [("ETag", "\"\(SHA256Digest.hex(md5))\"")])
        #expect(AnswerDigests(etag, etagIsMD5: false).isEmpty, "an ETag is opaque in HTTP")
        #expect(try await AnswerDigests(etag, etagIsMD5: true).agree(sha256: sha, fileMD5: reader)?.0 == true)
        #expect(AnswerDigests(Self.response(200, [("ETag", "\"5f3c-1234\"")]), etagIsMD5: true).isEmpty,
                "nginx's ETag is no MD5")
        #expect(try await AnswerDigests(Self.response(200), etagIsMD5: true).agree(sha256: sha, fileMD5: reader) == nil)
        #expect(AnswerDigests(Self.response(200, [("Repr-Digest", "sha-256=notbinary")]), etagIsMD5: false).isEmpty)
    }

    @Test("remote_url_from: RFC 6901 pointers, escapes, arrays; nothing found is nil")
    func jsonPointers() throws {
        let body = try JSONSerialization.jsonObject(with: Data(#"{"url": "https://cdn/x", "files": [{"a/b": {"~k": "deep"}}], "n": 3}"#.utf8))
        #expect(RemoteURLSource("json:/url")?.value(in: body) == "https://cdn/x")
        #expect(RemoteURLSource("json:/files/0/a~1b/~0k")?.value(in: body) == "deep")
        #expect(RemoteURLSource("json:/files/1/a")?.value(in: body) == nil)
        #expect(RemoteURLSource("json:/n")?.value(in: body) == nil, "a number is no URL")
        #expect(RemoteURLSource("json:/files/01/a~1b/~0k")?.value(in: body) == nil, "no leading zeros")
        for bad in ["url", "json:url", "json:", "json:/a~2b", "xml:/a"] {
            #expect(RemoteURLSource(bad) == nil, "\(bad)")
        }
        #expect(RemoteURLSource("json:/files/0/a~1b")?.description == "json:/files/0/a~1b")
        #expect(WholeFileSender.absoluteURL("/objects/7", base: "https://api.example.com/up") == "https://api.example.com/objects/7")
        #expect(WholeFileSender.absoluteURL("javascript:alert(1)", base: "https://api.example.com/up") == nil)
    }

    @Test("the connectivity check: 204 and nothing else is clear; a page, a redirect, a 511, a 200 with nothing are a portal")
    func connectivityVerdicts() {
        let url = "http://connectivitycheck.example/generate_204"
        #expect(ConnectivityCheck.verdict(for: Self.response(204), url: url) == .clear)
        guard case .portal(let page) = ConnectivityCheck.verdict(for: Self.response(200, [("Content-Type", "text/html")],
                                                                                     body: Self.page), url: url) else {
            Issue.record("a login page is a portal")
            return
        }
        #expect(page.contains("an HTML page") && page.contains("instead of 204"), "\(page)")
        #expect(ConnectivityCheck.verdict(for: Self.response(511), url: url) != .clear)
        #expect(ConnectivityCheck.verdict(for: Self.response(302, [("Location", "http://login.test/")]), url: url) != .clear)
        #expect(ConnectivityCheck.verdict(for: Self.response(200), url: url) != .clear, "a proxy's empty 200")
        #expect(ConnectivityCheck.verdict(for: Self.response(204, body: "x"), url: url) != .clear)
    }

    @Test("a portal classifies the link before anything metered, after a hand-set class; NetworkManager's connectivity reads")
    func portalLinks() {
        let classifier = LinkClassifier(meteredInterfaces: ["wwan*"], networkManager: nil)
        let portal = (reason: "the connectivity check was answered HTTP 200", source: LinkStatus.Source.connectivityCheck)
        let found = classifier.classify(interface: "wwan0", override: .auto, networkManager: nil, portal: portal)
        #expect(found.linkClass == .portal && found.source == .connectivityCheck && found.reason == portal.reason)
        #expect(classifier.classify(interface: "wlan0", override: .unmetered, networkManager: nil, portal: portal).linkClass
                == .unmetered, "a hand-set class wins")
        #expect(classifier.classify(interface: nil, override: .auto, networkManager: nil, portal: portal).linkClass == .offline)
        #expect(classifier.classify(interface: "wwan0", override: .auto, networkManager: nil).linkClass == .metered)
        #expect(NetworkManagerProbe.parseUnsigned("u 2").flatMap(NetworkManagerProbe.Connectivity.init) == .portal)
        #expect(NetworkManagerProbe.parseConnectivity("limited\n") == .limited)
        #expect(NetworkManagerProbe.parseConnectivity("full") == .full && NetworkManagerProbe.parseConnectivity("x") == nil)
        #expect(NetworkManagerProbe.Connectivity.portal.blocksTheInternet && NetworkManagerProbe.Connectivity.limited.blocksTheInternet)
        #expect(!NetworkManagerProbe.Connectivity.full.blocksTheInternet && !NetworkManagerProbe.Connectivity.none.blocksTheInternet)
        // Through a gateway or on the local network, as the kernel's table says.
        let table = RouteTable(ipv4: LinkClassifierTests.ipv4, ipv6: LinkClassifierTests.ipv6)
        #expect(table.isViaGateway(nil), "the default route has a gateway")
        #expect(table.isViaGateway([93, 184, 216, 34]))
        #expect(!table.isViaGateway([192, 168, 1, 20]), "the LAN is reached directly")
        #expect(!table.isViaGateway([127, 0, 0, 1]))
        #expect(LinkPolicy.waitingReason(for: QueueHoldsTests.job("tus", size: 1), destination: try! Destination.tus(
            name: "tus", endpoint: "https://u.example/files/"), link: found) == .portal)
    }

    @Test("config: verify per whole-file destination, remote_url_from, etag, connectivity_check; `config show` says them")
    func configuration() throws {
        func parse(_ text: String) throws(ConfigurationError) -> Configuration {
            try ConfigurationLoader.parse(text, file: "t.toml", baseDirectory: "/base")
        }
        let loaded = try parse("""
            [link]
            connectivity_check = "http://connectivitycheck.gstatic.com/generate_204"
            [destinations.put]
            protocol = "http-put"
            url = "https://dav.example.com/{name}"
            [destinations.quiet]
            protocol = "http-put"
            url = "https://dav.example.com/q/{name}"
            verify = "status"
            [destinations.form]
            protocol = "http-post"
            url = "https://api.example.com/upload"
            remote_url_from = "json:/data/url"
            [destinations.minted]
            protocol = "http-put"
            mint_url = "https://api.example.com/sign"
            [destinations.bucket]
            protocol = "s3"
            endpoint = "http://127.0.0.1:9000"
            bucket = "photos"
            etag = "opaque"
            """)
        #expect(loaded.link.connectivityCheck == "http://connectivitycheck.gstatic.com/generate_204")
        guard case .httpPut(let put) = loaded.destinations["put"]?.settings,
              case .httpPut(let quiet) = loaded.destinations["quiet"]?.settings,
              case .httpPost(let form) = loaded.destinations["form"]?.settings,
              case .httpPut(let minted) = loaded.destinations["minted"]?.settings,
              case .s3(let bucket) = loaded.destinations["bucket"]?.settings else {
            Issue.record("the destinations did not load as written")
            return
        }
        #expect(put.verify == .head && quiet.verify == .status && minted.verify == .response)
        #expect(form.verify == .response && form.remoteURLFrom?.tokens == ["data", "url"])
        #expect(bucket.etags == .opaque)
        let shown = EffectiveConfiguration(loaded).toml()
        for line in ["verify = \"head\"", "verify = \"status\"", "remote_url_from = \"json:/data/url\"", "etag = \"opaque\"",
                     "connectivity_check = \"http://connectivitycheck.gstatic.com/generate_204\""] {
            #expect(shown.contains(line), "\(line)")
        }
        for (text, key) in [
            ("[destinations.f]\nprotocol = \"http-post\"\nurl = \"https://a.example/u\"\nverify = \"head\"", "destinations.f.verify"),
            ("[destinations.f]\nprotocol = \"http-put\"\nurl = \"https://a.example/u\"\nverify = \"maybe\"", "destinations.f.verify"),
            ("[destinations.f]\nprotocol = \"http-post\"\nurl = \"https://a.example/u\"\nremote_url_from = \"url\"",
             "destinations.f.remote_url_from"),
            ("[destinations.f]\nprotocol = \"http-put\"\nmint_url = \"https://a.example/s\"\nverify = \"head\"", "destinations.f.verify"),
            ("[destinations.f]\nprotocol = \"s3\"\nendpoint = \"http://127.0.0.1:9000\"\nbucket = \"abc\"\netag = \"sha\"",
             "destinations.f.etag"),
            ("[destinations.f]\nprotocol = \"tus\"\nurl = \"https://a.example/files/\"\nverify = \"head\"", "destinations.f.verify"),
            ("[link]\nconnectivity_check = \"ftp://x\"", "link.connectivity_check"),
            ("[link]\nconnectivity_check = \"http://user:pw@x/\"", "link.connectivity_check"),
        ] {
            do {
                _ = try parse(text)
                Issue.record("accepted: \(text)")
            } catch {
                #expect(error.key == key, "\(text): \(error)")
            }
        }
    }
}
