import Foundation

/// The progress lines one follower of the event stream holds back until the durable log shows where they belong:
/// after their job's `started`, before its end.
///
/// A progress line is published as bytes move; its job's `started` reaches the log when the transaction that
/// records it commits, which for a slot handed on at once (`Scheduler.handOn`) is the next one, up to tens of
/// milliseconds later, and a read of the log that began before a commit does not see it. A line of a job the
/// log has not shown starting waits: it goes with the batch that logs the job's start or end, merged into place by
/// time, or once it has waited `limit` (a job that was running before the follower came, or whose start the log
/// took long to record). A line published before its job's end went out, but taken after (a follower catching up
/// takes no live lines until it reaches the end of the log), is dropped: progress is the lossy part of the stream,
/// its order is not. The decisions are pure: the stream's loop feeds each batch in.
struct LiveLineHold {
    /// The longest a progress line waits for its job's start to reach the log.
    static let limit: Duration = .seconds(1)
    /// The most jobs whose place (started or not) is kept; past it they are forgotten, and a running one's next
    /// line waits for `limit` once.
    static let jobsKept = 10_000

    /// Lines held back, in the order they were published.
    private(set) var waiting: [LiveEvents.Line] = []
    /// Jobs the log showed: true from their `started` to their end, false while they wait to start.
    private var running: [JobID: Bool] = [:]
    /// The jobs whose end went out while catching up, and when the read that found it ended: a line of theirs
    /// published before then comes after its end, and is dropped (one published after is a retry's). Kept from
    /// the first batch that takes no live lines to the first that does, which takes every line published meanwhile.
    private var ended: [JobID: ContinuousClock.Instant] = [:]
    /// The most bytes held back: past it every held line goes (out of place rather than lost or piling up).
    let buffer: Int
    /// When the follower subscribed to the live lines: an end logged before it has none of its job's lines after
    /// it (a catch-up from an old `since` does not keep them).
    let subscribed: Date

    init(buffer: Int, subscribed: Date) {
        self.buffer = buffer
        self.subscribed = subscribed
    }

    /// The live lines due with a batch of the log, in the order they were published: those held back before and
    /// `taken` since. `logged` is the batch (in order); `readBegan` and `readEnded`, when its read began and ended;
    /// `complete`, whether it reached the end of the log (a full batch while catching up did not, and took no live
    /// lines: a job's start may lie past it).
    mutating func release(logged: [FeedEvent], taken: [LiveEvents.Line], readBegan: ContinuousClock.Instant,
                          readEnded: ContinuousClock.Instant, complete: Bool) -> [FeedEvent] {
        var placed = Set<JobID>()
        for event in logged {
            guard let job = event.job else { continue }
            switch event.kind {
            case .started, .uploaded, .failed, .cancelled: placed.insert(job)
            default: break
            }
        }
        enum Decision { case send, hold, drop }
        let lines = waiting + taken
        var decisions: [Decision] = []
        decisions.reserveCapacity(lines.count)
        var heldBytes = 0
        for line in lines {
            guard line.event.kind == .progress, let job = line.event.job else {
                decisions.append(.send)
                continue
            }
            if let end = ended[job], line.published < end {
                decisions.append(.drop)
            } else if placed.contains(job) || running[job] == true {
                decisions.append(.send)
            } else if complete, line.published + Self.limit <= readBegan {
                // Running since before the follower came (its lines go from now on), or its start took that long
                // to record.
                if running[job] == nil { running[job] = true }
                decisions.append(.send)
            } else {
                decisions.append(.hold)
                heldBytes += line.size
            }
        }
        // Held lines past the buffer all go, in order.
        let overflowing = heldBytes > buffer
        waiting = []
        var due: [FeedEvent] = []
        for (line, decision) in zip(lines, decisions) {
            switch decision {
            case .send: due.append(line.event)
            case .hold where overflowing: due.append(line.event)
            case .hold: waiting.append(line)
            case .drop: break
            }
        }
        if running.count > Self.jobsKept { running.removeAll() }
        // A batch that took the live lines took every line published before its read: none comes after an end
        // it or an earlier batch sent.
        if complete { ended.removeAll() }
        let recent = subscribed.addingTimeInterval(-5)
        for event in logged {
            guard let job = event.job else { continue }
            switch event.kind {
            case .enqueued: running[job] = false
            case .started: running[job] = true
            case .uploaded, .failed, .cancelled:
                running[job] = nil
                if !complete, event.time >= recent { ended[job] = readEnded }
            default: break
            }
        }
        return due
    }
}
