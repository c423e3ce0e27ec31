import Foundation

/// A group of jobs that complete together (`enqueue --group`): its state, its tallies and, once every member is
/// uploaded, the members with their remote URLs.
///
/// A group is its owner's, as a lane is: another user's group of the same name is another group.
public struct JobGroup: Sendable, Equatable {
    /// Where a group stands.
    public enum State: String, Sendable, Equatable, CaseIterable {
        /// Members may still join (`group close` has not been asked).
        case open
        /// No member joins any more; it waits for the others to be uploaded.
        case closed
        /// A member failed for good (`failingJob` names one): a retry of it brings the group back.
        case incomplete
        /// Closed, and every member is uploaded: the completion went out, once.
        case uploaded
    }

    /// One member as the completion carries it.
    public struct Member: Sendable, Equatable, Codable {
        public var jobID: JobID
        public var originalName: String
        public var size: Int64
        public var sha256: String
        public var remoteURL: String

        enum CodingKeys: String, CodingKey {
            case jobID = "id"
            case originalName = "name"
            case size, sha256
            case remoteURL = "remote_url"
        }
    }

    public var name: String
    /// Whose group it is; nil: the queue's own user's.
    public var ownerUID: UInt32?
    public var state: State
    /// Members enqueued and not cancelled.
    public var members: Int
    /// Of those, the ones not uploaded yet.
    public var remaining: Int
    /// Of those, the ones that failed for good.
    public var failed: Int
    /// One member that failed for good (while `failed` > 0).
    public var failingJob: JobID?
    public var createdAt: Date
    public var closedAt: Date?
    /// When it was uploaded (its completion's time).
    public var completedAt: Date?
    /// When its completion was acknowledged by the reader (the library host; through the control API, the
    /// group's owner); nil: not yet.
    public var acknowledgedAt: Date?
    /// When it is `uploaded`: every member with its remote URL, in enqueue order; empty before.
    public var completion: [Member]
}

/// A group's tallies and what a member's change does to them, without I/O (`QueueStore.settleGroup` stores the
/// result in the change's transaction).
struct GroupTally: Sendable, Equatable {
    var members = 0
    var remaining = 0
    var failed = 0
    var closed = false
    /// Completed (for good: an uploaded member never goes back).
    var uploaded = false

    var state: JobGroup.State {
        if uploaded { return .uploaded }
        if failed > 0 { return .incomplete }
        return closed ? .closed : .open
    }

    /// Whether a new member may join: not once the group is closed.
    var admitsMembers: Bool { !closed && !uploaded }

    /// What happened to a member, or to the group.
    enum Change: Sendable, Equatable {
        case joined
        case uploaded
        case failedForGood
        /// Failed for good before, pending again.
        case revived
        /// It left the queue (cancelled); `failedForGood`: it had failed for good.
        case left(failedForGood: Bool)
        /// `group close`.
        case closed
    }

    /// What a change makes of the group, for the event stream and the completion.
    enum Outcome: Sendable, Equatable {
        /// Every member is uploaded and the group is closed: the completion goes out now.
        case completed
        /// A member failed for good: the group is incomplete (again).
        case incomplete
    }

    /// Applies `change`; the outcome it has, if any. A change after the completion changes nothing.
    mutating func apply(_ change: Change) -> Outcome? {
        guard !uploaded else { return nil }
        switch change {
        case .joined:
            members += 1
            remaining += 1
        case .uploaded:
            remaining = max(0, remaining - 1)
        case .failedForGood:
            failed += 1
            return .incomplete
        case .revived:
            failed = max(0, failed - 1)
        case .left(let failedForGood):
            members = max(0, members - 1)
            remaining = max(0, remaining - 1)
            if failedForGood { failed = max(0, failed - 1) }
        case .closed:
            closed = true
        }
        if closed, remaining == 0, failed == 0 {
            uploaded = true
            return .completed
        }
        return nil
    }
}
