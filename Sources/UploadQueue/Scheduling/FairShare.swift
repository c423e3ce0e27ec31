/// Fair share of the upload slots between owners, within a priority: start-time fair queuing with one turn a job.
///
/// Each job takes a turn when it is enqueued, among the jobs of its destination and priority: its owner's next turn
/// there, or the clock there (the turn of the last job claimed) when that is later or the owner has no job waiting
/// there (it was away: no credit saved up, and none of a backlog it cancelled). Claims go by priority, then turn,
/// then age, so owners take turns job by job: bob's one photo, dropped behind alice's 300, goes within the next
/// round of owners. A destination with nothing waiting starts from the latest clock of its priority, so one that
/// was idle does not take every slot from the others until it catches up. The turn is stored in the claim indexes:
/// a claim stays one seek per destination whatever the number of jobs or owners.
///
/// The queue's own user and root are one owner; each dropper is one. A lane's and `after`'s order is kept by the
/// order (`blocked_by`), whatever the turns: a job takes its turn at enqueue and keeps it while it waits.
///
/// | owner's next | owner waiting there | clock there | turn taken | owner's next after |
/// |---|---|---|---|---|
/// | 0 (new owner) | no | 7 | 7 | 8 |
/// | 12 (a backlog) | yes | 7 | 12 | 13 |
/// | 5 (behind) | yes | 7 | 7 | 8 |
/// | 9,000 (cancelled its backlog) | no | 7 | 7 | 8 |
enum FairShare {
    /// Who a job's turn belongs to: a dropper's uid, or `queueOwner` for the queue's own user's jobs (no owner
    /// recorded) and root's.
    static func owner(_ uid: UInt32?) -> Int64 {
        guard let uid, uid != 0 else { return queueOwner }
        return Int64(uid)
    }

    /// The owner key of the queue's own user and root.
    static let queueOwner: Int64 = -1

    /// The turn a job takes, and its owner's next turn after it. `waiting`: the owner has runnable jobs there.
    static func turn(ownerNext: Int64, waiting: Bool, clock: Int64) -> (turn: Int64, ownerNext: Int64) {
        let turn = waiting ? max(ownerNext, clock) : clock
        return (turn, turn + 1)
    }

    /// The clock a job's turn starts from at a destination: its own, or the latest of the priority's when nothing
    /// waits there.
    static func clock(own: Int64?, latest: Int64, anyWaiting: Bool) -> Int64 {
        anyWaiting ? own ?? latest : max(own ?? latest, latest)
    }

    /// The clock after a job of turn `claimed` was claimed: it never goes back.
    static func clock(_ clock: Int64, afterClaiming claimed: Int64) -> Int64 { max(clock, claimed) }

    /// One owner's turns at one destination and priority: the next it takes, and how many of its jobs are runnable.
    struct Turns: Sendable, Equatable {
        var destination: String
        var priority: Int
        var owner: Int64
        var next: Int64
        var runnable: Int
    }

    /// Whether a runnable job of `owner`, turn `turn`, at `destination` and `priority`, waits for other owners'
    /// turns: another owner has a runnable job there of an earlier turn. An owner's runnable jobs hold distinct turns
    /// below its next, so its earliest is at most `next - runnable`; a job is said to wait only when that is sure.
    static func waitsForTurn(turn: Int64, owner: Int64, destination: String, priority: Int,
                             among turns: [Turns]) -> Bool {
        turns.contains { other in
            other.destination == destination && other.priority == priority && other.owner != owner
                && other.runnable > 0 && other.next - Int64(other.runnable) < turn
        }
    }

    /// How many runnable jobs wait for other owners' turns (an estimate for `status`: an owner's runnable jobs are
    /// taken to hold the latest turns below its next).
    static func waitingForTurns(among turns: [Turns]) -> Int {
        var waiting = 0
        for own in turns where own.runnable > 0 {
            // The earliest turn another owner surely has runnable at this destination and priority.
            let earliest = turns.filter {
                $0.destination == own.destination && $0.priority == own.priority && $0.owner != own.owner
                    && $0.runnable > 0
            }.map { $0.next - Int64($0.runnable) }.min()
            guard let earliest else { continue }
            // Own turns run from next - runnable to next - 1; those after `earliest` wait.
            let after = own.next - 1 - earliest
            waiting += Int(max(0, min(Int64(own.runnable), after)))
        }
        return waiting
    }
}
