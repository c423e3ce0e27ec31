import CUploadQueueSystem
import Synchronization

/// The debug build's record of where a job's steps run: (execution context, step) per job, in order, so a test can
/// print a photo's path and count its hops (how many contexts it crosses, how often it changes context).
///
/// Off until a test starts it (`start()`); the release build records nothing and costs nothing. An execution context
/// is a thread uploadq names (an actor's `ActorThread`, the transfer engine's, an intake's), "blocking work" for
/// the dispatch queues that run SQLite and file work (`BlockingWork`), or "Swift's pool" for a cooperative thread.
package enum HopTrace {
    /// One step of a job, and where it ran.
    package struct Hop: Sendable, Equatable, CustomStringConvertible {
        package let context: String
        package let step: String

        package var description: String { "\(step) @ \(context)" }
    }

    #if DEBUG
    private static let hops = Mutex<[JobID: [Hop]]>([:])
    /// Whether it records: read at every step, a load where a lock would be taken.
    private static let recording = Atomic(false)
    #endif

    /// Starts recording (forgetting what an earlier start recorded).
    package static func start() {
        #if DEBUG
        hops.withLock { $0 = [:] }
        recording.store(true, ordering: .releasing)
        #endif
    }

    /// Stops recording, handing back what was recorded.
    package static func stop() -> [JobID: [Hop]] {
        #if DEBUG
        recording.store(false, ordering: .releasing)
        return hops.withLock { hops in
            defer { hops = [:] }
            return hops
        }
        #else
        return [:]
        #endif
    }

    /// What was recorded of `job` so far.
    package static func peek(_ job: JobID) -> [Hop] {
        #if DEBUG
        return hops.withLock { $0[job] ?? [] }
        #else
        return []
        #endif
    }

    /// Records `step` of `job` in the calling context, while recording.
    @inline(__always)
    static func record(_ job: JobID, _ step: @autoclosure () -> String) {
        #if DEBUG
        guard recording.load(ordering: .acquiring) else { return }
        let hop = Hop(context: context, step: step())
        hops.withLock { $0[job, default: []].append(hop) }
        #endif
    }

    /// The calling thread's context, named as above.
    static var context: String {
        if let name = uploadq_thread_context() { return String(cString: name) }
        if BlockingCheck.mayBlockNow { return "blocking work" }
        if BlockingCheck.onCooperativeThread { return "Swift's pool" }
        return "a thread of its own"
    }

    /// The number of contexts `hops` cross, and how many times a step runs in another context than the one before.
    package static func count(_ hops: [Hop]) -> (contexts: Int, handOffs: Int) {
        let handOffs = zip(hops, hops.dropFirst()).filter { $0.context != $1.context }.count
        return (Set(hops.map(\.context)).count, handOffs)
    }
}
