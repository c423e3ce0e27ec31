import Foundation
import Synchronization

/// The bytes and rate of one running transfer, updated from the uploader's task and the engine thread.
///
/// `sent` never goes backwards within an attempt, even when a resync makes the uploader send a range again.
final class TransferMeter: Sendable {
    private struct State {
        var startBytes: Int64
        var startTime: ContinuousClock.Instant
        var sent: Int64
        var confirmed: Int64
        var lastReport: ContinuousClock.Instant
    }

    private let state: Mutex<State>
    /// Least time between two in-flight progress reports.
    private let reportInterval: Duration = .milliseconds(250)

    init(start: Int64) {
        state = Mutex(State(startBytes: start, startTime: .now, sent: start, confirmed: start, lastReport: .now))
    }

    /// Bytes handed to the destination so far.
    var sent: Int64 { state.withLock { $0.sent } }

    /// Bytes the destination confirmed so far.
    var confirmed: Int64 { state.withLock { $0.confirmed } }

    func restart(at offset: Int64) {
        state.withLock { state in
            state.startBytes = offset
            state.startTime = .now
            state.sent = max(state.sent, offset)
            state.confirmed = offset
        }
    }

    /// Records bytes in flight; returns true when enough time passed for another progress report.
    func recordSent(_ bytes: Int64) -> Bool {
        state.withLock { state in
            state.sent = max(state.sent, bytes)
            let now = ContinuousClock.now
            guard now - state.lastReport >= reportInterval else { return false }
            state.lastReport = now
            return true
        }
    }

    func recordConfirmed(_ bytes: Int64) {
        state.withLock { state in
            state.confirmed = bytes
            state.sent = max(state.sent, bytes)
        }
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
