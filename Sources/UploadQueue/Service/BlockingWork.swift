import CUploadQueueSystem
import Dispatch
import Foundation

/// Runs blocking file work (hashing, copying, fsync) on a dispatch queue instead of Swift's cooperative threads.
package enum BlockingWork {
    private static let queue = DispatchQueue(label: "uploadq.blocking-io", qos: .utility, attributes: .concurrent)

    package static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try BlockingCheck.mayBlock(body) }) }
        }
    }
}

extension BlockingWork {
    /// Runs typed-throwing blocking work and hands back its result.
    static func runResult<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async -> Result<T, E> {
        await withCheckedContinuation { continuation in
            DispatchQueue.global(qos: .utility).async {
                continuation.resume(returning: Result { () throws(E) -> T in try BlockingCheck.mayBlock(body) })
            }
        }
    }
}

extension BlockingWork {
    /// Runs blocking work on a thread of its own. Dispatch's concurrent queues run about one block per CPU at a
    /// time: on a 2-core device, two long hashes would hold every thread, and a third file (another dropper's
    /// photo) would wait for one of them. For work that may run long, a few at once (the spool's intakes).
    static func runOnOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                uploadq_thread_set_context("uploadq-intake")
                continuation.resume(with: Result { try BlockingCheck.mayBlock(body) })
            }
            thread.name = "uploadq-intake"
            thread.start()
        }
    }
}
