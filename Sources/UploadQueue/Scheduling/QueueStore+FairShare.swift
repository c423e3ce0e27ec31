import GRDB

extension QueueStore {
    /// Gives a job about to be inserted its turn (`FairShare.turn`) at its destination and priority, in the
    /// enqueue's transaction: one read of a handful of rows, whatever the jobs. The insert's trigger moves the owner's
    /// next turn there on (migration v19).
    static func takeTurn(_ job: inout Job, in db: Database) throws {
        let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT (SELECT next_key FROM fair_turn WHERE destination = ?1 AND priority = ?2 AND owner_key = ?3),
                   (SELECT pending FROM fair_turn WHERE destination = ?1 AND priority = ?2 AND owner_key = ?3),
                   EXISTS (SELECT 1 FROM fair_turn INDEXED BY fair_turn_pending
                           WHERE destination = ?1 AND priority = ?2 AND pending > 0),
                   (SELECT turn FROM fair_clock WHERE destination = ?1 AND priority = ?2),
                   (SELECT max(turn) FROM fair_clock WHERE priority = ?2)
            """), arguments: [job.destination, job.priority, FairShare.owner(job.ownerUID)])
        let (next, pending, anyWaiting): (Int64?, Int?, Bool) = (row?[0], row?[1], row?[2] ?? false)
        let ownClock: Int64? = row?[3]
        let clock = FairShare.clock(own: ownClock, latest: row?[4] ?? 0, anyWaiting: anyWaiting)
        if clock != ownClock {
            // Where the destination's turns start now (nothing waited there): claims move it on from here.
            try advanceFairClock(destination: job.destination, priority: job.priority, claimed: clock, in: db)
        }
        job.fairKey = FairShare.turn(ownerNext: next ?? 0, waiting: (pending ?? 0) > 0, clock: clock).turn
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
