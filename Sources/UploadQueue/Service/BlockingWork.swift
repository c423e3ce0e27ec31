import Dispatch

/// Runs blocking file work (hashing, copying, fsync) on a dispatch queue instead of Swift's cooperative threads.
enum BlockingWork {
    private static let queue = DispatchQueue(label: "uploadq.blocking-io", qos: .utility, attributes: .concurrent)

    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }
}

extension BlockingWork {
    /// Runs typed-throwing blocking work and hands back its result.
    static func runResult<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async -> Result<T, E> {
        await withCheckedContinuation { continuation in
            DispatchQueue.global(qos: .utility).async {
                continuation.resume(returning: Result { () throws(E) -> T in try body() })
            }
        }
    }
}
