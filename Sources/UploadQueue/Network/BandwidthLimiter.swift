/// A token bucket shared by all transfers of one link class, so a cap holds across concurrent uploads.
///
/// Transfers ask before they send a slice; the bucket holds at most a quarter second of bytes, so bursts stay
/// short and the average rate holds to within a slice.
package actor BandwidthLimiter {
    private var bytesPerSecond: Int64
    private var available: Double
    private var last: ContinuousClock.Instant

    /// A limiter for `bytesPerSecond` (0 = unlimited).
    package init(bytesPerSecond: Int64) {
        self.bytesPerSecond = bytesPerSecond
        self.available = 0
        self.last = .now
    }

    /// The current cap (0 = unlimited).
    package var rate: Int64 { bytesPerSecond }

    /// Changes the cap, for example when the link class changes.
    package func setRate(_ bytesPerSecond: Int64) {
        self.bytesPerSecond = bytesPerSecond
        available = min(available, Double(bytesPerSecond) / 4)
    }

    /// Reserves `bytes` and returns how long the caller must wait before sending them.
    func reserve(_ bytes: Int) -> Duration {
        guard bytesPerSecond > 0 else { return .zero }
        let now = ContinuousClock.now
        let rate = Double(bytesPerSecond)
        available = min(rate / 4, available + rate * (now - last).seconds)
        last = now
        available -= Double(bytes)
        return available >= 0 ? .zero : .milliseconds(Int64((-available / rate * 1000).rounded(.up)))
    }

    /// Waits until `bytes` may be sent; throws `CancellationError` if the task is cancelled meanwhile.
    package nonisolated func acquire(_ bytes: Int) async throws {
        let wait = await reserve(bytes)
        if wait > .zero { try await Task.sleep(for: wait) }
    }
}
