import Foundation

/// What one job waits for in another: the lane's previous job, or a job it was enqueued `after`.
///
/// Spelled as in `job_prerequisite.kind` (migration v15 wrote none of these names: `MigrationTests` checks them).
enum PrerequisiteKind: String, Sendable, CaseIterable {
    case lane
    case after
}

/// The order rules, without I/O: what becomes of a job that waits for another when that other one changes.
///
/// A waiting job's edge (`job_prerequisite`) to the job it waits for is met and goes, stays, or passes a verdict on
/// the waiting job. The store applies the verdicts in the transaction of the change (`QueueStore.settleOrder`).
enum OrderRule {
    /// What happened to the job waited for.
    enum Change: Sendable, Equatable {
        /// The destination proved it has the bytes.
        case uploaded
        /// It failed for good (only a person makes it go again).
        case failedForGood
        /// It was cancelled: it left the queue.
        case cancelled
        /// It was failed for good and is pending again (`uploadq retry`, or its own prerequisite came back).
        case revived
        /// A person skipped it in its lane (`uploadq skip`): it stays failed, and the lane goes on.
        case skipped
    }

    /// What the store does with one edge.
    enum Verdict: Sendable, Equatable {
        /// Nothing changes: the waiting job goes on waiting.
        case keep
        /// The edge is met and goes.
        case met
        /// The edge goes, and the waiting job waits instead for what the job it waited for waited for in its
        /// lane: a lane keeps its order past a job that left it.
        case passOn
        /// The waiting job fails for good with this code (`prerequisite-failed`, `prerequisite-cancelled`); the
        /// edge stays when `keepEdge` (a retry of the one waited for brings it back).
        case fail(code: String, keepEdge: Bool)
        /// The waiting job, failed because of this one, is pending again (and waits for it anew).
        case revive
    }

    /// The verdict on an edge of `kind` when the job waited for changes so. `mode` is the waiting job's
    /// `after_mode`; `lanePolicy` the waited-for job's lane's `on_failure`.
    static func verdict(kind: PrerequisiteKind, change: Change, mode: Job.AfterMode?,
                        lanePolicy: LaneFailurePolicy) -> Verdict {
        switch kind {
        case .lane:
            switch change {
            case .uploaded: return .met
            case .failedForGood: return lanePolicy == .skip ? .passOn : .keep
            case .cancelled, .skipped: return .passOn
            case .revived: return .keep
            }
        case .after:
            if mode == .settled {
                switch change {
                case .uploaded, .failedForGood, .cancelled: return .met
                case .revived, .skipped: return .keep
                }
            }
            switch change {
            case .uploaded: return .met
            case .failedForGood: return .fail(code: "prerequisite-failed", keepEdge: true)
            case .cancelled: return .fail(code: "prerequisite-cancelled", keepEdge: false)
            case .revived: return .revive
            case .skipped: return .keep
            }
        }
    }

    /// The change a state change of a job is, for the jobs that wait for it; nil when it is none of theirs (a
    /// claim, a transient failure, a wait).
    static func change(from before: Job, to after: Job?) -> Change? {
        guard let after else { return .cancelled }
        if after.state == .uploaded, before.state != .uploaded { return .uploaded }
        if after.state == .failed, after.permanent, !(before.state == .failed && before.permanent) { return .failedForGood }
        if before.state == .failed, before.permanent, after.state == .pending { return .revived }
        return nil
    }

    /// A group's name as a user may give it: a lane's, without `/` (it is one segment of the control API's paths).
    static func isValidGroupName(_ name: String) -> Bool {
        isValidLaneName(name) && !name.contains("/")
    }

    /// A lane's name as a user may give it: 1 to 128 visible characters, no control characters.
    static func isValidLaneName(_ name: String) -> Bool {
        (1...128).contains(name.utf8.count) && !name.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }
}
