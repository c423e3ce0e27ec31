extension Configuration {
    /// `[api]`: where the daemon serves its control API, and who may connect.
    ///
    /// Who may connect is the socket's mode and group; what a connection may do is decided by its peer's credentials
    /// (`ControlPeer`): the queue's own user and root steer every job, anyone else only its own.
    public struct ControlSettings: Sendable, Equatable {
        /// `socket`: the Unix socket's path; nil: `state_dir/api.sock`.
        public var socket: String?
        /// `group`: the socket is made 0660 for this group (its members may enqueue and follow their own jobs); nil:
        /// 0600, the daemon's user alone. The folder holding it must let the group through (the state directory does
        /// not; the unit's `/run/uploadq` does).
        public var group: String?

        /// The defaults: `state_dir/api.sock`, 0600.
        public init() {}
    }
}
