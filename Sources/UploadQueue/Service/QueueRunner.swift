import ServiceLifecycle

/// The queue's transfers as a `Service` for a `ServiceGroup`: runs until a graceful shutdown, then stops every
/// transfer at a safe point with its offset saved.
public struct QueueRunner: Service {
    let queue: UploadQueue
    let exitWhenIdle: Bool
    let onReady: @Sendable () -> Void

    /// - Parameters:
    ///   - exitWhenIdle: finish once nothing is pending or uploading (the group then stops).
    ///   - onReady: called once the queue holds its lock and has recovered.
    public init(queue: UploadQueue, exitWhenIdle: Bool = false, onReady: @escaping @Sendable () -> Void = {}) {
        self.queue = queue
        self.exitWhenIdle = exitWhenIdle
        self.onReady = onReady
    }

    public func run() async throws {
        try await cancelWhenGracefulShutdown {
            try await queue.run(exitWhenIdle: exitWhenIdle, onReady: onReady)
        }
    }
}
