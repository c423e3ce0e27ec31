import Foundation
import UploadQueue

/// Follows jobs until each is uploaded or failed for good, drawing progress bars on a terminal and plain lines
/// (one per state change) otherwise.
struct ProgressView {
    let queue: UploadQueue
    let ids: [JobID]

    /// Returns true when every job was uploaded.
    func follow() async throws -> Bool {
        let terminal = isatty(STDERR_FILENO) == 1
        var lastStates: [JobID: JobState] = [:]
        var drawnLines = 0
        while true {
            var done = 0
            var allUploaded = true
            var bars: [String] = []
            for id in ids {
                guard let job = try await queue.job(id) else {
                    done += 1
                    allUploaded = false
                    continue
                }
                let finished = job.state == .uploaded || (job.state == .failed && job.permanent)
                if finished { done += 1 }
                if job.state != .uploaded { allUploaded = false }
                if terminal {
                    bars.append(bar(for: job))
                } else if lastStates[id] != job.state {
                    printError("\(job.id) \(job.state.rawValue) \(TextOutput.note(for: job))")
                }
                lastStates[id] = job.state
            }
            if terminal {
                let up = drawnLines > 0 ? "\u{1B}[\(drawnLines)F" : ""
                FileHandle.standardError.write(Data((up + bars.map { "\u{1B}[2K\($0)\n" }.joined()).utf8))
                drawnLines = bars.count
            }
            if done == ids.count { return allUploaded }
            try await Task.sleep(for: .milliseconds(500))
        }
    }

    private func bar(for job: Job) -> String {
        TransferBar.line(name: job.originalName, confirmed: job.bytesConfirmed, size: job.size,
                         rate: job.state == .uploading ? job.rateBytesPerSecond : 0, state: job.state.rawValue)
    }
}
