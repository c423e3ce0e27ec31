import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq doctor`: says what stands between the queue and its uploads, and the command or config line that
/// fixes each thing; changes nothing.
struct DoctorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check the config, the state directory, the database, the spool, limits, the link, the power, "
            + "windows and every destination; exit 0 when all is well, 1 otherwise.",
        discussion: """
            Each finding says what was seen and, when something is wrong, the command or config line that fixes \
            it. Nothing is changed: the database is opened read-only, and destinations get one harmless request \
            each (OPTIONS, HEAD, HeadBucket) with their own credentials. Warnings (a spool only its owner can \
            write to, a network file system) do not change the exit code; failures do.
            """)

    @OptionGroup var options: GlobalOptions
    @Flag(help: "Print one JSON document.") var json = false

    func run() async throws {
        let path = ConfigurationLoader.locate(explicit: options.config)
        var findings: [DoctorFinding]
        let shownPath: String
        do {
            let configuration = try ConfigurationLoader.load(path: path)
            shownPath = configuration.file ?? ConfigurationLoader.embeddedName
            findings = await Doctor(configuration: configuration).examine()
        } catch {
            shownPath = path ?? ConfigurationLoader.embeddedName
            findings = [Doctor.finding(for: error)]
        }
        let healthy = !findings.contains { $0.severity == .failure }
        if json {
            try ContractJSON.print([
                "config": shownPath,
                "healthy": healthy,
                "findings": findings.map { finding -> [String: Any] in
                    var object: [String: Any] = ["check": finding.check, "severity": finding.severity.rawValue,
                                                 "message": finding.message]
                    if let fix = finding.fix { object["fix"] = fix }
                    return object
                },
            ])
        } else {
            var lines = ["uploadq doctor: \(shownPath)"]
            let width = max(12, findings.map(\.check.count).max() ?? 0)
            for finding in findings {
                let label = ["ok": "ok", "info": "info", "warning": "WARN", "failure": "FAIL"][finding.severity.rawValue] ?? ""
                lines.append(label.padding(toLength: 6, withPad: " ", startingAt: 0)
                    + finding.check.padding(toLength: width + 2, withPad: " ", startingAt: 0) + finding.message)
                if let fix = finding.fix, finding.severity != .ok {
                    lines.append(String(repeating: " ", count: width + 8) + "fix: " + fix)
                }
            }
            let failures = findings.filter { $0.severity == .failure }.count
            let warnings = findings.filter { $0.severity == .warning }.count
            lines.append(healthy ? "all well" + (warnings > 0 ? " (\(warnings) warning\(warnings == 1 ? "" : "s"))" : "")
                                 : "\(failures) problem\(failures == 1 ? "" : "s") to fix")
            print(lines.map { SafeText.escaped($0) }.joined(separator: "\n"))
        }
        if !healthy { throw CLIExit.failure.code }
    }
}
