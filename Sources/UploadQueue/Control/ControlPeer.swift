import CUploadQueueSystem
import Foundation

/// Who is at the other end of a control connection, as the kernel says (`SO_PEERCRED`), never as the client
/// claims: what the connection may do follows from it.
package struct ControlPeer: Sendable, Equatable {
    package var uid: uid_t
    package var gid: gid_t
    package var pid: pid_t
    /// Its supplementary groups (`SO_PEERGROUPS`), for the checks made as it (`DropperRules.openAsUser`). Group 0
    /// alone cannot be told from none, and is left out: a check may refuse more, never allow more.
    package var supplementaryGroups: [gid_t] = []
    /// Root and the queue's own user (the daemon's) see and steer every job; any other user (a dropper) only the
    /// jobs it handed over, through the API or the spool.
    package var isAdmin: Bool

    package init(uid: uid_t, gid: gid_t, pid: pid_t, supplementaryGroups: [gid_t] = [], queueOwner: uid_t = geteuid()) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.supplementaryGroups = supplementaryGroups
        isAdmin = uid == 0 || uid == queueOwner
    }

    /// The groups in getsockopt(SO_PEERGROUPS)'s answer: ascending, then zeros (a leading zero followed by others
    /// is group 0).
    static func groups(in answer: uploadq_peer_groups) -> [gid_t] {
        withUnsafeBytes(of: answer.groups) { raw in
            let all = Array(raw.bindMemory(to: gid_t.self))
            var groups: [gid_t] = []
            for (index, gid) in all.enumerated() {
                if gid == 0 {
                    if index == 0, all.count > 1, all[1] != 0 { groups.append(0) }
                    if index > 0 { break }
                    continue
                }
                groups.append(gid)
            }
            return groups
        }
    }

    /// Whether this peer may see and steer a job whose owner is `owner` (nil: the queue's own user's job).
    package func mayReach(owner: UInt32?) -> Bool {
        isAdmin || owner == uid
    }
}
