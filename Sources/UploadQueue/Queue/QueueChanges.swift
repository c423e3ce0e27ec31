import Foundation

/// Wakes a waiter in any process when the queue's database changes: every commit, by the daemon or a CLI, writes
/// the database's write-ahead log, and inotify on the state directory says so at once.
///
/// What `enqueue --wait` follows instead of polling: a job that is uploaded is seen a moment after its commit.
/// Without inotify (a network file system), `wait(timeout:)` simply returns after its timeout.
package final class QueueChanges: Sendable {
    private let wake = WakeSignal()
    private let watch: InotifyWatch?
    private let follower: Task<Void, Never>?

    /// Follows the database at `databasePath` (its `-wal` and `-shm` files and itself).
    package init(databasePath: String) {
        let directory = (databasePath as NSString).deletingLastPathComponent
        let name = (databasePath as NSString).lastPathComponent
        let watch = try? InotifyWatch(directory: directory)
        let wake = self.wake
        self.watch = watch
        follower = watch.map { watch in
            Task { [wake] in
                for await event in watch.events {
                    switch event {
                    case .modified(let file), .closedWrite(let file), .created(let file), .movedIn(let file):
                        if file.hasPrefix(name) { wake.signal() }
                    case .overflow:
                        wake.signal()
                    case .undecodableName:
                        continue
                    case .watchLost:
                        return
                    }
                }
            }
        }
    }

    deinit {
        follower?.cancel()
    }

    /// Returns when the database changed since the last call (or since this watch began), or after `timeout`.
    package func wait(timeout: Duration) async {
        await wake.wait(timeout: timeout)
    }
}
