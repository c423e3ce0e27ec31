import Foundation
import Logging

/// `[link] connectivity_check`: a URL that answers `204` with an empty body (the `generate_204` convention of
/// Android and ChromeOS), asked now and then; what answers instead is a captive portal (or a proxy) in the way, and
/// the link monitor then classifies the traffic that takes the same way as `portal`.
///
/// | answer                                         | verdict                                                 |
/// |------------------------------------------------|---------------------------------------------------------|
/// | `204` with an empty body                       | clear                                                   |
/// | anything else (a `200` page, a redirect, `511`) | portal, in words of what answered                      |
/// | no answer (DNS, connect, a timeout)            | unknown: the last verdict stands (no route is `offline`) |
///
/// Asked every 30 s while clear and every 5 s while a portal is in the way (a person logging in should see the
/// uploads go within moments), and at once when the default route moves to another interface.
struct ConnectivityCheck: Sendable {
    enum Verdict: Sendable, Equatable {
        case clear
        /// What answered instead of the `204`.
        case portal(String)
        /// No answer: nothing can be said.
        case unknown
    }

    let url: String
    let engine: TransferEngine
    static let clearInterval = Duration.seconds(30)
    static let portalInterval = Duration.seconds(5)

    /// The verdict on `response`, the answer to a GET of `url`.
    static func verdict(for response: HTTPResponse, url: String) -> Verdict {
        if response.status == 204, response.body.isEmpty { return .clear }
        let shown = URLRedaction.redact(url)
        if let signal = PortalSignal.read(response, requestURL: url) {
            return .portal("the connectivity check \(shown) was answered \(signal.account) instead of 204")
        }
        return .portal("the connectivity check \(shown) was answered HTTP \(response.status)"
            + (response.body.isEmpty ? "" : " with a body") + " instead of an empty 204")
    }

    /// Asks once.
    func check(timeout: Duration = .seconds(10)) async -> Verdict {
        var options = TransferOptions(paced: false, trafficLabel: "[link]")
        options.connectTimeout = timeout
        options.stall = StallDetection(minimumRate: 1, window: timeout)
        options.maximumResponseBody = 64 << 10
        let request = HTTPRequest(method: "GET", url: url, headers: [HTTPHeader("Cache-Control", "no-cache")],
                                  body: .empty, options: options)
        guard let response = try? await engine.perform(request) else { return .unknown }
        return Self.verdict(for: response, url: url)
    }

    /// Asks now and then until cancelled, telling `monitor` (and `store`, for the CLI) what changed and waking the
    /// scheduler to act on it. A check that got no answer is asked again on the portal's interval.
    func run(monitor: LinkMonitor, store: QueueStore, wake: WakeSignal, logger: Logger, first: Verdict) async {
        var last = first
        var route = RouteTable.current().defaultInterface
        var nextAt = ContinuousClock.now + (first == .clear ? Self.clearInterval : Self.portalInterval)
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(1))
            let now = ContinuousClock.now
            let currentRoute = RouteTable.current().defaultInterface
            guard currentRoute != route || now >= nextAt, !Task.isCancelled else { continue }
            route = currentRoute
            let verdict = await check()
            nextAt = ContinuousClock.now + (verdict == .clear ? Self.clearInterval : Self.portalInterval)
            guard verdict != .unknown, verdict != last else { continue }
            last = verdict
            await Self.tell(verdict, monitor: monitor, store: store, logger: logger)
            wake.signal()
        }
    }

    /// The settings key under which the daemon keeps what the check found, for `uploadq link` and `status`.
    static let setting = "link.connectivity-check"

    /// Hands `verdict` to the monitor and the store, and says so (`quiet`: at the start, a clear link is no news).
    static func tell(_ verdict: Verdict, monitor: LinkMonitor, store: QueueStore, logger: Logger,
                     quiet: Bool = false) async {
        let portal: String?
        switch verdict {
        case .clear, .unknown:
            portal = nil
            if verdict == .clear, !quiet {
                logger.notice("the connectivity check answers 204 again: no captive portal in the way")
            }
        case .portal(let what):
            portal = what
            logger.warning("\(what): a captive portal is in the way; uploads wait until it is gone (log in on the network)")
        }
        monitor.setCheckedPortal(portal)
        _ = await BlockingWork.runResult { () throws(Never) in try? store.setSetting(setting, portal) }
    }
}
