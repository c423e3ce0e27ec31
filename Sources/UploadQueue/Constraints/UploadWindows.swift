import Foundation

extension Configuration {
    /// `windows = ["22:00-06:00", "sat 00:00-24:00"]`: when uploads may run, in local wall-clock time.
    ///
    /// A window is `[DAYS ]HH:MM-HH:MM`. DAYS is a day (`sat`), a range (`mon-fri`) or a list (`sat,sun`); without it
    /// the window is daily. A window whose end is not after its start runs past midnight into the next day
    /// (`fri 22:00-06:00` ends on Saturday morning); `00:00-24:00` is the whole day. Outside every window jobs wait
    /// as `outside-window`, and running transfers stop after their current chunk. No windows: always open.
    public struct UploadWindows: Sendable, Equatable, CustomStringConvertible {
        /// The windows as written, for messages and `status`.
        public let texts: [String]
        /// Open spans as minutes of the week, start inclusive, end exclusive; an end past the week's last minute
        /// wraps to Monday.
        private let spans: [Range<Int>]

        /// Parses the windows; throws `TimeRuleError`, naming the entry, when one cannot be read.
        public init(_ texts: [String]) throws(TimeRuleError) {
            var spans: [Range<Int>] = []
            for text in texts {
                spans += try Self.spans(of: text)
            }
            self.texts = texts
            self.spans = spans
        }

        /// No windows: uploads may always run.
        public static let always = UploadWindows(texts: [], spans: [])

        private init(texts: [String], spans: [Range<Int>]) {
            self.texts = texts
            self.spans = spans
        }

        /// Whether any window is configured (no windows: uploads may always run).
        public var isEmpty: Bool { spans.isEmpty }

        /// Whether `date` lies in a window, on the wall clock of `week`'s time zone.
        func isOpen(at date: Date, in week: LocalWeek) -> Bool {
            guard !spans.isEmpty else { return true }
            let minute = week.minuteOfWeek(date)
            return spans.contains { $0.contains(minute) || $0.contains(minute + LocalWeek.minutes) }
        }

        /// When the answer of `isOpen` next changes after `date` (nil: not within a week, or no windows).
        func nextChange(after date: Date, in week: LocalWeek) -> Date? {
            guard !spans.isEmpty else { return nil }
            let marks = Set(spans.flatMap { [$0.lowerBound, $0.upperBound] })
            return week.nextChange(after: date, marks: marks) { isOpen(at: $0, in: week) }
        }

        /// The windows as written, separated by commas.
        public var description: String { texts.joined(separator: ", ") }

        private static func spans(of text: String) throws(TimeRuleError) -> [Range<Int>] {
            let fail = { (reason: String) in TimeRuleError(entry: text, reason: reason) }
            let words = text.split(separator: " ", omittingEmptySubsequences: true)
            guard words.count == 1 || words.count == 2 else {
                throw fail("write it as \"HH:MM-HH:MM\" or \"DAYS HH:MM-HH:MM\" (DAYS: sat, mon-fri or sat,sun)")
            }
            var days = Array(0..<7)
            if words.count == 2 {
                guard let named = weekdays(words[0]) else {
                    throw fail("\"\(words[0])\" is not a day, a range of days (mon-fri) or a list (sat,sun)")
                }
                days = named
            }
            let bounds = words[words.count - 1].split(separator: "-", omittingEmptySubsequences: false)
            guard bounds.count == 2, let start = LocalWeek.minuteOfDay(bounds[0]), let end = LocalWeek.minuteOfDay(bounds[1])
            else { throw fail("the times must be HH:MM-HH:MM, from 00:00 to 24:00") }
            guard start != end else {
                throw fail("it starts and ends at the same time; write 00:00-24:00 for a whole day")
            }
            guard start < 24 * 60 else { throw fail("a window cannot start at 24:00") }
            // Past midnight when the end is not after the start.
            let length = end > start ? end - start : end + 24 * 60 - start
            return days.map { day in
                let from = day * 24 * 60 + start
                return from..<(from + length)
            }
        }

        /// `sat`, `mon-fri`, `sat,sun` → day numbers (0 is Monday).
        static func weekdays(_ text: Substring) -> [Int]? {
            var days: [Int] = []
            for part in text.split(separator: ",", omittingEmptySubsequences: false) {
                let range = part.split(separator: "-", omittingEmptySubsequences: false)
                if range.count == 2 {
                    guard let first = LocalWeek.weekday(range[0]), let last = LocalWeek.weekday(range[1]) else { return nil }
                    // A range may wrap past Sunday (fri-mon).
                    var day = first
                    while true {
                        days.append(day)
                        if day == last { break }
                        day = (day + 1) % 7
                    }
                } else {
                    guard range.count == 1, let day = LocalWeek.weekday(part) else { return nil }
                    days.append(day)
                }
            }
            return days.isEmpty ? nil : Array(Set(days)).sorted()
        }
    }
}
