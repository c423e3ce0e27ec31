/// When a control connection is closed for taking too long: pure, the timer lives in `ControlDeadlineHandler`.
///
/// | state | event | then | timer |
/// |---|---|---|---|
/// | idle (opened, or an answer written) | a byte arrives | receiving | `request_timeout` from now |
/// | receiving | the request is whole | answering | none (a long poll, a stream: the answer's own limits) |
/// | answering | the answer is written | idle | `idle_timeout` from now |
/// | idle or receiving | the timer fires | closed | — |
///
/// A client that sends a byte a second (a slow loris) is closed `request_timeout` after its first; one that opens a
/// connection and sends nothing, after `idle_timeout`.
struct ConnectionDeadline: Sendable, Equatable {
    enum State: Sendable, Equatable {
        case idle
        case receiving
        case answering
    }

    /// What the handler does with its timer.
    enum Action: Sendable, Equatable {
        case none
        /// (Re)start it: the connection is closed when it fires.
        case start(Duration)
        case cancel
    }

    let requestTimeout: Duration
    let idleTimeout: Duration
    private(set) var state = State.idle
    /// Requests received whole and not answered yet (a client may pipeline a second before the first is answered).
    private var unanswered = 0

    init(requestTimeout: Duration, idleTimeout: Duration) {
        self.requestTimeout = requestTimeout
        self.idleTimeout = idleTimeout
    }

    /// The connection opened.
    func opened() -> Action { .start(idleTimeout) }

    /// Bytes arrived.
    mutating func received() -> Action {
        guard state == .idle else { return .none }
        state = .receiving
        return .start(requestTimeout)
    }

    /// A request arrived whole.
    mutating func requestComplete() -> Action {
        unanswered += 1
        state = .answering
        return .cancel
    }

    /// An answer was written (a streamed one ends its connection).
    mutating func answered() -> Action {
        unanswered = max(0, unanswered - 1)
        guard unanswered == 0 else { return .none }
        state = .idle
        return .start(idleTimeout)
    }
}
