/// The slowest a request may go before it gives its transfer slot back: while its body is sent, an average of at
/// least `minimumRate` bytes a second over every `window` (counting what is sent and what comes back), shared by
/// the requests in flight together; and a deadline: ten minutes plus its body's size at that rate, then ten
/// minutes more for the answer once the body is sent. Once the body is sent, only the answer's deadline (and
/// `stall_timeout`) apply: a store may take minutes to answer a large multipart upload's completion, and keep the
/// connection alive with a few spaces meanwhile.
///
/// libcurl's own stall check (`stall_timeout`) only catches a transfer that stops. A server that trickles a few
/// bytes a second never stops, and held a slot for ever: this floor ends it as a stall, which is retried. The
/// decisions are pure (the clock and the byte counts come in), so they are tested without a network.
struct RateFloor: Sendable {
    /// Bytes a second; 0 turns the floor off.
    let minimumRate: Int64
    let window: Duration
    /// The request's body size, for its deadline.
    let bodyBytes: Int64
    let started: ContinuousClock.Instant
    /// Byte counts taken at most once a second, back to a little more than a window ago.
    private var samples: [(at: ContinuousClock.Instant, bytes: Int64)] = []
    /// The floor in force at the last look, and since when it has not risen: a window that began under a lower
    /// floor (more requests sharing the link, a bandwidth cap) is not judged against a higher one.
    private var lastFloor: Int64 = 0
    private var judgedSince: ContinuousClock.Instant
    /// When the last byte of the body went, once it has.
    private var bodySentAt: ContinuousClock.Instant?

    /// The longest any request may take beyond its body's size at the floor rate, and the longest its answer may.
    static let deadlineBase = Duration.seconds(600)

    init(minimumRate: Int64, window: Duration, bodyBytes: Int64, started: ContinuousClock.Instant) {
        self.minimumRate = minimumRate
        self.window = window
        self.bodyBytes = bodyBytes
        self.started = started
        judgedSince = started
    }

    /// Why the request must end, said for its error, or nil while it keeps up.
    enum Verdict: Sendable, Equatable {
        /// Fewer than the floor's bytes moved over the last window.
        case tooSlow(bytes: Int64, over: Duration, floor: Int64)
        /// Past its deadline.
        case pastDeadline(Duration)
    }

    /// Takes the bytes moved so far (sent and received) at `now`.
    ///
    /// - Parameters:
    ///   - sendingBody: whether the body is not all sent yet.
    ///   - cap: the send-rate cap on this request, if any: a request held below the floor by uploadq's own
    ///     bandwidth cap is slow on purpose, and its floor is half its share of the cap.
    ///   - sharers: the requests in flight together, this one included: they share the link, and the floor.
    mutating func observe(bytes: Int64, at now: ContinuousClock.Instant, sendingBody: Bool = true,
                          cap: Int64 = 0, sharers: Int = 1) -> Verdict? {
        guard minimumRate > 0 else { return nil }
        var floor = max(1, minimumRate / Int64(max(1, sharers)))
        if cap > 0 { floor = max(1, min(floor, cap / 2)) }
        if floor > lastFloor {
            samples.removeAll()
            judgedSince = now
        }
        lastFloor = floor
        if samples.last.map({ now - $0.at >= .seconds(1) }) ?? true {
            samples.append((now, bytes))
            // Kept: the newest sample at least a window old, and all after it.
            if let keep = samples.lastIndex(where: { now - $0.at >= window }), keep > 0 {
                samples.removeFirst(keep)
            }
        }
        if !sendingBody, bodySentAt == nil { bodySentAt = now }
        if let bodySentAt {
            return now - bodySentAt > Self.deadlineBase ? .pastDeadline(Self.deadlineBase) : nil
        }
        let allowance = Self.deadlineBase + .seconds(Double(bodyBytes) / Double(floor))
        if now - started > allowance { return .pastDeadline(allowance) }
        guard now - judgedSince >= window, let base = samples.last(where: { now - $0.at >= window }) else { return nil }
        let span = now - base.at
        let moved = bytes - base.bytes
        let seconds = Double(span.components.seconds) + Double(span.components.attoseconds) / 1e18
        return Double(moved) < Double(floor) * seconds ? .tooSlow(bytes: moved, over: span, floor: floor) : nil
    }
}
