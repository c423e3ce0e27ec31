import Foundation
import GRDB

extension QueueStore {
    /// The stored budget ledger, as this process takes it over (see `BudgetLedger.resumed`); a fresh one when none
    /// is stored.
    func budgetLedger(_ budget: MeteredBudget, now: Date, timeZone: TimeZone) throws -> BudgetLedger {
        try writer.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT period_start, resets_at, used FROM metered_budget"),
                  let start = (row["period_start"] as StoredDate?)?.date,
                  let end = (row["resets_at"] as StoredDate?)?.date
            else { return BudgetLedger.opening(budget, now: now, timeZone: timeZone) }
            return BudgetLedger.resumed(periodStart: start, resetsAt: end, used: row["used"], budget: budget, now: now,
                                        timeZone: timeZone)
        }
    }

    /// Stores the ledger (one row).
    static func recordBudgetLedger(_ ledger: BudgetLedger, in db: Database) throws {
        try db.execute(sql: """
            INSERT INTO metered_budget (id, period_start, resets_at, used) VALUES (1, ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET period_start = excluded.period_start, resets_at = excluded.resets_at,
            used = excluded.used
            """, arguments: [StoredDate(ledger.periodStart), StoredDate(ledger.resetsAt), ledger.used])
    }

    /// The stored ledger's period and use, for `status` (nil when none is stored).
    func storedBudgetUse() throws -> (used: Int64, resetsAt: Date)? {
        try writer.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT resets_at, used FROM metered_budget"),
                  let end = (row["resets_at"] as StoredDate?)?.date else { return nil }
            return (row["used"], end)
        }
    }
}
