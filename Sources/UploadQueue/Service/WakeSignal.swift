import Synchronization

/// The one wake-up of the code: `signal()` from anywhere wakes every task in `wait(timeout:)`; a wait also returns
/// after its timeout, or at once when its task is cancelled.
///
/// Used by every loop that waits for something to change: the scheduler, the owed work, the spool watcher, the
/// control API's long polls and the event stream's followers. A signal that comes while nobody waits is kept (one,
/// however many came) when the signal `remembers` (a loop that misses no change that came while it was busy);
/// a long poll's signal does not (a poll that starts looks at the database first). What wakes from outside the
/// process (the wake-up socket, inotify on the database's log) ends in a `signal()` too.
final class WakeSignal: Sendable {
    private struct Waiters {
        var next = 0
        /// How many signals came: a wait that saw a signal come between its start and its listing returns at once.
        var generation: UInt64 = 0
        var continuations: [Int: CheckedContinuation<Void, Never>] = [:]
        /// Waiters woken (by their timer, or a cancel) before they were listed: they return at once.
        var early: Set<Int> = []
        /// A signal came while no one waited (kept only by a signal that remembers).
        var missed = false
    }

    private let waiters = Mutex(Waiters())
    /// Signalled with this one: the event stream's followers of the long polls' signal.
    private let alsoSignalling: (@Sendable () -> Void)?
    private let remembers: Bool

    /// A wake-up; `alsoSignalling` is called at each `signal()`.
    init(remembers: Bool = true, alsoSignalling: (@Sendable () -> Void)? = nil) {
        self.remembers = remembers
        self.alsoSignalling = alsoSignalling
    }

    /// Wakes every waiter now (or, remembering, the next wait).
    func signal() {
        alsoSignalling?()
        let woken = waiters.withLock { waiters in
            defer { waiters.continuations.removeAll() }
            waiters.generation &+= 1
            if remembers && waiters.continuations.isEmpty { waiters.missed = true }
            return Array(waiters.continuations.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Returns at the next `signal()` (or at once for one kept), after `timeout` at the latest, or at once when the
    /// task is cancelled.
    func wait(timeout: Duration) async {
        let started = waiters.withLock { waiters -> (id: Int, generation: UInt64)? in
            if waiters.missed {
                waiters.missed = false
                return nil
            }
            waiters.next += 1
            return (waiters.next, waiters.generation)
        }
        guard let (id, generation) = started else { return }
        let timer = Task { [weak self] in
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            self?.wake(id)
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let already = waiters.withLock { waiters -> Bool in
                    if waiters.generation != generation {
                        // A signal came since this wait began, before it was listed: it is this wait's (and not
                        // kept for the next one as well).
                        if remembers { waiters.missed = false }
                        waiters.early.remove(id)
                        return true
                    }
                    if waiters.early.remove(id) != nil { return true }
                    waiters.continuations[id] = continuation
                    return false
                }
                if already { continuation.resume() }
            }
        } onCancel: {
            wake(id)
        }
        timer.cancel()
        await timer.value
        // A wake that came once the wait was over leaves nothing behind.
        waiters.withLock { _ = $0.early.remove(id) }
    }

    /// Like `wait(timeout:)`, but returns no sooner than `spacing` after `last`: a loop that every event of a burst
    /// wakes (each upload that finishes) goes round once per `spacing`, not once per event.
    func wait(timeout: Duration, spacedFrom last: ContinuousClock.Instant, by spacing: Duration) async {
        await wait(timeout: timeout)
        let early = last + spacing - .now
        if early > .zero, !Task.isCancelled { try? await Task.sleep(for: early) }
    }

    /// Wakes one waiter (its time is up, or its task was cancelled), or marks it to return at once.
    private func wake(_ id: Int) {
        let continuation = waiters.withLock { waiters -> CheckedContinuation<Void, Never>? in
            if let continuation = waiters.continuations.removeValue(forKey: id) { return continuation }
            waiters.early.insert(id)
            return nil
        }
        continuation?.resume()
    }
}
