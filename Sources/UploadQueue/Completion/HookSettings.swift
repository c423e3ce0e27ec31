extension Configuration {
    /// `[hooks]`: programs run when a job is uploaded or fails for good, each as a durable outbox consumer (recorded
    /// with the state change, run at least once, retried on the `[retry]` schedule).
    ///
    /// A hook gets the job as JSON on its standard input, no shell, a scrubbed environment (`PATH`, `HOME`, `LANG`,
    /// `pass_env`, and `UPLOADQ_JOB_ID`, `UPLOADQ_EVENT`, `UPLOADQ_HOOK_ATTEMPT`), at most `timeout` to finish, and
    /// no descriptor of the daemon. Its output is kept up to 64 KiB, the rest read and dropped, and logged escaped.
    /// What a hook does never changes its job's state.
    public struct HookSettings: Sendable, Equatable {
        /// `on_uploaded`: the program and its arguments, run once a job is uploaded; nil: none.
        public var onUploaded: [String]?
        /// `on_failed`: run once a job fails for good (a permanent failure, not one that is retried).
        public var onFailed: [String]?
        /// `on_group_uploaded`: run once a closed group's members are all uploaded, with the group (its members'
        /// remote URLs) as JSON on its standard input.
        public var onGroupUploaded: [String]?
        /// `timeout`: a hook still running then is killed (its process group) and tried again later.
        public var timeout: Duration = .seconds(30)
        /// `pass_env`: the daemon's variables a hook also gets.
        public var passEnvironment: [String] = []
        /// `max_attempts`: after this many failed runs a hook is failed for good (`uploadq retry --hooks ID` runs it
        /// again); 0 tries for ever.
        public var maximumAttempts = 10

        /// No hooks.
        public init() {}

        /// The command of the hook for `event`, if one is configured.
        public func command(for event: HookEvent) -> [String]? {
            switch event {
            case .uploaded: onUploaded
            case .failed: onFailed
            case .groupUploaded: onGroupUploaded
            }
        }
    }
}

extension Configuration {
    /// What a hook runs after.
    public enum HookEvent: String, Sendable, Equatable, CaseIterable {
        /// The job was uploaded (`on_uploaded`).
        case uploaded
        /// The job failed for good (`on_failed`).
        case failed
        /// A closed group's members are all uploaded (`on_group_uploaded`).
        case groupUploaded = "group_uploaded"

        /// The config key of its hook.
        public var key: String { "on_\(rawValue)" }
    }
}
