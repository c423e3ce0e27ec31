import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import Testing
@testable import UploadQueue

/// Collects events from a queue in the background.
final class EventLog: Sendable {
    private final class Buffer: Sendable {
        let events = Mutex<[UploadEvent]>([])
    }

    private let buffer = Buffer()
    let task: Task<Void, Never>

    init(_ queue: UploadQueue) {
        let stream = queue.events
        let buffer = self.buffer
        task = Task { for await event in stream { buffer.events.withLock { $0.append(event) } } }
    }

    var all: [UploadEvent] { buffer.events.withLock { $0 } }
}

/// The library used in-process by a host: enqueue, run, observe events, stop and resume, cancel, reference files.
struct LibraryTests {
    @Test("a host enqueues and runs transfers in-process, sees events, and gets byte-identical files")
    func runInProcess() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let log = EventLog(queue)
        var ids: [JobID] = []
        for index in 0..<5 {
            let path = try sandbox.makeFile(sandbox.root + "/in/file-\(index).jpg", size: 100_000 * index, seed: UInt64(index))
            ids.append(try await queue.enqueue(path, metadata: ["n": "\(index)"]))
        }
        let runner = Task { try await queue.run() }
        let done = try await eventually { try ids.allSatisfy { try queue.store.job($0)?.state == .uploaded } }
        #expect(done)
        runner.cancel()
        try await runner.value
        for id in ids {
            let job = try #require(try await queue.job(id))
            let remote = try #require(job.remoteURL.flatMap(URL.init(string:)))
            #expect(remote.path.hasPrefix(sandbox.target + "/"))
            #expect(remote.lastPathComponent == "\(id)-\(job.originalName)")
            #expect(try sha256(ofFile: remote.path) == job.sha256)
            #expect(job.bytesConfirmed == job.size)
        }
        #expect(sandbox.deliveredFiles().count == 5)
        let events = log.all
        for id in ids {
            #expect(events.contains(.enqueued(id)))
            #expect(events.contains(.stateChanged(id, .uploading)))
            #expect(events.contains(.stateChanged(id, .uploaded)))
        }
        #expect(events.contains { if case .progress = $0 { return true } else { return false } })
        log.task.cancel()
    }

    @Test("the library example of docs/after-upload.md works as written, on a configuration built in code")
    func readmeExample() async throws {
        let sandbox = try Sandbox()
        let configuration = Configuration(stateDirectory: sandbox.state, destinations: [
            "default": .localDirectory(name: "default", directory: sandbox.target),
        ])
        let queue = try UploadQueue(configuration: configuration)
        let path = try sandbox.makeFile(sandbox.root + "/photo.jpg", size: 70_000, seed: 77)
        let events = queue.events
        let id = try await queue.enqueue(path, destination: "default", metadata: ["record": "r-123"])
        let runner = Task { try await queue.run() }
        var remoteURL: String?
        for await event in events {
            if case .stateChanged(id, .uploaded) = event {
                remoteURL = try await queue.job(id)?.remoteURL
                break
            }
        }
        runner.cancel()
        try await runner.value
        let url = try #require(remoteURL.flatMap(URL.init(string:)))
        #expect(try sha256(ofFile: url.path) == sha256(ofFile: path))
        #expect(try await queue.job(id)?.meta == ["record": "r-123"])
    }

    @Test("stopping the runner mid-transfer leaves the job pending with its offset; the next run resumes there")
    func stopAndResume() async throws {
        let sandbox = try Sandbox(bandwidth: 2 << 20)
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/big.bin", size: 6 << 20, seed: 11)
        let id = try await queue.enqueue(path)
        let runner = Task { try await queue.run() }
        #expect(try await eventually { (try queue.store.job(id)?.bytesConfirmed ?? 0) >= 1 << 20 })
        runner.cancel()
        try await runner.value
        let stopped = try #require(try await queue.job(id))
        #expect(stopped.state == .pending)
        #expect(stopped.bytesConfirmed > 0 && stopped.bytesConfirmed < stopped.size)
        #expect(try await queue.attempts(of: id).last?.outcome == "interrupted")

        let again = Task { try await queue.run() }
        #expect(try await eventually { try queue.store.job(id)?.state == .uploaded })
        again.cancel()
        try await again.value
        let attempts = try await queue.attempts(of: id)
        #expect(attempts.count == 2)
        #expect(attempts[1].startOffset >= stopped.bytesConfirmed)
        let job = try #require(try await queue.job(id))
        #expect(try sha256(ofFile: try #require(URL(string: job.remoteURL ?? "")).path) == job.sha256)
    }

    @Test("a reference file that changes before its upload fails permanently with 'source changed' and is kept")
    func referenceChanged() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/ref.bin", size: 4096, seed: 12)
        let id = try await queue.enqueue(path, mode: .reference)
        #expect(try await queue.job(id)?.file == path)
        try sandbox.makeFile(path, size: 4097, seed: 13)
        let runner = Task { try await queue.run() }
        #expect(try await eventually { try queue.store.job(id)?.state == .failed })
        runner.cancel()
        try await runner.value
        let job = try #require(try await queue.job(id))
        #expect(job.permanent)
        #expect(job.lastError?.contains("source changed") == true)
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(sandbox.deliveredFiles().isEmpty)
    }

    @Test("cancelling a transfer in progress removes the job, drops the partial copy and keeps the file")
    func cancelRunning() async throws {
        let sandbox = try Sandbox(bandwidth: 1 << 20)
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/big.bin", size: 8 << 20, seed: 14)
        let id = try await queue.enqueue(path)
        let runner = Task { try await queue.run() }
        #expect(try await eventually { (try queue.store.job(id)?.bytesConfirmed ?? 0) > 0 })
        #expect(try await queue.cancel(id) == .requested)
        #expect(try await eventually { try queue.store.job(id) == nil })
        runner.cancel()
        try await runner.value
        #expect(sandbox.deliveredFiles().isEmpty)
        let partials = (try? FileManager.default.contentsOfDirectory(atPath: sandbox.target)) ?? []
        #expect(partials.isEmpty)
        #expect(FileManager.default.fileExists(atPath: sandbox.state + "/cancelled/\(id)-big.bin"))
    }

    @Test("a host runs the queue's services in its own group: ready once the control API listens, stopped in order, the lock released last")
    func servicesInTheHostsGroup() async throws {
        let sandbox = try Sandbox()
        let queue = try UploadQueue(configuration: try sandbox.configuration())
        let path = try sandbox.makeFile(sandbox.root + "/in/a.jpg", size: 50_000, seed: 3)
        let id = try await queue.enqueue(path)
        let socket = queue.configuration.apiSocketPath
        let listening = Mutex<Bool?>(nil)
        let services = try await queue.services {
            listening.withLock { $0 = FileManager.default.fileExists(atPath: socket) }
        }
        #expect(await !queue.isRunning, "the parts are the facade's once the services run, not before")
        // The host's own service, first in the group: stopped after every one of the queue's.
        let stoppedLast = Mutex<(running: Bool, lockFree: Bool)?>(nil)
        let lockPath = queue.configuration.lockPath
        let host = ClosureService {
            try? await gracefulShutdown()
            let running = await queue.isRunning
            stoppedLast.withLock { $0 = (running, DaemonLock.holder(path: lockPath) == nil) }
        }
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: host, successTerminationBehavior: .ignore)] + services,
            logger: Logger(label: "test")))
        let running = Task { try await group.run() }
        #expect(await eventually { await queue.isRunning })
        #expect(try await eventually { try queue.store.job(id)?.state == .uploaded })
        #expect(listening.withLock { $0 } == true, "onReady is called with the control API's socket there")
        await group.triggerGracefulShutdown()
        try await running.value
        let seen = try #require(stoppedLast.withLock { $0 })
        #expect(!seen.running && seen.lockFree, "the queue's services all stopped before the host's: \(seen)")
        #expect(!FileManager.default.fileExists(atPath: socket), "the control API removed its socket")
        // Stopped: another runner may take the queue.
        let again = try UploadQueue(configuration: try sandbox.configuration())
        let second = Task { try await again.run() }
        #expect(await eventually { await again.isRunning })
        second.cancel()
        try await second.value
    }

    @Test("a second runner on the same state directory is refused while the first runs")
    func singleRunner() async throws {
        let sandbox = try Sandbox()
        let first = try UploadQueue(configuration: try sandbox.configuration())
        let second = try UploadQueue(configuration: try sandbox.configuration())
        let runner = Task { try await first.run() }
        #expect(await eventually { await first.isRunning })
        await #expect(throws: UploadQueueError.self) { try await second.run() }
        #expect(try await second.status().runnerPID == getpid())
        runner.cancel()
        try await runner.value
    }
}
