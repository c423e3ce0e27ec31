import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq enqueue PATH...`: accepts files durably and prints their job ids.
struct EnqueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enqueue",
        abstract: "Accept files into the queue; prints one job id per line.",
        discussion: """
            A file whose content already goes to the same destination returns the existing job's id. Exits 5 when \
            the queue's disk is below [limits] min_free_space (copies and moves across disks are refused; \
            reference jobs are still taken).
            """)

    @OptionGroup var options: GlobalOptions
    @Argument(help: "Files to upload.") var paths: [String] = []
    @Option(help: "Also read the files to upload from this file, one per line ('-': standard input); for many files.")
    var filesFrom: String?
    @Flag(name: [.customShort("0"), .customLong("null")], help: "With --files-from: names end with NUL, not newline.")
    var null = false
    @Option(help: "Destination name (default: the spool's destination, else 'default').") var destination: String?
    @Option(name: .customLong("meta"), help: "Metadata KEY=VALUE (repeatable).") var metaPairs: [String] = []
    @Option(help: "Higher runs sooner.") var priority: Int = 0
    @Option(help: "copy (default), move (the queue takes the file over) or reference (upload in place).")
    var mode: String = "copy"
    @Option(help: "On a metered link: defer, allow, allow-below:SIZE or always (also past the metered budget).")
    var onMetered: String?
    @Option(name: .customLong("then"),
            help: "With --mode reference: once uploaded, keep, delete or move:DIR the file (if it is unchanged).")
    var then: String?
    @Option(help: "Once uploaded, patch the remote URL into this record URL (see [patch] in the config).")
    var patchUrl: String?
    @Option(help: "The patch body template, e.g. '{\"photo_url\": \"{{url}}\"}' (default: [patch] body).")
    var patchBody: String?
    @Option(help: "The patch method (default: [patch] method, PATCH).") var patchMethod: String?
    @Option(help: "Put the files in this lane: they go one at a time, after the lane's earlier jobs, in this order.")
    var lane: String?
    @Option(help: "Make the files members of this group: `uploadq group close NAME` later, and once every member is uploaded one completion carries them all.")
    var group: String?
    @Option(help: "Start only once this job is uploaded (an id; repeatable). One that fails for good or is cancelled fails these files as prerequisite-failed or prerequisite-cancelled.")
    var after: [String] = []
    @Flag(help: "With --after: start once those jobs are uploaded, failed for good or cancelled, whatever they came to.")
    var afterSettled = false
    @Flag(help: "Show progress and return when the files are uploaded or failed for good.") var wait = false
    @Flag(help: "Print one JSON array.") var json = false

    /// The names in a `--files-from` list, newline- or NUL-separated; empty lines are skipped.
    private func readList(_ source: String) throws -> [String] {
        let data: Data
        if source == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            guard let read = FileManager.default.contents(atPath: source) else {
                throw ValidationError("cannot read --files-from \(source)")
            }
            data = read
        }
        let separator = UInt8(null ? 0 : 10)
        return data.split(separator: separator).map { String(decoding: $0, as: UTF8.self) }.filter { !$0.isEmpty }
    }

    func validate() throws {
        if paths.isEmpty && filesFrom == nil { throw ValidationError("give at least one file (or --files-from)") }
        if null && filesFrom == nil { throw ValidationError("--null goes with --files-from") }
        if afterSettled && after.isEmpty { throw ValidationError("--after-settled goes with --after") }
        if IntakeMode(rawValue: mode) == nil { throw ValidationError("--mode must be copy, move or reference") }
        if let then {
            guard SourceAfterUpload(then, base: "/") != nil else {
                throw ValidationError("--then must be keep, delete or move:DIR")
            }
            guard mode == IntakeMode.reference.rawValue else {
                throw ValidationError("--then goes with --mode reference (a copy leaves your file alone)")
            }
        }
        if patchUrl == nil, patchBody != nil || patchMethod != nil {
            throw ValidationError("--patch-body and --patch-method need --patch-url")
        }
        for pair in metaPairs where !pair.contains("=") || pair.hasPrefix("=") {
            throw ValidationError("--meta takes KEY=VALUE, got '\(pair)'")
        }
    }

    func run() async throws {
        // The queue's own user reads its files in this process, as it sees them (the daemon's sandbox may not see
        // a home or /tmp path), and a running daemon is woken; anyone else (root, a member of `[api] group`) hands
        // them over through the daemon, which reads them as the daemon's rules say.
        _ = try options.loadConfiguration()
        var queue = try? options.openQueue(quietly: true)
        var client: UploadQueueClient?
        if queue == nil {
            client = try await options.daemonClient()
            // No daemon either: the reason the queue could not be opened, and the exit it calls for.
            if client == nil { queue = try options.openQueue() }
        }
        if wait, let queue, try await queue.status().runnerPID == nil {
            printError("uploadq: --wait needs a running daemon for \(queue.configuration.stateDirectory); start `uploadq daemon` first")
            throw CLIExit.noDaemon.code
        }
        if wait, queue == nil {
            printError("uploadq: --wait follows the upload in the queue's database, which only its own user may open; "
                + "without --wait the files are handed over, and `GET /v1/jobs/ID/wait` on the control API follows one")
            throw CLIExit.usage.code
        }
        var meta: [String: String] = [:]
        for pair in metaPairs {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            meta[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
        }
        var results: [(String, EnqueueResult)] = []
        var failed = false
        // Exit 5 when every refusal was for lack of room (try again later), 1 when anything else failed.
        var onlyDiskLow = true
        var waitFailed = false
        let patch = patchUrl.map { PatchTarget(url: $0, method: patchMethod, body: patchBody) }
        let paths = self.paths + (try filesFrom.map(readList) ?? [])
        let requests = paths.map { path in
            EnqueueRequest(path: path, destination: destination, meta: meta, patch: patch, priority: priority,
                           mode: IntakeMode(rawValue: mode) ?? .copy, onMetered: onMetered,
                           sourceAfterUpload: then.flatMap {
                               SourceAfterUpload($0, base: FileManager.default.currentDirectoryPath)
                           }, lane: lane, after: after, afterMode: afterSettled ? .settled : nil,
                           group: group)
        }
        // One batch: copies made durable with one flush and rows committed together, each file still on its own.
        var lines = ""
        let outcomes = if let client { await client.enqueue(batch: requests) } else { await queue!.enqueue(batch: requests) }
        for (path, outcome) in zip(paths, outcomes) {
            switch outcome {
            case .success(let result):
                results.append((path, result))
                if !json { lines += result.id.rawValue + "\n" }
            case .failure(let error):
                printError("uploadq: \(path): \(error)")
                failed = true
                if error.code != .diskLow { onlyDiskLow = false }
            }
        }
        if !lines.isEmpty { FileHandle.standardOutput.write(Data(lines.utf8)) }
        if json {
            try ContractJSON.print(results.map { path, result -> [String: Any] in
                ["id": result.id.rawValue, "path": path, "deduplicated": result.deduplicated]
            })
        }
        if wait {
            let finishedWell = try await ProgressView(queue: queue!, ids: results.map(\.1.id)).follow()
            if !finishedWell {
                failed = true
                waitFailed = true
            }
        }
        if failed { throw (onlyDiskLow && !waitFailed ? CLIExit.diskLow : CLIExit.failure).code }
    }
}
