import Foundation
import GRDB
import Testing
@testable import UploadQueue

/// Groups: the tallies as a pure value, and the store that keeps them in the transactions of each member's
/// enqueue, upload, failure, retry and cancel, and of the group's close; and what holds a lane, with its events.
@Suite struct GroupTests {
    typealias Queue = OrderTests.Queue

    /// Enqueues a member of `group` (through the store, as the intake does).
    static func member(_ queue: inout Queue, _ group: String, owner: UInt32? = nil, name: String = "photo.jpg")
        throws -> JobID {
        queue.now += 1
        let id = JobID.generate(at: queue.now)
        var job = QueueStoreTests.job(id)
        job.group = group
        job.ownerUID = owner
        job.originalName = name
        let at = queue.now
        try queue.store.writer.write { db in
            try job.insert(db)
            try QueueStore.joinGroup(job, in: db, now: at)
        }
        return id
    }

    static func upload(_ queue: Queue, _ id: JobID) throws {
        _ = try queue.store.claim(limit: 100, now: queue.now)
        let job = try queue.job(id)
        try queue.store.finish(id, attempt: job.attempts, event: .succeed, outcome: "uploaded", error: nil,
                               now: queue.now) { $0.remoteURL = "https://example.test/\(id)" }
    }

    static func events(_ queue: Queue, owner: UInt32? = nil) throws -> [FeedEvent] {
        try queue.store.loggedEvents(after: 0, owner: owner, limit: 10_000).events
    }

    @Test("the tallies: a closed group completes once every member is uploaded; a failure for good makes it incomplete until retried")
    func tallies() {
        var tally = GroupTally()
        #expect(tally.apply(.joined) == nil && tally.apply(.joined) == nil && tally.state == .open)
        #expect(tally.apply(.uploaded) == nil)
        #expect(tally.apply(.failedForGood) == .incomplete && tally.state == .incomplete)
        #expect(tally.apply(.closed) == nil && tally.state == .incomplete && !tally.admitsMembers)
        #expect(tally.apply(.revived) == nil && tally.state == .closed)
        #expect(tally.apply(.uploaded) == .completed && tally.state == .uploaded)
        #expect(tally.apply(.left(failedForGood: false)) == nil && tally.members == 2, "nothing changes a completed group")
        var empty = GroupTally()
        _ = empty.apply(.joined)
        #expect(empty.apply(.left(failedForGood: false)) == nil)
        #expect(empty.apply(.closed) == .completed, "a group whose every member left completes empty")
    }

