extension Configuration {
    /// `[lanes]`: what a lane does when a job in it fails for good.
    public struct Lanes: Sendable, Equatable {
        /// `on_failure`: every lane's choice, unless `skip` names it.
        public var onFailure: LaneFailure = .hold
        /// `skip`: the lanes that skip a job failed for good whatever `onFailure` says.
        public var skip: Set<String> = []

        public init() {}

        /// What `lane` does when a job in it fails for good.
        public func policy(for lane: String) -> LaneFailure {
            skip.contains(lane) ? .skip : onFailure
        }
    }

    /// What a lane does when a job in it fails for good.
    public enum LaneFailure: String, Sendable, CaseIterable {
        /// The lane waits until the job is retried, skipped (`uploadq skip`) or cancelled: nothing overtakes it.
        case hold
        /// The job stays failed and visible, and the lane goes on with the next one.
        case skip
    }
}
