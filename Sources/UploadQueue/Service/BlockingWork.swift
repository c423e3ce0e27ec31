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