    @Test("a closed group completes in the transaction of its last member's upload: one completion with every member's URL, and one event")
    func completion() throws {
        var queue = Queue()
        let members = try (0..<3).map { try Self.member(&queue, "survey-42", name: "p\($0).jpg") }
        let other = try Self.member(&queue, "survey-43")
        try Self.upload(queue, members[0])
        #expect(try queue.store.group("survey-42", owner: nil)?.state == .open)
        let closed = try queue.store.closeGroup("survey-42", owner: nil)
        #expect(closed.state == .closed && closed.members == 3 && closed.remaining == 2)
        #expect(throws: UploadQueueError.self) {
            try queue.store.writer.write { db in
                var late = QueueStoreTests.job(JobID.generate(at: queue.now + 5))
                late.group = "survey-42"
                try late.insert(db)
                try QueueStore.joinGroup(late, in: db, now: queue.now)
            }
        }
        #expect(try queue.store.job(members[0]) != nil && queue.store.group("survey-42", owner: nil)?.members == 3,
                "the refused enqueue was undone whole")
        try Self.upload(queue, members[1])
        try Self.upload(queue, other)
        #expect(try Self.events(queue).filter { $0.kind == .groupUploaded }.isEmpty)
        try Self.upload(queue, members[2])
        let group = try #require(try queue.store.group("survey-42", owner: nil))
        #expect(group.state == .uploaded && group.completedAt != nil)
        #expect(group.completion.map(\.jobID) == members)
        #expect(group.completion.map(\.remoteURL) == members.map { "https://example.test/\($0)" })
        #expect(group.completion.map(\.originalName) == ["p0.jpg", "p1.jpg", "p2.jpg"])
        let done = try Self.events(queue).filter { $0.kind == .groupUploaded }
        #expect(done.count == 1 && done.first?.job == members[2])
        #expect(done.first?.fields["members"] == .integer(3) && done.first?.fields["group"] == .string("survey-42"))
        #expect(done.first?.fields["remote_urls"] == .strings(members.map { "https://example.test/\($0)" }))
        #expect(try queue.store.group("survey-43", owner: nil)?.state == .open, "another group is its own")
        #expect(try queue.store.unacknowledgedGroups().map(\.name) == ["survey-42"])
        try queue.store.acknowledgeGroup("survey-42", owner: nil)
        #expect(try queue.store.unacknowledgedGroups().isEmpty)
    }

    @Test("closing a group whose members are all uploaded completes it at once; closing twice or a group never made is refused")
    func closeCompletes() throws {
        var queue = Queue()
        let a = try Self.member(&queue, "g")
        try Self.upload(queue, a)
        let group = try queue.store.closeGroup("g", owner: nil)
        #expect(group.state == .uploaded && group.completion.map(\.jobID) == [a])
        #expect(try Self.events(queue).last?.kind == .groupUploaded)
        #expect(throws: UploadQueueError.self) { try queue.store.closeGroup("g", owner: nil) }
        do {
            _ = try queue.store.closeGroup("never", owner: nil)
            Issue.record("closing an unknown group went through")
        } catch let error as UploadQueueError {
            #expect(error.code == .groupNotFound)
        }
    }

    @Test("a member that fails for good makes its group incomplete, naming it; a retry brings the group back, and it completes")
    func incomplete() throws {
        var queue = Queue()
        let a = try Self.member(&queue, "g")
        let b = try Self.member(&queue, "g")
        _ = try queue.store.closeGroup("g", owner: nil)
        _ = try queue.claimAll()
        try queue.failForGood(b)
        var group = try #require(try queue.store.group("g", owner: nil))
        #expect(group.state == .incomplete && group.failingJob == b && group.failed == 1)
        let told = try Self.events(queue).filter { $0.kind == .groupIncomplete }
        #expect(told.count == 1 && told.first?.job == b && told.first?.fields["group"] == .string("g"))
        try queue.succeed(a)
        #expect(try queue.store.group("g", owner: nil)?.state == .incomplete, "a failed member holds the completion")
        #expect(try queue.store.retry([b]) == [b])
        group = try #require(try queue.store.group("g", owner: nil))
        #expect(group.state == .closed && group.failingJob == nil)
        try Self.upload(queue, b)
        #expect(try queue.store.group("g", owner: nil)?.state == .uploaded)
    }

    @Test("a cancelled member leaves its group: the group completes with the others")
    func cancelledMember() throws {
        var queue = Queue()
        let a = try Self.member(&queue, "g")
        let b = try Self.member(&queue, "g")
        _ = try queue.store.closeGroup("g", owner: nil)
        try Self.upload(queue, a)
        _ = try queue.store.requestCancel(b, workerRunning: false)
        _ = try queue.store.removeCancelled(b)
        let group = try #require(try queue.store.group("g", owner: nil))
        #expect(group.state == .uploaded && group.members == 1 && group.completion.map(\.jobID) == [a])
    }

    @Test("a group is its owner's: another user's group of the same name is another group, and its events are that user's")
    func owners() throws {
        var queue = Queue()
        let mine = try Self.member(&queue, "g", owner: 1001)
        let theirs = try Self.member(&queue, "g", owner: 1002)
        _ = try queue.store.closeGroup("g", owner: 1001)
        try Self.upload(queue, mine)
        #expect(try queue.store.group("g", owner: 1001)?.state == .uploaded)
        #expect(try queue.store.group("g", owner: 1002)?.state == .open)
        #expect(try queue.store.groups(owner: 1002).map(\.name) == ["g"])
        #expect(try Self.events(queue, owner: 1002).allSatisfy { $0.kind != .groupUploaded })
        #expect(try Self.events(queue, owner: 1001).contains { $0.kind == .groupUploaded })
        _ = theirs
    }

    @Test("pruning keeps the uploaded members of a group not yet completed, and prunes a completed group with its history")
    func pruning() throws {
        var queue = Queue()
        let a = try Self.member(&queue, "g")
        let b = try Self.member(&queue, "g")
        try Self.upload(queue, a)
        let later = queue.now + 86_400
        _ = try queue.store.pruneHistory(before: later, dryRun: false)
        #expect(try queue.store.job(a) != nil, "a member of an open group stays")
        _ = try queue.store.closeGroup("g", owner: nil, now: queue.now)
        try Self.upload(queue, b)
        #expect(try queue.store.group("g", owner: nil)?.completion.count == 2)
        _ = try queue.store.pruneHistory(before: queue.now + 2 * 86_400, dryRun: false)
        #expect(try queue.store.job(a) == nil && queue.store.job(b) == nil)
        #expect(try queue.store.group("g", owner: nil) == nil, "the completed group went with its history")
        _ = try Self.member(&queue, "g")
        #expect(try queue.store.group("g", owner: nil)?.state == .open, "the name makes a new group")
    }

    @Test("a lane's head that fails holds it (lane.blocked, once), and the lane goes on when it is uploaded (lane.unblocked)")
    func laneBlockedEvents() throws {
        var queue = Queue()
        let a = try queue.enqueue(lane: "events")
        let b = try queue.enqueue(lane: "events")
        #expect(try queue.claimAll() == [a])
        try queue.failTransiently(a)
        var lane = try #require(try queue.store.lanes(owner: nil).first)
        #expect(lane.name == "events" && lane.blockedBy == a && lane.head == a && lane.reason == "reset" && lane.queued == 2)
        queue.now += 120
        #expect(try queue.claimAll() == [a])
        try queue.failTransiently(a)
        queue.now += 120
        #expect(try queue.claimAll() == [a])
        try queue.succeed(a)
        lane = try #require(try queue.store.lanes(owner: nil).first)
        #expect(lane.blockedBy == nil && lane.head == b && lane.queued == 1)
        let kinds = try Self.events(queue).map(\.kind).filter { $0 == .laneBlocked || $0 == .laneUnblocked }
        #expect(kinds == [.laneBlocked, .laneUnblocked])
        #expect(try queue.store.laneGauges(now: queue.now).blocked == 0)
    }

    @Test("a head failed for good holds its lane until skipped; the gauges count it")
    func laneHeldAndSkipped() throws {
        var queue = Queue()
        let a = try queue.enqueue(lane: "events")
        let b = try queue.enqueue(lane: "events")
        _ = try queue.claimAll()
        try queue.failForGood(a)
        let gauges = try queue.store.laneGauges(now: queue.now + 30)
        #expect(gauges.blocked == 1 && gauges.oldestHeadAge >= 30)
        _ = try queue.store.skip(a, now: queue.now)
        let lane = try #require(try queue.store.lanes(owner: nil).first)
        #expect(lane.blockedBy == nil && lane.head == b)
        #expect(try Self.events(queue).last?.kind == .laneUnblocked)
    }
}

