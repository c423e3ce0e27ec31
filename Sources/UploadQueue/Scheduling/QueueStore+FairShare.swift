import GRDB

extension QueueStore {
    /// Gives a job about to be inserted its turn (`FairShare.turn`), and moves its owner's next turn on, in the
    /// enqueue's transaction.
    static func takeTurn(_ job: inout Job, in db: Database) throws {
        let owner = FairShare.owner(job.ownerUID)
        let clock = try Int64.fetchOne(db.cachedStatement(sql: "SELECT turn FROM fair_clock WHERE priority = ?"),
                                       arguments: [job.priority]) ?? 0
        let next = try Int64.fetchOne(db.cachedStatement(sql: """
            SELECT next_key FROM fair_turn WHERE owner_key = ? AND priority = ?
            """), arguments: [owner, job.priority]) ?? 0
        let taken = FairShare.turn(ownerNext: next, clock: clock)
        job.fairKey = taken.turn
        try db.cachedStatement(sql: """
            INSERT INTO fair_turn (owner_key, priority, next_key, runnable) VALUES (?, ?, ?, 0)
            ON CONFLICT (owner_key, priority) DO UPDATE SET next_key = excluded.next_key
            """).execute(arguments: [owner, job.priority, taken.ownerNext])
    }

    /// Moves the clock of `priority` to a job of turn `turn` just claimed (`FairShare.clock`).
    static func advanceFairClock(priority: Int, claimed turn: Int64, in db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO fair_clock (priority, turn) VALUES (?, ?)
            ON CONFLICT (priority) DO UPDATE SET turn = max(turn, excluded.turn)
            """).execute(arguments: [priority, turn])
    }

    /// Every owner's turns with runnable jobs: a handful of rows, whatever the jobs.
    static func fairTurns(_ db: Database) throws -> [FairShare.Turns] {
        try Row.fetchAll(db.cachedStatement(sql: """
            SELECT owner_key, priority, next_key, runnable FROM fair_turn WHERE runnable > 0
            """)).map {
            FairShare.Turns(owner: $0["owner_key"], priority: $0["priority"], next: $0["next_key"],
                            runnable: $0["runnable"])
        }
    }
}
