import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq events`: what the queue does, one line per event, replayed from the database and followed live from
/// the daemon's event stream (its control API's `GET /v1/events/stream`).
struct EventsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "Print job events: replayed from the queue (--since, --lines), and followed live (--follow).",
        discussion: """
            Events: enqueued, started, progress (at most once a second per job), uploaded (with remote_url), \
            failed (with the error, and whether it is retried), cancelled, patch and hook outcomes, link \
            changes, lane.blocked and lane.unblocked, group.uploaded (with the members' remote URLs) and \
            group.incomplete (those four in the daemon's log: --follow --from-seq 0). --follow reads them from the running daemon's control API ([api] socket), as they happen; \
            with --from-seq, from the event after that sequence number on (each logged event's `seq`), so a \
            script resumes where it stopped. A reader that falls too far behind gets a last `dropped` line (exit \
            1). Without --follow, the events of the last --lines jobs (or of the jobs after --since) are replayed \
            from the database.
            """)

    @OptionGroup var options: GlobalOptions
    @Flag(name: .shortAndLong, help: "Keep printing events as the daemon reports them.") var follow = false
    @Flag(help: "Print each event as one JSON object per line.") var json = false
    @Option(help: "Replay the events of the jobs enqueued after this job id first.") var since: String?
    @Option(help: "Without --since: replay the events of this many newest jobs (default 10; 0 with --follow).")
    var lines: Int?
    @Option(name: .customLong("from-seq"),
            help: "With --follow: the logged events after this sequence number first (0: every one kept), then live.")
    var fromSeq: Int64?

    func run() async throws {
        let configuration = try options.loadConfiguration()
        let after = try since.map(parseJobID)
        if let lines, lines < 0 { throw ValidationError("--lines must be 0 or more") }
        if let fromSeq {
            guard follow else { throw ValidationError("--from-seq goes with --follow") }
            guard fromSeq >= 0 else { throw ValidationError("--from-seq must be 0 or more") }
            guard after == nil && lines == nil else {
                throw ValidationError("--from-seq replays the daemon's log: it goes without --since and --lines")
            }
        }
        let newest = after == nil ? (lines ?? (follow ? 0 : 10)) : nil
        // The replay from the database first; then the stream, from the log's sequence number read before the
        // replay, so nothing that happens meanwhile is missed.
        var startSeq = fromSeq
        if newest != 0 || after != nil {
            let queue = try options.openQueue()
            if follow && startSeq == nil { startSeq = try queue.store.eventLogBounds().last }
            try queue.store.replayEvents(after: after, newest: newest) { event in try emit(event.jsonLine) }
        }
        guard follow else { return }
        // An event of the moments the replay took may come twice (in it, and in the stream), never not at all.
        let client = UploadQueueClient(configuration: configuration)
        var dropped = false
        var attached = false
        do {
            try await client.followEventLines(since: startSeq, live: true) { line in
                attached = true
                guard let object = Self.object(line) else { return }
                let kind = object["type"] as? String ?? ""
                if kind == "following" && !json { return }
                // A gap in the log (pruned before it was read) is said, and the stream goes on; a reader the
                // daemon gave up ends with its last line.
                if kind == "dropped" && object["seq"] == nil { dropped = true }
                try emit(line)
            }
        } catch let error as UploadQueueError where error.code == .daemonUnreachable && !attached {
            printError("uploadq: no daemon to follow (\(configuration.apiSocketPath)): \(error.message)")
            throw CLIExit.noDaemon.code
        } catch let error as UploadQueueError where error.code == .daemonUnreachable {
            // It stopped (or went away) under the stream: said below.
        }
        if dropped {
            printError("uploadq: the daemon dropped this reader: it fell too far behind (follow again with --from-seq)")
            throw CLIExit.failure.code
        }
        printError("uploadq: the daemon stopped")
        throw CLIExit.noDaemon.code
    }

    /// Prints one event: its JSON line as it is, or a line for people.
    private func emit(_ line: String) throws {
        let text: String
        if json {
            text = line
        } else if let object = Self.object(line) {
            text = SafeText.escaped(Self.text(object))
        } else {
            return
        }
        // Written at once (no stdio buffer), so a pipe's reader sees each event as it happens; a reader that went
        // away (`| head`) ends the command quietly.
        var bytes = Array((text + "\n").utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw ExitCode.success }
            bytes = bytes.dropFirst(written)
        }
    }

    private static func object(_ line: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }

    /// `11:02:03  uploaded   01a20d35-…  default → https://…`.
    static func text(_ object: [String: Any]) -> String {
        let time = (object["time"] as? String).map { String($0.dropFirst(11).prefix(8)) } ?? "--:--:--"
        let kind = object["type"] as? String ?? "?"
        let job = object["job"] as? String ?? ""
        var detail: String
        switch kind {
        case "enqueued":
            detail = "\(object["name"] ?? "") → \(object["destination"] ?? "") (\(TextOutput.bytes(object["size"] as? Int64 ?? Int64(object["size"] as? Int ?? 0))))"
        case "started":
            detail = "attempt \(object["attempt"] ?? "") to \(object["destination"] ?? "") from byte \(object["offset"] ?? 0)"
        case "progress":
            detail = "\(object["confirmed"] ?? 0) of \(object["size"] ?? 0) bytes confirmed"
        case "uploaded":
            detail = "\(object["destination"] ?? "") → \(object["remote_url"] as? String ?? "-")"
        case "failed":
            detail = (object["permanent"] as? Bool == true ? "for good: " : "will retry: ") + "\(object["error"] as? String ?? "")"
        case "unverified":
            detail = "not proven, waits: \(object["reason"] as? String ?? "")"
        case "patch", "hook":
            detail = "\(object["hook"] as? String ?? "patch") \(object["state"] ?? "")"
                + ((object["error"] as? String).map { ": \($0)" } ?? "")
        case "link":
            detail = "\(object["destination"] ?? ""): \(object["class"] ?? "") (\(object["source"] ?? ""))"
        case "dropped":
            detail = "\(object["reason"] ?? "") (\(object["lost"] ?? 0) lines lost)"
        default:
            detail = ""
        }
        return "\(time)  \(kind.padding(toLength: 9, withPad: " ", startingAt: 0))  \(job.isEmpty ? "-" : job)  \(detail)"
    }
}
