import Foundation
import Testing
@testable import UploadQueue

/// A queue on a sandbox's config, running its transfers in this process until `stop()`.
final class RunningQueue: Sendable {
    let queue: UploadQueue
    let runner: Task<Void, Error>

    init(_ sandbox: Sandbox) throws {
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        self.queue = queue
        runner = Task { try await queue.run() }
    }

    /// Enqueues a copy of `path` and returns its id.
    func enqueue(_ path: String, to destination: String, meta: [String: String] = [:], mode: IntakeMode = .copy)
        async throws -> JobID
    {
        try await queue.enqueue(path, destination: destination, metadata: meta, mode: mode)
    }

    /// Waits until the job is uploaded or failed for good (`permanent`), or `timeout` passes; returns it then.
    func settled(_ id: JobID, timeout: Duration = .seconds(60)) async throws -> Job {
        _ = try await eventually(timeout: timeout) {
            guard let job = try queue.store.job(id) else { return true }
            return job.state == .uploaded || (job.state == .failed && job.permanent)
        }
        return try #require(try queue.store.job(id))
    }

    /// Waits until `condition` holds for the job.
    func wait(_ id: JobID, timeout: Duration = .seconds(60), until condition: @escaping (Job) -> Bool) async throws -> Job {
        _ = try await eventually(timeout: timeout) { try queue.store.job(id).map(condition) ?? false }
        return try #require(try queue.store.job(id))
    }

    func attempts(_ id: JobID) throws -> [JobAttempt] { try queue.store.attempts(of: id) }

    func stop() async {
        runner.cancel()
        _ = try? await runner.value
    }
}

extension Sandbox {
    /// Runs a queue on this sandbox until one new file of `size` bytes reaches `destination` or fails for good;
    /// returns the job and its attempts.
    func uploadOne(_ name: String, size: Int, seed: UInt64, to destination: String) async throws -> (Job, [JobAttempt]) {
        let running = try RunningQueue(self)
        let id = try await running.enqueue(try makeFile(root + "/" + name, size: size, seed: seed), to: destination)
        let job = try await running.settled(id)
        let attempts = try running.attempts(id)
        await running.stop()
        return (job, attempts)
    }

    /// A sandbox whose config also has `[destinations.NAME]` with `lines` (TOML) after its default.
    convenience init(destination name: String, _ lines: String, retry: String = "300ms", concurrency: Int = 4,
                     bandwidth: Int64 = 0) throws {
        try self.init(config: "[destinations.\(name)]\n\(lines)", bandwidth: bandwidth, concurrency: concurrency,
                      retryInterval: retry)
    }
}
