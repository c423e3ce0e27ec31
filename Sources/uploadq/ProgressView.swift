import Foundation
import UploadQueue

/// Follows jobs until each is uploaded or failed for good, drawing progress bars on a terminal and plain lines
/// (one per state change) otherwise.
struct ProgressView {
    let queue: UploadQueue
    let ids: [JobID]

    /// Returns true when every job was uploaded. Looks again whenever the queue's database changes (a commit by
    /// the daemon), so the end of the last upload is seen at once; at least every two seconds all the same. Each
    /// look reads the unfinished jobs in one transaction, at most fifty times a second (ten on a terminal, where
    /// it redraws the bars).
    func follow() async throws -> Bool {
        // The same file named twice is one job: followed once.
        var seen = Set<JobID>()
        let ids = self.ids.filter { seen.insert($0).inserted }
        let changes = QueueChanges(databasePath: queue.configuration.databasePath)
        let terminal = isatty(STDERR_FILENO) == 1
        let spacing: Duration = terminal ? .milliseconds(100) : .milliseconds(20)
        var lastStates: [JobID: JobState] = [:]
        var finished: [JobID: Job] = [:]
        var allUploaded = true
        var drawnLines = 0
        while true {
            let unfinished = ids.filter { finished[$0] == nil }
            // A daemon killed meanwhile leaves its holds: they say nothing then.
            let found = try queue.store.jobs(unfinished, holdsInForce: await queue.runnerIsUp)
            var bars: [String] = []
            for id in ids {
                guard let job = finished[id] ?? found[id] else {
                    if finished[id] == nil { allUploaded = false }
                    continue
                }
                if job.state == .uploaded || (job.state == .failed && job.permanent), finished[id] == nil {
                    finished[id] = job
                    if job.state != .uploaded { allUploaded = false }
                }
                if terminal {
                    bars.append(bar(for: job))
                } else if lastStates[id] != job.state {
                    printError("\(job.id) \(job.state.rawValue) \(TextOutput.note(for: job))")
                }
                lastStates[id] = job.state
            }
            // A job that is gone (cancelled) is done too, and not uploaded.
            let gone = unfinished.filter { found[$0] == nil }
            if terminal {
                let up = drawnLines > 0 ? "\u{1B}[\(drawnLines)F" : ""
                FileHandle.standardError.write(Data((up + bars.map { "\u{1B}[2K\($0)\n" }.joined()).utf8))
                drawnLines = bars.count
            }
            if finished.count + gone.count == ids.count { return allUploaded && gone.isEmpty }
            let looked = ContinuousClock.now
            await changes.wait(timeout: .seconds(2))
            try Task.checkCancellation()
            if ContinuousClock.now - looked < spacing { try await Task.sleep(until: looked + spacing) }
        }
    }

    private func bar(for job: Job) -> String {
        TransferBar.line(name: SafeText.escaped(job.originalName), confirmed: job.bytesConfirmed, size: job.size,
                         rate: job.state == .uploading ? job.rateBytesPerSecond : 0, state: job.state.rawValue)
    }
}
