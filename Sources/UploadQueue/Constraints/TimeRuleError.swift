extension Configuration {
    /// An entry of an upload window or bandwidth timetable list that cannot be read, and why.
    public struct TimeRuleError: Error, Sendable, Equatable {
        /// The entry as written.
        public let entry: String
        /// What is wrong with it.
        public let reason: String
    }
}
