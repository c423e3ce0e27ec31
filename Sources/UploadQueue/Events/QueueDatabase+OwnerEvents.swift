import GRDB

extension QueueDatabase {
    /// Migration v21: each dropper's events numbered in a durable sequence of its own (`event.owner_seq`), which
    /// its reads and its `since` use: the global sequence counted every user's events, so the gaps in a dropper's
    /// numbers told it how much others uploaded.
    /// - `owner_event_seq`: per owner, the last number given out; the row of owner -1 holds where every owner's
    ///   sequence starts (the last global number when this migration ran), so a `since` a dropper kept from the
    ///   global numbers still lies within its own.
    /// - `event_owner_seq`, the trigger that numbers each event of an owner as it is written, in its transaction.
    /// - The events from before keep their global number as their owner's.
    ///
    /// Frozen: plain SQL, no application types.
    static func migrateToOwnerEvents(_ db: Database) throws {
        try db.execute(sql: """
            ALTER TABLE event ADD COLUMN owner_seq INTEGER;
            UPDATE event SET owner_seq = seq WHERE owner_uid IS NOT NULL;
            CREATE TABLE owner_event_seq (
                owner_uid INTEGER NOT NULL PRIMARY KEY,
                last INTEGER NOT NULL
            ) WITHOUT ROWID;
            INSERT INTO owner_event_seq (owner_uid, last)
                VALUES (-1, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'event'), 0));
            INSERT INTO owner_event_seq (owner_uid, last)
                SELECT DISTINCT owner_uid, (SELECT last FROM owner_event_seq WHERE owner_uid = -1) FROM event
                WHERE owner_uid IS NOT NULL;
            DROP INDEX event_owner;
            CREATE INDEX event_owner_seq ON event(owner_uid, owner_seq) WHERE owner_uid IS NOT NULL;
            CREATE TRIGGER event_owner_seq AFTER INSERT ON event WHEN NEW.owner_uid IS NOT NULL BEGIN
                INSERT INTO owner_event_seq (owner_uid, last)
                    VALUES (NEW.owner_uid, (SELECT last FROM owner_event_seq WHERE owner_uid = -1) + 1)
                    ON CONFLICT (owner_uid) DO UPDATE SET last = last + 1;
                UPDATE event SET owner_seq = (SELECT last FROM owner_event_seq WHERE owner_uid = NEW.owner_uid)
                    WHERE seq = NEW.seq;
            END;
            """)
    }
}
