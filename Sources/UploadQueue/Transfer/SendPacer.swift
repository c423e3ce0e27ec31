/// One paced upload's share of the send cap, as a token bucket on the engine thread: the upload reads its body only
/// as fast as the bucket refills, and pauses (`CURL_READFUNC_PAUSE`) when it finds it empty, until the engine loop
/// resumes it. Each upload has its own, so concurrent uploads get even shares whatever order libcurl runs them in.
///
/// Ours rather than libcurl's `CURLOPT_MAX_SEND_SPEED_LARGE`, whose limit is the average over a window of up to
/// three seconds: lowered mid-transfer (a timetable at 12:00, a second upload sharing the cap) it first pays back
/// what the window sent at the old rate, and the upload stands still for many seconds. The bucket holds a
/// tenth of a second of bytes, so a new rate holds from the next tenth of a second.
///
/// Engine thread only (no locks): the loop sets the rate and resumes, the read callback takes.
final class SendPacer: @unchecked Sendable {
    /// Bytes per second; 0 is no cap.
    private(set) var rate: Int64 = 0
    private var available: Double = 0
    private var last = ContinuousClock.now
    /// The least a read waits for (smaller reads would cost a callback for a handful of bytes).
    private static let minimumRead = 4096

    /// Sets the cap; what the bucket holds beyond the new burst is dropped.
    func setRate(_ bytesPerSecond: Int64, now: ContinuousClock.Instant = .now) {
        guard bytesPerSecond != rate else { return }
        refill(now: now)
        rate = max(0, bytesPerSecond)
        available = min(available, burst)
    }

    /// How many of `wanted` bytes may be read now (all of them without a cap); 0 means pause.
    func take(_ wanted: Int, now: ContinuousClock.Instant = .now) -> Int {
        guard rate > 0 else { return wanted }
        refill(now: now)
        let allowed = min(wanted, Int(available))
        guard allowed >= min(wanted, Self.minimumRead) else { return 0 }
        available -= Double(allowed)
        return allowed
    }

    /// How long until a read of the minimum size may go (zero without a cap, or when it may now).
    func wait(now: ContinuousClock.Instant = .now) -> Duration {
        guard rate > 0 else { return .zero }
        refill(now: now)
        let missing = Double(Self.minimumRead) - available
        guard missing > 0 else { return .zero }
        return .milliseconds(Int64((missing / Double(rate) * 1000).rounded(.up)))
    }

    /// A tenth of a second of bytes, and at least one minimum read.
    private var burst: Double { max(Double(rate) / 10, Double(Self.minimumRead)) }

    private func refill(now: ContinuousClock.Instant) {
        guard rate > 0 else {
            last = now
            return
        }
        available = min(burst, available + Double(rate) * (now - last).seconds)
        last = now
    }
}
