import Foundation

extension Configuration {
    /// `[bandwidth] timetable = ["08:00,512KiB", "12:00,4MiB", "19:00,off"]`: a send cap that changes with the time of
    /// day, in the style of rclone's `--bwlimit` timetable.
    ///
    /// Each entry is `[DAY-]HH:MM,RATE`: from that wall-clock time (daily, or on that day: `sat-09:00,1MiB`) the cap is
    /// RATE bytes per second until the next entry; `off` lifts it. Before the first entry of the day the last one of
    /// the day before holds (the table wraps around the week). The link class's own cap still applies: the lower one
    /// wins.
    public struct BandwidthTimetable: Sendable, Equatable {
        /// One change of the cap.
        public struct Entry: Sendable, Equatable {
            /// Minute of the week (0 is Monday 00:00) it starts at.
            public var minuteOfWeek: Int
            /// Bytes per second; 0 is no cap (`off`).
            public var bytesPerSecond: Int64
        }

        /// The entries in order of the week, one per minute at most (a daily entry counts for every day).
        public let entries: [Entry]
        /// The entries as written, for `status`.
        public let texts: [String]

        /// Parses the entries; throws `TimeRuleError`, naming the entry, when one cannot be read.
        public init(_ texts: [String]) throws(TimeRuleError) {
            var byMinute: [Int: Int64] = [:]
            // Day-specific entries win over daily ones at the same minute, whatever their order in the list.
            var specific: Set<Int> = []
            for text in texts {
                let fail = { (reason: String) in TimeRuleError(entry: text, reason: reason) }
                let parts = text.split(separator: ",", omittingEmptySubsequences: false)
                guard parts.count == 2 else { throw fail("write it as \"HH:MM,RATE\" or \"DAY-HH:MM,RATE\" (RATE: 512KiB, 4MiB or off)") }
                var when = parts[0].trimmingCharacters(in: .whitespaces)[...]
                var days = Array(0..<7)
                if let dash = when.firstIndex(of: "-") {
                    guard let day = LocalWeek.weekday(when[..<dash]) else {
                        throw fail("\"\(when[..<dash])\" is not a day (mon … sun)")
                    }
                    days = [day]
                    when = when[when.index(after: dash)...]
                }
                guard let minute = LocalWeek.minuteOfDay(when), minute < 24 * 60 else {
                    throw fail("the time must be HH:MM, from 00:00 to 23:59")
                }
                let rateText = parts[1].trimmingCharacters(in: .whitespaces)
                let rate: Int64
                if rateText == "off" {
                    rate = 0
                } else {
                    guard let bytes = ConfigurationValues.byteCount(rateText), bytes > 0 else {
                        throw fail("\"\(rateText)\" is not a rate (bytes per second: 512KiB, 4MiB) or off")
                    }
                    rate = bytes
                }
                for day in days {
                    let at = day * 24 * 60 + minute
                    if days.count == 1 {
                        byMinute[at] = rate
                        specific.insert(at)
                    } else if !specific.contains(at) {
                        byMinute[at] = rate
                    }
                }
            }
            entries = byMinute.sorted { $0.key < $1.key }.map { Entry(minuteOfWeek: $0.key, bytesPerSecond: $0.value) }
            self.texts = texts
        }

        /// No timetable.
        public static let none = BandwidthTimetable(entries: [], texts: [])

        private init(entries: [Entry], texts: [String]) {
            self.entries = entries
            self.texts = texts
        }

        /// Whether there is no timetable.
        public var isEmpty: Bool { entries.isEmpty }

        /// The cap at `date` (bytes per second, 0 for none); nil without a timetable.
        func rate(at date: Date, in week: LocalWeek) -> Int64? {
            guard let last = entries.last else { return nil }
            let minute = week.minuteOfWeek(date)
            return (entries.last { $0.minuteOfWeek <= minute } ?? last).bytesPerSecond
        }

        /// When the cap next changes after `date` (nil: never, or not within a week).
        func nextChange(after date: Date, in week: LocalWeek) -> Date? {
            guard Set(entries.map(\.bytesPerSecond)).count > 1 else { return nil }
            return week.nextChange(after: date, marks: Set(entries.map(\.minuteOfWeek))) { rate(at: $0, in: week) }
        }

        /// The lower of two caps, where 0 means none.
        static func lower(_ first: Int64, _ second: Int64) -> Int64 {
            if first == 0 { return second }
            if second == 0 { return first }
            return min(first, second)
        }
    }
}
