import CUploadQueueSystem
import Foundation

/// Who is at the other end of a control connection, as the kernel says (`SO_PEERCRED`), never as the client
/// claims: what the connection may do follows from it.
package struct ControlPeer: Sendable, Equatable {
    package var uid: uid_t
    package var gid: gid_t
    package var pid: pid_t
    /// Its supplementary groups (`SO_PEERGROUPS`), for the checks made as it (`DropperRules.open(_:as:)`).
    package var supplementaryGroups: [gid_t] = []
    /// Which groups not listed it may be in after all: a check made as it grants through such a group only what
    /// being in it and not being in it would both grant (membership can shut out as well as let in).
    package var groupsUncertain: GroupUncertainty = .none

    /// Which of a peer's groups the kernel's answer leaves unknown.
    package enum GroupUncertainty: Int32, Sendable, Equatable {
        /// It listed them all.
        case none = 0
        /// Group 0 alone cannot be told from none (`SO_PEERGROUPS` answers zeros for both).
        case groupZero = 1
        /// It has more than the answer holds (`ERANGE`), or none came: any group.
        case any = 2
    }
    /// Root and the queue's own user (the daemon's) see and steer every job; any other user (a dropper) only the
    /// jobs it handed over, through the API or the spool.
    package var isAdmin: Bool

    package init(uid: uid_t, gid: gid_t, pid: pid_t, supplementaryGroups: [gid_t] = [],
                 groupsUncertain: GroupUncertainty = .none, queueOwner: uid_t = geteuid()) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.supplementaryGroups = supplementaryGroups
        self.groupsUncertain = groupsUncertain
        isAdmin = uid == 0 || uid == queueOwner
    }

    /// The groups in getsockopt(SO_PEERGROUPS)'s answer: ascending, then zeros (a leading zero followed by others
    /// is group 0; zeros alone are no group, or group 0 alone, which cannot be told apart).
    static func groups(in answer: uploadq_peer_groups) -> (groups: [gid_t], uncertain: GroupUncertainty) {
        withUnsafeBytes(of: answer.groups) { raw in
            let all = Array(raw.bindMemory(to: gid_t.self))
            guard all.contains(where: { $0 != 0 }) else { return ([], .groupZero) }
            var groups: [gid_t] = []
            for (index, gid) in all.enumerated() {
                if gid == 0 {
                    if index == 0 {
                        groups.append(0)
                        continue
                    }
                    break
                }
                groups.append(gid)
            }
            return (groups, .none)
        }
    }

    /// Whether this peer may see and steer a job whose owner is `owner` (nil: the queue's own user's job).
    package func mayReach(owner: UInt32?) -> Bool {
        isAdmin || owner == uid
    }
}
