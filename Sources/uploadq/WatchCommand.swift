import ArgumentParser
import Foundation
import UploadQueue

/// `uploadq watch`: a live view of the queue, redrawn about once a second: counts per state, link, next retry,
/// and a progress bar with rate and time left for every active transfer. Plain lines when stdout is not a
/// terminal.
struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch", abstract: "Watch the queue live: progress, rate and ETA per transfer, counts, link.")

    @OptionGroup var options: GlobalOptions
    @Option(help: "Seconds between two redraws.") var interval: Double = 1
    @Option(help: "Stop after this many redraws (0: until Ctrl-C).") var count: Int = 0
    @Flag(help: "Stop once nothing is pending or uploading.") var untilIdle = false

    func validate() throws {
        if interval < 0.05 { throw ValidationError("--interval must be at least 0.05") }
        if count < 0 { throw ValidationError("--count must be 0 or more") }
    }

    func run() async throws {
        let queue = try options.openQueue()
        let terminal = isatty(STDOUT_FILENO) == 1
        let interrupted = InterruptFlag()
        if terminal { FileHandle.standardOutput.write(Data("\u{1B}[?25l".utf8)) }  // hide the cursor while drawing
        defer { if terminal { FileHandle.standardOutput.write(Data("\u{1B}[?25h".utf8)) } }
        var drawn = 0
        var lastPlain = ""
        var rounds = 0
        while !interrupted.isSet {
            let status = try await queue.status()
            var lines = Self.lines(status).map(SafeText.escaped)
            if terminal {
                // A wrapped line would throw the in-place redraw off: lines are cut to the terminal's width.
                var size = winsize()
                if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 10 {
                    lines = lines.map { String($0.prefix(Int(size.ws_col) - 1)) }
                }
            }
            if terminal {
                // Back to the first line drawn last time, then each line cleared and rewritten.
                let up = drawn > 0 ? "\u{1B}[\(drawn)F" : ""
                let clearRest = drawn > lines.count ? "\u{1B}[J" : ""
                FileHandle.standardOutput.write(Data((up + lines.map { "\u{1B}[2K\($0)\n" }.joined() + clearRest).utf8))
                drawn = lines.count
            } else {
                let text = lines.joined(separator: "\n")
                if text != lastPlain {
                    FileHandle.standardOutput.write(Data("--- \(TextOutput.time(Date()))\n\(text)\n".utf8))
                    lastPlain = text
                }
            }
            rounds += 1
            let counts = status.summary.counts
            if count > 0, rounds >= count { break }
            if untilIdle, (counts[.pending] ?? 0) + (counts[.uploading] ?? 0) == 0 { break }
            try await interrupted.sleep(seconds: interval)
        }
    }

    /// The view as lines.
    static func lines(_ status: QueueStatus) -> [String] {
        let summary = status.summary
        var lines: [String] = []
        let daemon = status.runnerPID.map { "daemon pid \($0)" } ?? "no daemon"
        lines.append("uploadq · \(daemon) · link \(status.link.linkClass.rawValue) (\(status.link.source.rawValue)"
            + (status.link.interface.map { ", \($0)" } ?? "") + ")")
        let counts = JobState.allCases.map { "\(summary.counts[$0] ?? 0) \($0.rawValue)" }.joined(separator: " · ")
        lines.append("jobs    \(counts)" + (summary.permanentFailures > 0 ? " (\(summary.permanentFailures) need attention)" : ""))
        if !summary.waiting.isEmpty {
            lines.append("waiting " + summary.waiting.sorted { $0.key.rawValue < $1.key.rawValue }
                .map { "\($0.value) \($0.key.rawValue)" }.joined(separator: " · "))
        }
        if let next = summary.nextAttemptAt { lines.append("next retry \(TextOutput.time(next))") }
        let rate = summary.active.reduce(0) { $0 + $1.rateBytesPerSecond }
        lines.append("active  \(summary.active.count) transfer(s), \(TextOutput.bytes(rate))/s")
        for transfer in summary.active {
            lines.append("  " + TransferBar.line(name: transfer.originalName, confirmed: transfer.bytesConfirmed,
                                                 size: transfer.size, rate: transfer.rateBytesPerSecond))
        }
        return lines
    }
}

/// Ctrl-C (and SIGTERM) end the view at the next redraw instead of killing it mid-line.
final class InterruptFlag: @unchecked Sendable {
    private let sources: [DispatchSourceSignal]
    private let lock = NSLock()
    private var set = false

    init() {
        var sources: [DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            sources.append(source)
        }
        self.sources = sources
        for source in sources {
            source.setEventHandler { [weak self] in
                guard let self else { return }
                self.lock.lock()
                self.set = true
                self.lock.unlock()
            }
            source.resume()
        }
    }

    var isSet: Bool {
        lock.lock()
        defer { lock.unlock() }
        return set
    }

    /// Sleeps up to `seconds`, returning early once interrupted.
    func sleep(seconds: Double) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while !isSet, Date() < deadline {
            try await Task.sleep(for: .milliseconds(Int64(min(50, max(1, deadline.timeIntervalSinceNow * 1000)))))
        }
    }
}
