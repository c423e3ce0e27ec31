import Foundation

/// Who is at the other end of a control connection, as the kernel says (`SO_PEERCRED`), never as the client
/// claims: what the connection may do follows from it.
package struct ControlPeer: Sendable, Equatable {
    package var uid: uid_t
    package var gid: gid_t
    package var pid: pid_t
    /// Root and the queue's own user (the daemon's) see and steer every job; any other user (a dropper) only the
    /// jobs it handed over, through the API or the spool.
    package var isAdmin: Bool

    package init(uid: uid_t, gid: gid_t, pid: pid_t, queueOwner: uid_t = geteuid()) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        isAdmin = uid == 0 || uid == queueOwner
    }

    /// Whether this peer may see and steer a job whose owner is `owner` (nil: the queue's own user's job).
    package func mayReach(owner: UInt32?) -> Bool {
        isAdmin || owner == uid
    }
}
