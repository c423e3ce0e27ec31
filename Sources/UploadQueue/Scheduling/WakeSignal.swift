import Synchronization

/// A level-triggered wake-up: `signal()` from anywhere, `wait(timeout:)` in the scheduler loop.
///
/// A signal sent while nobody waits is remembered, so a wake-up between two waits is never lost.
final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Returns on a signal, after `timeout`, or when the task is cancelled.
    func wait(timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForSignal() }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Like `wait(timeout:)`, but returns no sooner than `spacing` after `last`: a loop that every event of a burst
    /// wakes (each upload that finishes) goes round once per `spacing`, not once per event.
    func wait(timeout: Duration, spacedFrom last: ContinuousClock.Instant, by spacing: Duration) async {
        await wait(timeout: timeout)
        let early = last + spacing - .now
        if early > .zero, !Task.isCancelled { try? await Task.sleep(for: early) }
    }

    private func waitForSignal() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.pending {
                        state.pending = false
                        return true
                    }
                    if Task.isCancelled { return true }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}