/// What a fresh pair of eyes found: the paths where a group's or a lane's bookkeeping could go wrong.
@Suite struct GroupEdgeTests {
    typealias Queue = OrderTests.Queue

    @Test("a cancel that completes a group owes its hook on the last member uploaded, never on the job that left")
    func cancelCompletesWithHook() throws {
        var queue = Queue()
        var hooks = Configuration.HookSettings()
        hooks.onGroupUploaded = ["/bin/true"]
        try queue.store.setHookConsumers(hooks)
        let a = try GroupTests.member(&queue, "g")
        let b = try GroupTests.member(&queue, "g")
        _ = try queue.store.closeGroup("g", owner: nil)
        try GroupTests.upload(queue, a)
        _ = try queue.store.requestCancel(b, workerRunning: false)
        _ = try queue.store.removeCancelled(b)
        let group = try #require(try queue.store.group("g", owner: nil))
        #expect(group.state == .uploaded && group.completion.map(\.jobID) == [a])
        #expect(try queue.store.outboxEntries(a).contains { $0.consumer == .hook(.groupUploaded) })
        #expect(try GroupTests.events(queue).last { $0.kind == .groupUploaded }?.job == a)
    }

    @Test("a member whose file was not taken after all (a move undone) leaves its group and its lane as if never enqueued")
    func untakenMemberLeaves() throws {
        var queue = Queue()
        let kept = try GroupTests.member(&queue, "g")
        let untaken = try GroupTests.member(&queue, "g")
        try queue.store.removeUntaken(untaken)
        _ = try queue.store.closeGroup("g", owner: nil)
        try GroupTests.upload(queue, kept)
        #expect(try queue.store.group("g", owner: nil)?.state == .uploaded)
    }

