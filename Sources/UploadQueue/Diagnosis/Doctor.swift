import Foundation

/// `uploadq doctor`: looks at everything uploads depend on and says what is wrong and how to fix it, changing
/// nothing: the state directory, the database (read only), the spool, the system's limits, the link, the power,
/// the upload windows, and every destination over the network (DNS, TCP, TLS, credentials, the clock).
public struct Doctor: Sendable {
    public let configuration: Configuration
    /// The longest a destination's check may wait to connect, or for an answer that stopped coming.
    public var networkTimeout: Duration = .seconds(10)

    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Every finding, local checks first, then the destinations in name order.
    public func examine(now: Date = Date()) async -> [DoctorFinding] {
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

    /// The one finding for a config that does not load: the loader's file:line:key message, and where to look.
    public static func finding(for error: ConfigurationError) -> DoctorFinding {
        let place = error.file + (error.line.map { ":\($0)" } ?? "")
        return DoctorFinding("config", .failure, error.description,
                             fix: "edit \(place)\(error.key.map { " (key `\($0)`)" } ?? ""), then `uploadq config check`")
    }
}
