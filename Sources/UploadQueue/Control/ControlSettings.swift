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
        /// `max_connections`: connections open at once, in all.
        public var maxConnections = 256
        /// `max_connections_per_user`: connections one dropper may have open at once.
        public var maxConnectionsPerUser = 32
        /// `admin_connections`: of `maxConnections`, how many only the queue's own user and root may take, so a
        /// flood of droppers' connections never keeps the admin's `status` from being answered.
        public var adminConnections = 16
        /// `request_timeout`: how long a request may take to arrive whole (head and body), from its first byte.
        public var requestTimeout: Duration = .seconds(10)
        /// `idle_timeout`: how long a connection may wait, with no request under way, before it is closed.
        public var idleTimeout: Duration = .seconds(60)

        /// The defaults: `state_dir/api.sock`, 0600; 256 connections, 32 a dropper, 16 kept for the admin; 10 s to
        /// send a request, 60 s idle.
        public init() {}
    }
}
