import Foundation

/// Local wall-clock time as minutes of the week (Monday 00:00 is 0), in one time zone: what upload windows and
/// bandwidth timetables are written in.
///
/// A time is turned into its local weekday and minute, so a window follows the wall clock through daylight saving
/// time: "22:00-06:00" is open from 22:00 to 06:00 as the clock on the wall shows them, whether that night has 7, 8
/// or 9 hours. A wall time that the spring-forward gap skips begins at the end of the gap; one the fall-back hour
/// repeats belongs to both of its instants.
struct LocalWeek: Sendable, Equatable {
    /// Minutes in a week.
    static let minutes = 7 * 24 * 60
    let timeZone: TimeZone

    private var calendar: Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        return calendar
    }

    /// The minute of the week `date` shows on the local wall clock.
    func minuteOfWeek(_ date: Date) -> Int {
        let parts = calendar.dateComponents([.weekday, .hour, .minute], from: date)
        // Calendar's weekday: 1 is Sunday. Ours: 0 is Monday.
        let day = ((parts.weekday ?? 2) + 5) % 7
        return day * 24 * 60 + (parts.hour ?? 0) * 60 + (parts.minute ?? 0)
    }

    /// The instants after `date` and within `days` days at which a rule written as minutes of the week in
    /// `marks` (or the daylight saving rules) may change its answer: each mark's wall time on each of those
    /// days, and every daylight saving transition. A caller keeps the first one where its answer does change.
    func candidates(after date: Date, marks: Set<Int>, days: Int = 8) -> [Date] {
        let calendar = calendar
        let today = calendar.startOfDay(for: date)
        var found: [Date] = []
        for offset in 0...days {
            guard let day = calendar.date(byAdding: .day, value: offset, to: today) else { continue }
            let weekday = ((calendar.component(.weekday, from: day)) + 5) % 7
            for mark in marks.map({ $0 % Self.minutes }) where mark / (24 * 60) == weekday {
                var parts = calendar.dateComponents([.year, .month, .day], from: day)
                parts.hour = mark % (24 * 60) / 60
                parts.minute = mark % 60
                guard let instant = calendar.date(from: parts) else { continue }
                // A wall time the fall-back hour repeats has a second instant, which `date(from:)` does not give.
                for candidate in [instant] + Self.repeatedShifts(near: instant, in: timeZone).map(instant.addingTimeInterval)
                where candidate > date {
                    found.append(candidate)
                }
            }
        }
        var transition = timeZone.nextDaylightSavingTimeTransition(after: date)
        let horizon = date.addingTimeInterval(Double(days + 1) * 86_400)
        while let instant = transition, instant < horizon {
            found.append(instant)
            transition = timeZone.nextDaylightSavingTimeTransition(after: instant)
        }
        return found.sorted()
    }

    /// How much later a wall time near `instant` may come round again: the clocks' step back, when one is within
    /// a day of it (an hour in most zones, half an hour on Lord Howe Island).
    private static func repeatedShifts(near instant: Date, in timeZone: TimeZone) -> [TimeInterval] {
        guard let transition = timeZone.nextDaylightSavingTimeTransition(after: instant.addingTimeInterval(-86_400)),
              transition < instant.addingTimeInterval(86_400) else { return [] }
        let back = timeZone.daylightSavingTimeOffset(for: transition.addingTimeInterval(-1))
            - timeZone.daylightSavingTimeOffset(for: transition.addingTimeInterval(1))
        return back > 0 ? [back] : []
    }

    /// The first instant after `date` (within eight days) at which `answer` differs from its answer at `date`.
    func nextChange<Answer: Equatable>(after date: Date, marks: Set<Int>, _ answer: (Date) -> Answer) -> Date? {
        let now = answer(date)
        return candidates(after: date, marks: marks).first { answer($0) != now }
    }

    /// The days' names as the config writes them, Monday (0) first.
    static let dayNames = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]

    /// Day names as windows and timetables write them: `mon` … `sun` (or in full), 0 for Monday.
    static func weekday(_ text: Substring) -> Int? {
        let lowered = text.lowercased()
        guard lowered.count >= 3 else { return nil }
        let full = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
        return dayNames.firstIndex(of: lowered) ?? full.firstIndex(of: lowered)
    }

    /// `HH:MM` (00:00 to 24:00) as minutes of the day.
    static func minuteOfDay(_ text: Substring) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 2, parts[1].count == 2,
              parts.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
              let hour = Int(parts[0]), let minute = Int(parts[1]), minute < 60,
              hour < 24 || (hour == 24 && minute == 0) else { return nil }
        return hour * 60 + minute
    }
}
