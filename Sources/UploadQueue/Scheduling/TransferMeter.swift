import Synchronization

/// The bytes and rate of one running transfer, updated from the uploader's task and read for progress.
final class TransferMeter: Sendable {
    private struct State {
        var startBytes: Int64
        var startTime: ContinuousClock.Instant
        var sent: Int64
    }

    private let state: Mutex<State>

    init(start: Int64) {
        state = Mutex(State(startBytes: start, startTime: .now, sent: start))
    }

    /// Bytes handed to the destination so far.
    var sent: Int64 { state.withLock { $0.sent } }

    func restart(at offset: Int64) {
        state.withLock { $0 = State(startBytes: offset, startTime: .now, sent: offset) }
    }

    func recordSent(_ bytes: Int64) {
        state.withLock { $0.sent = max($0.sent, bytes) }
    }

    /// Average bytes per second of this attempt up to `bytes`.
    func rate(at bytes: Int64) -> Int64 {
        state.withLock { state in
            let elapsed = (ContinuousClock.now - state.startTime).seconds
            guard elapsed > 0.05 else { return 0 }
            return Int64(Double(bytes - state.startBytes) / elapsed)
        }
    }
}
