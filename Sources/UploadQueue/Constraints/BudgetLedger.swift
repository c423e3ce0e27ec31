import Foundation

/// The bytes metered links carried in the current budget period, and when the period ends: persisted (a restart
/// does not reset it) and moved along with wall-clock steps (a clock set forward does not reset it either).
///
/// A pure value, tested without clocks:
///
/// | event                                          | what the ledger does                                             |
/// |------------------------------------------------|------------------------------------------------------------------|
/// | the clock reaches `resetsAt`                   | a new period begins (the one that holds now), `used` is 0        |
/// | the clock shows a time inside the period       | the ledger is anchored: the clock and the period agree           |
/// | the clock shows a time before the period       | nothing: a clock behind (a device without RTC at boot) never resets it |
/// | a wall-clock step while anchored               | the period moves by the step: the time left to the reset stays   |
/// | a step while not anchored                      | nothing: the period came from a clock that may have been the right one |
///
/// A budget configured anew (another size or period) keeps what was used and takes the period that holds now.
struct BudgetLedger: Sendable, Equatable {
    var periodStart: Date
    var resetsAt: Date
    /// Bytes counted in this period.
    var used: Int64
    /// Whether this process saw the wall clock inside the period (only then is a step a step of that clock).
    var anchored: Bool

    /// A ledger for the period that holds `now`, nothing used.
    static func opening(_ budget: MeteredBudget, now: Date, timeZone: TimeZone) -> BudgetLedger {
        let period = budget.period(containing: now, timeZone: timeZone)
        return BudgetLedger(periodStart: period.start, resetsAt: period.end, used: 0, anchored: true)
    }

    /// A stored ledger as this process takes it over: not anchored; with the period of `budget` that holds now when
    /// the stored one is not one of its periods (the budget was configured anew).
    static func resumed(periodStart: Date, resetsAt: Date, used: Int64, budget: MeteredBudget, now: Date,
                        timeZone: TimeZone) -> BudgetLedger {
        let expected = budget.period(containing: periodStart, timeZone: timeZone)
        guard expected.start == periodStart, expected.end == resetsAt else {
            var ledger = opening(budget, now: now, timeZone: timeZone)
            ledger.used = used
            return ledger
        }
        return BudgetLedger(periodStart: periodStart, resetsAt: resetsAt, used: used, anchored: false)
    }

    /// Follows the clock to `now`; returns true when a new period began.
    mutating func follow(now: Date, budget: MeteredBudget, timeZone: TimeZone) -> Bool {
        if now >= resetsAt {
            self = Self.opening(budget, now: now, timeZone: timeZone)
            return true
        }
        if now >= periodStart { anchored = true }
        return false
    }

    /// The wall clock stepped by `seconds` (positive forwards).
    mutating func shift(by seconds: TimeInterval) {
        guard anchored else { return }
        periodStart.addTimeInterval(seconds)
        resetsAt.addTimeInterval(seconds)
    }

    /// Counts bytes sent over a metered link.
    mutating func add(_ bytes: Int64) {
        used += max(0, bytes)
    }

    /// Whether `budget` is spent, with `unbooked` bytes sent but not counted yet.
    func isSpent(_ budget: MeteredBudget, unbooked: Int64 = 0) -> Bool {
        used + unbooked >= budget.bytes
    }
}
