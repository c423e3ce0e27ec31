import Synchronization

/// Wakes the control API's long polls when a job changes in this process; each poll also looks again every
/// second, for what another process changed in the database.
final class ChangeBell: Sendable {
    private struct Waiters {
        var next = 0
        var continuations: [Int: CheckedContinuation<Void, Never>] = [:]
        /// Waiters woken (by their timer, or a cancel) before they were listed: they return at once.
        var early: Set<Int> = []
        /// A ring came while no one waited (kept only by a bell that remembers rings).
        var missed = false
    }

    private let waiters = Mutex(Waiters())
    /// Rung with this bell: the live followers, who read the durable log too.
    private let alsoRinging: (@Sendable () -> Void)?
    /// A ring with no one waiting makes the next wait return at once: the bell of one waiter (an event-stream
    /// follower), which misses no ring that came while it was busy.
    private let remembersRings: Bool

    /// A bell; `alsoRinging` is called at each `ring()`.
    init(alsoRinging: (@Sendable () -> Void)? = nil, remembersRings: Bool = false) {
        self.alsoRinging = alsoRinging
        self.remembersRings = remembersRings
    }

    /// Wakes every waiter now.
    func ring() {
        alsoRinging?()
        let woken = waiters.withLock { waiters in
            defer { waiters.continuations.removeAll() }
            if remembersRings && waiters.continuations.isEmpty { waiters.missed = true }
            return Array(waiters.continuations.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Returns at the next `ring()`, after `limit` at the latest, or at once when the task is cancelled.
    func wait(upTo limit: Duration) async {
        let id = waiters.withLock { waiters -> Int? in
            if waiters.missed {
                waiters.missed = false
                return nil
            }
            waiters.next += 1
            return waiters.next
        }
        guard let id else { return }
        let timer = Task { [weak self] in
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            self?.wake(id)
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let already = waiters.withLock { waiters -> Bool in
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