    @Test("only the lane's head blocks it: a later job failed by its prerequisite does not, nor does its cancel unblock the head")
    func onlyTheHeadBlocks() throws {
        var queue = Queue()
        let parent = try queue.enqueue()
        _ = try queue.claimAll()
        try queue.failForGood(parent)
        let head = try queue.enqueue(lane: "l")
        let later = try queue.enqueue(lane: "l", after: [parent])
        #expect(try queue.job(later).state == .failed, "prerequisite-failed at once")
        #expect(try queue.store.lanes(owner: nil).first?.blockedBy == nil, "a job behind the head blocks nothing")
        #expect(try queue.claimAll() == [head])
        try queue.failForGood(head)
        #expect(try queue.store.lanes(owner: nil).first?.blockedBy == head)
        _ = try queue.store.requestCancel(later, workerRunning: false)
        _ = try queue.store.removeCancelled(later)
        let lane = try #require(try queue.store.lanes(owner: nil).first)
        #expect(lane.blockedBy == head && lane.head == head, "the head still holds its lane")
        #expect(try queue.store.laneGauges(now: queue.now).blocked == 1)
    }

    @Test("a member revived before the job it waits for fails anew: its group stays incomplete and names it")
    func revivedBeforeItsPrerequisite() throws {
        var queue = Queue()
        let parent = try queue.enqueue()
        _ = try queue.claimAll()
        try queue.failForGood(parent)
        queue.now += 1
        let id = JobID.generate(at: queue.now)
        var job = QueueStoreTests.job(id)
        job.group = "g"
        job.afterMode = nil
        let at = queue.now
        try queue.store.writer.write { db in
            try job.insert(db)
            try QueueStore.joinGroup(job, in: db, now: at)
            try QueueStore.placeInOrder(job, QueueStore.OrderRequest(after: [parent.rawValue], keyOwner: 0), in: db, now: at)
        }
        #expect(try queue.job(id).state == .failed)
        #expect(try queue.store.retry([id]) == [id] || queue.job(id).state == .failed)
        let group = try #require(try queue.store.group("g", owner: nil))
        #expect(try queue.job(id).state == .failed && group.state == .incomplete && group.failed == 1 && group.failingJob == id,
                "\(group)")
    }

    @Test("a group's owner acknowledging through the API changes nothing the library host is told or keeps")
    func ownersAcknowledgementIsTheirs() throws {
        var queue = Queue()
        let a = try GroupTests.member(&queue, "g", owner: 1001)
        _ = try queue.store.closeGroup("g", owner: 1001)
        try GroupTests.upload(queue, a)
        try queue.store.acknowledgeGroup("g", owner: 1001, byOwner: true)
        #expect(try queue.store.unacknowledgedGroups().map(\.name) == ["g"])
        #expect(try queue.store.group("g", owner: 1001, byOwner: true)?.acknowledgedAt != nil)
        #expect(try queue.store.group("g", owner: 1001)?.acknowledgedAt == nil)
    }

    @Test("a group made anew under a pruned group's name is its own: none of the old members, and another completion")
    func nameMadeAnew() throws {
        var queue = Queue()
        let old = try GroupTests.member(&queue, "g")
        _ = try queue.store.closeGroup("g", owner: nil)
        try GroupTests.upload(queue, old)
        let first = try #require(try queue.store.group("g", owner: nil))
        _ = try queue.store.pruneHistory(before: queue.now + 2 * 86_400, dryRun: false)
        #expect(try queue.store.group("g", owner: nil) == nil)
        let new = try GroupTests.member(&queue, "g")
        _ = try queue.store.closeGroup("g", owner: nil)
        try GroupTests.upload(queue, new)
        let second = try #require(try queue.store.group("g", owner: nil))
        #expect(second.completion.map(\.jobID) == [new] && second.createdAt != first.createdAt)
    }

    @Test("a lane's job says what it waits for: the job before it in its lane, then a job it names after")
    func laneJobWaitingForItsPrerequisite() throws {
        var queue = Queue()
        let parent = try queue.enqueue()
        let first = try queue.enqueue(lane: "l")
        let second = try queue.enqueue(lane: "l", after: [parent])
        #expect(try queue.store.job(second)?.waitingReason == .lane)
        #expect(Set(try queue.claimAll()) == [parent, first])
        try queue.succeed(first)
        let waiting = try #require(try queue.store.job(second))
        #expect(waiting.waitingReason == .prerequisite && waiting.blockedBy == parent, "\(waiting.waitingHolds)")
        try queue.succeed(parent)
        #expect(try queue.claimAll() == [second])
    }

    @Test("group names are one path segment: no `/`, no control character, 1 to 128 characters")
    func groupNames() {
        #expect(OrderRule.isValidGroupName("survey-42") && OrderRule.isValidGroupName("année 2026"))
        #expect(!OrderRule.isValidGroupName("2024/03") && !OrderRule.isValidGroupName("") && !OrderRule.isValidGroupName("a\nb"))
        #expect(!OrderRule.isValidGroupName(String(repeating: "x", count: 129)))
    }
}
