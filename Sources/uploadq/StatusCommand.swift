import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq status`: is a daemon running, the link, counts and bytes per state, active transfers, next retry.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Show the queue's summary, whether or not the daemon runs.")

    @OptionGroup var options: GlobalOptions
    @Flag(help: "Print one JSON document.") var json = false
    @Flag(help: "Print the metrics in Prometheus text format (what [metrics] textfile holds).") var prometheus = false

    func run() async throws {
        let queue = try options.openQueue()
        let status = try await queue.status()
        if prometheus {
            print(PrometheusText.render(status), terminator: "")
            return
        }
        if json {
            try ContractJSON.print(ContractJSON.status(status))
            return
        }
        let summary = status.summary
        var lines: [String] = []
        lines.append("daemon:   " + (status.runnerPID.map { "running (pid \($0))" } ?? "not running"))
        lines.append("link:     \(status.link.linkClass.rawValue) (\(status.link.source.rawValue)"
            + (status.link.interface.map { ", \($0)" } ?? "") + ")")
        let traffic = status.trafficByClass
        if !traffic.isEmpty {
            lines.append("sent:     " + traffic.sorted { $0.key < $1.key }
                .map { "\(TextOutput.bytes($0.value)) \($0.key)" }.joined(separator: ", "))
        }
        let counts = JobState.allCases.map { "\(summary.counts[$0] ?? 0) \($0.rawValue)" }.joined(separator: ", ")
        lines.append("jobs:     \(counts)" + (summary.permanentFailures > 0 ? " (\(summary.permanentFailures) need attention)" : ""))
        let bytes = JobState.allCases.map { "\(TextOutput.bytes(summary.bytes[$0] ?? 0)) \($0.rawValue)" }.joined(separator: ", ")
        lines.append("bytes:    \(bytes)")
        let patches = summary.patches
        if (patches[.pending] ?? 0) + (patches[.done] ?? 0) + (patches[.failed] ?? 0) > 0 {
            lines.append("patches:  \(patches[.pending] ?? 0) pending, \(patches[.done] ?? 0) done, "
                + "\(patches[.failed] ?? 0) failed")
        }
        for event in HookEvent.allCases {
            guard let counts = status.hooks[event] else { continue }
            lines.append("hooks:    \(event.key): \(counts[.pending] ?? 0) pending, \(counts[.done] ?? 0) done, "
                + "\(counts[.failed] ?? 0) failed")
        }
        if status.lanes.active > 0 {
            lines.append("lanes:    \(status.lanes.active) with work, \(status.lanes.blocked) blocked"
                + (status.lanes.blocked > 0 ? " (`uploadq lanes` says by what)" : "")
                + ", oldest head waiting \(Int(status.lanes.oldestHeadAge)) s")
        }
        if !summary.waiting.isEmpty {
            let waiting = summary.waiting.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value) \($0.key.rawValue)" }
            lines.append("waiting:  \(waiting.joined(separator: ", "))")
        }
        if !summary.fullDestinations.isEmpty {
            lines.append("full:     " + summary.fullDestinations.sorted().joined(separator: ", ")
                + " (HTTP 507: their jobs wait; one tries again now and then)")
        }
        for (name, answer) in summary.unverifiedAnswers.sorted(by: { $0.key < $1.key }) {
            lines.append("unproven: \(name): \(answer) (its jobs wait; one tries again now and then)")
        }
        for (name, limit) in status.requestLimits.sorted(by: { $0.key < $1.key }) {
            var learnt: [String] = []
            if let cap = limit.chunkCap { learnt.append("chunks of at most \(TextOutput.bytes(cap))") }
            if let refused = limit.refusedAt { learnt.append("refuses whole files of \(TextOutput.bytes(refused)) or more") }
            guard !learnt.isEmpty else { continue }
            lines.append("limits:   \(name): \(learnt.joined(separator: ", ")) (learnt from HTTP 413)")
        }
        if summary.owedReleases > 0 {
            lines.append("releases: \(summary.owedReleases) uploaded cop\(summary.owedReleases == 1 ? "y" : "ies") "
                + "to release" + (summary.releaseError.map { " (failing: \($0))" } ?? ""))
        }
        if let disk = status.disk {
            lines.append("disk:     \(TextOutput.bytes(disk.space.available)) free of \(TextOutput.bytes(disk.space.total)) "
                + "(min_free_space \(TextOutput.bytes(disk.minimum)))")
            if let low = disk.low {
                lines.append("intake:   paused: \(low); spool files wait and copies are refused until there is room "
                    + "(uploads and released copies free it)")
            }
        }
        if let power = status.power {
            let needs = Set(power.requirements.values.filter { $0 != "any" }).sorted().joined(separator: ", ")
            lines.append("power:    \(power.state.summary); required: \(needs)")
        }
        let zone = queue.configuration.schedule.timeZone
        for (name, window) in status.windows.sorted(by: { $0.key < $1.key }) {
            let until = window.until.map { " until " + WaitingHold.clock($0, timeZone: zone, now: Date()) } ?? ""
            lines.append("window:   \(name): \(window.open ? "open" : "closed")\(until) (\(window.windows.joined(separator: ", ")))")
        }
        if let budget = status.meteredBudget {
            lines.append("budget:   \(TextOutput.bytes(budget.used)) of \(budget.budget) used on metered links, "
                + "\(TextOutput.bytes(budget.left)) left; resets \(WaitingHold.clock(budget.resetsAt, timeZone: zone, now: Date()))")
        }
        if status.spoolHeldFiles > 0 {
            lines.append("spool:    \(status.spoolHeldFiles) file\(status.spoolHeldFiles == 1 ? "" : "s") left in the "
                + "spool for a reason of their owner's (GET /v1/spool lists them):")
            for hold in status.spoolHolds {
                lines.append("          \(hold.reason.rawValue) (uid \(hold.ownerUID)): \(hold.message)")
            }
        }
        if summary.nextAttemptAt != nil {
            lines.append("next try: \(TextOutput.time(summary.nextAttemptAt))")
        }
        for transfer in summary.active {
            let percent = transfer.size > 0 ? Int(Double(transfer.bytesConfirmed) / Double(transfer.size) * 100) : 100
            lines.append("active:   \(transfer.id) \(transfer.originalName) → \(transfer.destination) "
                + "\(TextOutput.bytes(transfer.bytesConfirmed))/\(TextOutput.bytes(transfer.size)) (\(percent)%) "
                + "\(TextOutput.bytes(transfer.rateBytesPerSecond))/s")
        }
        // Names and the release error come from outside: control characters escaped.
        print(lines.map(SafeText.escaped).joined(separator: "\n"))
    }
}
