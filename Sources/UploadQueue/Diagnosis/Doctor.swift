import Foundation

/// `uploadq doctor`: looks at everything uploads depend on and says what is wrong and how to fix it, changing
/// nothing: the state directory, the database (read only), the spool, the system's limits, the link, the power,
/// the upload windows, and every destination over the network (DNS, TCP, TLS, credentials, the clock).
package struct Doctor: Sendable {
    package let configuration: Configuration
    /// The longest a destination's check may wait to connect, or for an answer that stopped coming.
    package var networkTimeout: Duration = .seconds(10)

    package init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Every finding, local checks first, then the destinations in name order.
    package func examine(now: Date = Date()) async -> [DoctorFinding] {
        var findings = [DoctorFinding("config", .ok, "\(configuration.file ?? ConfigurationLoader.embeddedName) parses "
            + "(\(configuration.destinations.count) destination\(configuration.destinations.count == 1 ? "" : "s"))")]
        let local = LocalCheckup(configuration: configuration)
        findings += local.stateDirectory()
        let database = local.database()
        findings += database.findings
        findings += local.spool()
        findings += local.systemLimits()
        // busctl (NetworkManager, UPower) and DNS block: on a thread of their own.
        let override = database.linkOverride
        findings += await BlockingWork.runResult { () throws(Never) in local.link(override: override) + local.power() }.get()
        findings += local.windows(now: now)
        let checkup = DestinationCheckup(configuration: configuration, timeout: networkTimeout)
        if let url = configuration.link.connectivityCheck {
            findings.append(await Self.connectivity(ConnectivityCheck(url: url, engine: checkup.engine),
                                                    timeout: networkTimeout))
        }
        let names = configuration.destinations.keys.sorted()
        let results = await withTaskGroup(of: (String, [DoctorFinding]).self) { group in
            for name in names {
                guard let destination = configuration.destinations[name] else { continue }
                group.addTask { (name, await checkup.examine(destination)) }
            }
            var byName: [String: [DoctorFinding]] = [:]
            for await (name, found) in group { byName[name] = found }
            return byName
        }
        checkup.engine.shutdown()
        for name in names { findings += results[name] ?? [] }
        return findings
    }

    /// What `[link] connectivity_check` finds now: no portal, a portal (what answered, and what to do), or no
    /// answer.
    static func connectivity(_ check: ConnectivityCheck, timeout: Duration) async -> DoctorFinding {
        let shown = URLRedaction.redact(check.url)
        switch await check.check(timeout: timeout) {
        case .clear:
            return DoctorFinding("connectivity", .ok, "\(shown) answers 204: no captive portal in the way")
        case .portal(let what):
            return DoctorFinding("connectivity", .warning, what + ": a captive portal is in the way; uploads that take "
                + "its way wait (link portal), and nothing fails for it", fix: "log in on the network's portal (open any "
                + "web page), or wait")
        case .unknown:
            return DoctorFinding("connectivity", .warning, "\(shown) does not answer: the check cannot say whether a "
                + "captive portal is in the way", fix: "check [link] connectivity_check, or the network")
        }
    }

    /// The one finding for a config that does not load: the loader's file:line:key message, and where to look.
    package static func finding(for error: ConfigurationError) -> DoctorFinding {
        let place = error.file + (error.line.map { ":\($0)" } ?? "")
        return DoctorFinding("config", .failure, error.description,
                             fix: "edit \(place)\(error.key.map { " (key `\($0)`)" } ?? ""), then `uploadq config check`")
    }
}
