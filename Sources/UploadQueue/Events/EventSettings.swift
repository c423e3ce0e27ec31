extension Configuration {
    /// `[events]`: how far a follower of the event stream (`GET /v1/events/stream`, `uploadq events --follow`) may let
    /// its live lines pile up. The stream is served on the control API's socket (`[api]`).
    public struct EventSettings: Sendable, Equatable {
        /// `reader_buffer`: the bytes of live lines a follower may let pile up before it is dropped.
        public var readerBuffer: Int64 = 256 << 10
        /// The keys of the event stream's own socket this config still sets (`socket`, `group`): no longer used, said
        /// at start.
        public var retiredKeys: [String] = []

        /// The default: 256 KiB per follower.
        public init() {}
    }
}
