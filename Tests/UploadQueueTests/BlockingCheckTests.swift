import Foundation
import Testing
@testable import UploadQueue

/// Where blocking work may run: what `BlockingCheck` (on in every daemon the tests start) takes for one of Swift's
/// cooperative threads, and what not.
struct BlockingCheckTests {
    /// An actor on a thread of its own, as the queue's actors that call SQLite are.
    actor OnItsThread {
        private let thread = ActorThread(name: "uploadq-test")
        nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

        func cooperative() -> Bool { BlockingCheck.onCooperativeThread }
    }

    @Test("a task on the shared pool is cooperative; an actor's own thread, the blocking-work queues and plain threads are not")
    func whereBlockingMayRun() async throws {
        #expect(BlockingCheck.onCooperativeThread, "a test's task runs on the shared pool")
        #expect(try await BlockingWork.run { BlockingCheck.onCooperativeThread } == false)
        #expect(await BlockingWork.runResult { () throws(Never) in BlockingCheck.onCooperativeThread }.get() == false)
        #expect(try await BlockingWork.runOnOwnThread { BlockingCheck.onCooperativeThread } == false)
        #expect(await OnItsThread().cooperative() == false)
        // The mark is the blocking work's alone: the queue's thread, reused by the next block, is not marked after.
        let reused = await withCheckedContinuation { continuation in
            DispatchQueue.global(qos: .utility).async {
                continuation.resume(returning: BlockingCheck.mayBlock { () throws(Never) in true } && !BlockingCheck.mayBlockNow)
            }
        }
        #expect(reused)
        // A thread with no task (libcurl's, NIO's) blocks no task.
        let plain = await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: BlockingCheck.onCooperativeThread) }.start()
        }
        #expect(plain == false)
        // Back on the pool after an await: cooperative again.
        #expect(BlockingCheck.onCooperativeThread)
    }
}
