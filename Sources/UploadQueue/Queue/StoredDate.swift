import Foundation
import GRDB

/// A date as the queue stores it: the text GRDB writes for a `Date` (`yyyy-MM-dd HH:mm:ss.SSS`, UTC, to the
/// nearest millisecond), made without a `DateFormatter`.
///
/// Bound on the statements every job runs (claims, transfer ends): ICU's formatter cost more there than the
/// SQL around it. A test checks the text against GRDB's own for many dates, so the two stay interchangeable: rows
/// written either way compare and sort alike.
struct StoredDate: DatabaseValueConvertible, Equatable, Sendable {
    let date: Date

    init(_ date: Date) {
        self.date = date
    }

    var databaseValue: DatabaseValue { Self.text(date).databaseValue }

    static func fromDatabaseValue(_ dbValue: DatabaseValue) -> StoredDate? {
        Date.fromDatabaseValue(dbValue).map(StoredDate.init)
    }

    /// The millisecond since 1970 the queue keeps for `date`: as Foundation hands a date to ICU, milliseconds as a
    /// double, rounded half up.
    static func millisecond(_ date: Date) -> Double {
        ((date.timeIntervalSinceReferenceDate + 978_307_200) * 1000 + 0.5).rounded(.down)
    }

    /// The stored text of `date`.
    static func text(_ date: Date) -> String {
        // Before 1970 (where ICU's calendar and rounding differ from these few lines) and from the year 10000
        // on, the formatter itself: no date the queue writes is there.
        let rounded = millisecond(date)
        guard rounded.isFinite, rounded >= 0, rounded < 253_402_300_800_000 else {
            return String.fromDatabaseValue(date.databaseValue) ?? ""
        }
        let milliseconds = Int64(rounded)
        let (day, time) = milliseconds.quotientAndRemainder(dividingBy: 86_400_000)
        let (year, month, dayOfMonth) = civil(daysSince1970: day)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(23)
        func digits(_ value: Int64, _ count: Int) {
            var divisor: Int64 = 1
            for _ in 1..<count { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                bytes.append(UInt8(ascii: "0") + UInt8((rest / divisor) % 10))
                rest %= divisor
                divisor /= 10
            }
        }
        digits(year, 4)
        bytes.append(UInt8(ascii: "-"))
        digits(month, 2)
        bytes.append(UInt8(ascii: "-"))
        digits(dayOfMonth, 2)
        bytes.append(UInt8(ascii: " "))
        digits(time / 3_600_000, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(time / 60_000 % 60, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(time / 1000 % 60, 2)
        bytes.append(UInt8(ascii: "."))
        digits(time % 1000, 3)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's `civil_from_days`).
    private static func civil(daysSince1970 days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
