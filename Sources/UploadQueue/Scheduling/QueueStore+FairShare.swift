import GRDB

extension QueueStore {
    /// Gives a job about to be inserted its turn (`FairShare.turn`) at its destination and priority, and moves its
    /// owner's next turn there on, in the enqueue's transaction: a handful of rows read, whatever the jobs.
    static func takeTurn(_ job: inout Job, in db: Database) throws {
        let owner = FairShare.owner(job.ownerUID)
        let anyWaiting = try Bool.fetchOne(db.cachedStatement(sql: """
            SELECT EXISTS (SELECT 1 FROM fair_turn WHERE destination = ? AND priority = ? AND runnable > 0)
            """), arguments: [job.destination, job.priority]) ?? false
        let own = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT next_key, runnable FROM fair_turn WHERE destination = ? AND priority = ? AND owner_key = ?
            """), arguments: [job.destination, job.priority, owner])
        let clocks = try Row.fetchAll(db.cachedStatement(sql: "SELECT destination, turn FROM fair_clock WHERE priority = ?"),
                                      arguments: [job.priority])
        let latest = clocks.map { $0["turn"] as Int64 }.max() ?? 0
        let ownClock: Int64? = clocks.first { $0["destination"] == job.destination }?["turn"]
        let clock = FairShare.clock(own: ownClock, latest: latest, anyWaiting: anyWaiting)
        if clock != ownClock {
            // Where the destination's turns start now (nothing waited there): claims move it on from here.
            try advanceFairClock(destination: job.destination, priority: job.priority, claimed: clock, in: db)
        }
        let taken = FairShare.turn(ownerNext: own?["next_key"] ?? 0, waiting: (own?["runnable"] as Int? ?? 0) > 0,
                                   clock: clock)
        job.fairKey = taken.turn
        try db.cachedStatement(sql: """
            INSERT INTO fair_turn (destination, priority, owner_key, next_key, runnable) VALUES (?, ?, ?, ?, 0)
            ON CONFLICT (destination, priority, owner_key) DO UPDATE SET next_key = excluded.next_key
            """).execute(arguments: [job.destination, job.priority, owner, taken.ownerNext])
    }

    /// Moves the clock of `destination` at `priority` to a job of turn `turn` just claimed there (`FairShare.clock`).
    static func advanceFairClock(destination: String, priority: Int, claimed turn: Int64, in db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO fair_clock (destination, priority, turn) VALUES (?, ?, ?)
            ON CONFLICT (destination, priority) DO UPDATE SET turn = max(turn, excluded.turn)
            """).execute(arguments: [destination, priority, turn])
    }

    /// Every owner's turns with runnable jobs: a handful of rows, whatever the jobs.
    static func fairTurns(_ db: Database) throws -> [FairShare.Turns] {
        try Row.fetchAll(db.cachedStatement(sql: """
            SELECT destination, priority, owner_key, next_key, runnable FROM fair_turn WHERE runnable > 0
            """)).map {
            FairShare.Turns(destination: $0["destination"], priority: $0["priority"], owner: $0["owner_key"],
                            next: $0["next_key"], runnable: $0["runnable"])
        }
    }
}
