import ServiceLifecycle

/// The queue's transfers as a `Service` for a `ServiceGroup`: runs until a graceful shutdown, then stops every
/// transfer at a safe point with its offset saved.
public struct QueueRunner: Service {
    let queue: UploadQueue
    let onReady: @Sendable () -> Void

    /// - Parameter onReady: called once the queue holds its lock and has recovered.
    public init(queue: UploadQueue, onReady: @escaping @Sendable () -> Void = {}) {
        self.queue = queue
        self.onReady = onReady
    }

    public func run() async throws {
        try await cancelWhenGracefulShutdown {
            try await queue.run(onReady: onReady)
        }
    }
}
