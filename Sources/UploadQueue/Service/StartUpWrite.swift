import Foundation
import Logging

/// A write the start cannot go without (recovering interrupted uploads, recording the configured hooks). A full
/// disk gives the space reserve back and waits for room (saying so once), trying every 5 s until it works or the
/// task is cancelled; `giveUp` (a batch run) stops waiting after a minute. Any other error is thrown at once.
struct StartUpWrite: Sendable {
    let configuration: Configuration
    let reserve: SpaceReserve
    let giveUp: Bool
    let logger: Logger

    func run<T: Sendable>(_ what: String, _ write: @escaping @Sendable () throws -> T) async throws -> T {
        let started = ContinuousClock.now
        var told = false
        while true {
            do {
                return try await BlockingWork.run(write)
            } catch where QueueDatabase.isDiskFull(error, at: configuration.databasePath) {
                if reserve.release() { continue }
                if !told {
                    logger.error("cannot \(what): the queue's disk is full; waiting for room (free space on it): \(error)")
                    told = true
                }
                if giveUp && ContinuousClock.now - started > .seconds(60) {
                    throw UploadQueueError.database("cannot \(what): the queue's disk stayed full", error)
                }
                try await Task.sleep(for: .seconds(5))
            }
        }
    }
}
