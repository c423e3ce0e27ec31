import Foundation
import Synchronization
import Testing
@testable import UploadQueue

/// The hub every event goes through: its tap and feed are called once per event, at the same cost the millionth
/// time as the first.
@Suite struct EventHubTests {
    @Test("a tap and a feed called a million times each: every call arrives, and the call does not grow with the count")
    func millionsOfEvents() {
        let hub = EventHub()
        let taken = Atomic<Int>(0)
        let fed = Atomic<Int>(0)
        hub.attachTap { _ in taken.add(1, ordering: .relaxed) }
        hub.attachFeed { _ in fed.add(1, ordering: .relaxed) }
        let id = JobID.generate()
        let line = FeedEvent(.link, fields: [:])
        // A closure read out of the lock used to come back wrapped once more each time: the millionth call went
        // through a million thunks, and overflowed the stack well before.
        for index in 0..<1_000_000 {
            hub.emit(.progress(id, confirmed: Int64(index), sent: Int64(index), size: 1 << 40))
            hub.notice(line)
        }
        #expect(taken.load(ordering: .relaxed) == 1_000_000)
        #expect(fed.load(ordering: .relaxed) == 1_000_000)
        hub.attachTap(nil)
        hub.emit(.progress(id, confirmed: 1, sent: 1, size: 2))
        #expect(taken.load(ordering: .relaxed) == 1_000_000, "detached: called no more")
    }
}
