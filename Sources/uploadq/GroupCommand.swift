import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq group close NAME`: closes a group, whose completion goes out once every member is uploaded.
struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group", abstract: "Close a group of jobs (enqueue --group NAME).",
        subcommands: [Close.self])

    struct Close: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "close",
            abstract: "Close a group: no member joins it any more, and once every member is uploaded one completion "
                + "carries them all.",
            discussion: """
                The completion reaches `uploadq events` (group.uploaded, with the members' remote URLs), the \
                [hooks] on_group_uploaded program, the library's groupCompletions() and, with --patch-url, one \
                patch whose body may use {{group}}, {{urls}} (a JSON array) and {{members}}.
                """)

        @OptionGroup var options: GlobalOptions
        @Argument(help: "The group's name, as enqueue --group gave it.") var name: String
        @Option(help: "Once the group is uploaded, send its completion to this record URL.") var patchUrl: String?
        @Option(help: #"The patch body template (default: {"group": "{{group}}", "remote_urls": {{urls}}})."#)
        var patchBody: String?
        @Option(help: "The patch method (default: [patch] method, PATCH).") var patchMethod: String?

        func validate() throws {
            if patchUrl == nil, patchBody != nil || patchMethod != nil {
                throw ValidationError("--patch-body and --patch-method need --patch-url")
            }
        }

        func run() async throws {
            let patch = patchUrl.map { PatchTarget(url: $0, method: patchMethod, body: patchBody) }
            let client = try await options.daemonClient(saying: "closing the group in the queue's database directly")
            do {
                let group = if let client {
                    try await client.closeGroup(name, patch: patch)
                } else {
                    try await options.openQueue().closeGroup(name, patch: patch)
                }
                print(SafeText.escaped(group.state == .uploaded
                    ? "group \(name) closed and uploaded: \(group.completion.count) members"
                    : "group \(name) closed: \(group.remaining) of \(group.members) members still to upload"))
            } catch let error as UploadQueueError {
                printError("uploadq: \(error)")
                throw CLIExit.failure.code
            }
        }
    }
}

/// `uploadq groups [NAME]`: the groups and their state, or one group with its members.
struct GroupsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "groups", abstract: "List groups, newest first, or show one with its members' remote URLs.")

    @OptionGroup var options: GlobalOptions
    @Argument(help: "A group's name: show it with its members.") var name: String?
    @Option(help: "With NAME: the uid whose group it is (a dropper's; default: the queue's own user's).")
    var owner: UInt32?
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let queue = try options.openQueue()
        if let name {
            guard let group = try await queue.group(name, owner: owner) else {
                printError("uploadq: no group \"\(SafeText.escaped(name))\"; `uploadq groups` lists them")
                throw CLIExit.failure.code
            }
            if json { return try ContractJSON.print(ContractJSON.group(group)) }
            print(Self.line(group))
            for member in group.completion {
                print(SafeText.escaped("  \(member.jobID)  \(member.originalName)  \(URLRedaction.redact(member.remoteURL))"))
            }
            return
        }
        let groups = try await queue.groups()
        if json { return try ContractJSON.print(groups.map(ContractJSON.group)) }
        for group in groups { print(Self.line(group)) }
    }

    static func line(_ group: JobGroup) -> String {
        var text = "\(group.name)  \(group.ownerUID.map { "uid \($0)" } ?? "own")  \(group.state.rawValue)  \(group.members - group.remaining)/\(group.members) uploaded"
        if let failing = group.failingJob { text += "  \(group.failed) failed for good (job \(failing))" }
        if let completed = group.completedAt { text += "  completed \(TextOutput.time(completed))" }
        return SafeText.escaped(text)
    }
}

/// `uploadq lanes`: the lanes with work, each with its head and what blocks it.
struct LanesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lanes", abstract: "List the lanes that have work or are blocked, blocked ones first.")

    @OptionGroup var options: GlobalOptions
    @Flag(help: "Print one JSON array.") var json = false

    func run() async throws {
        let queue = try options.openQueue()
        let lanes = try await queue.lanes()
        if json { return try ContractJSON.print(lanes.map(ContractJSON.lane)) }
        for lane in lanes {
            var text = "\(lane.name)  \(lane.queued) queued"
            if let head = lane.head {
                text += "  head \(head) (\(lane.headState?.rawValue ?? "?"), at the front since \(TextOutput.time(lane.headSince)))"
            }
            if let holder = lane.blockedBy {
                text += "  blocked by \(holder): \(lane.reason ?? "failed")"
            } else if lane.headState == .pending, let head = lane.head, let job = try await queue.job(head),
                      let waiting = TextOutput.waiting(job, timeZone: queue.configuration.schedule.timeZone) {
                // A head held by a policy (a metered link, a window, the budget, the power) holds its lane.
                text += "  head waits: \(waiting)"
            }
            print(SafeText.escaped(text))
        }
    }
}
