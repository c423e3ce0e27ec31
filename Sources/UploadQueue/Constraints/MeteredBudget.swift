import Foundation

extension Configuration {
    /// `[link] metered_budget = "200MiB/day"` (or `/week`, `/month`): how many bytes metered links may carry per
    /// period, every request counted. `budget_reset` is the day a month (1–28) or a week (`mon`…`sun`) begins.
    public struct MeteredBudget: Sendable, Equatable, CustomStringConvertible {
        /// The length of a budget period.
        public enum Period: String, Sendable, Equatable, CaseIterable {
            case day, week, month
        }

        /// Bytes per period.
        public var bytes: Int64
        /// How long a period lasts.
        public var period: Period
        /// For `month`: the day of the month it resets (1–28). For `week`: the weekday (0 is Monday). Unused for `day`.
        public var resetDay: Int

        /// `bytes` per `period`, beginning on `resetDay` (see `resetDay`).
        public init(bytes: Int64, period: Period, resetDay: Int = 0) {
            self.bytes = bytes
            self.period = period
            self.resetDay = resetDay
        }

        /// Parses `200MiB/day`; nil when it is not a size above 0, a slash and `day`, `week` or `month`, or when
        /// `reset` does not fit the period.
        public init?(_ text: String, reset: String?) {
            let parts = text.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 2, let bytes = ConfigurationValues.byteCount(String(parts[0])), bytes > 0,
                  let period = Period(rawValue: parts[1].trimmingCharacters(in: .whitespaces)) else { return nil }
            var resetDay = period == .month ? 1 : 0
            if let reset {
                switch period {
                case .day: return nil
                case .week:
                    guard let day = LocalWeek.weekday(reset[...]) else { return nil }
                    resetDay = day
                case .month:
                    guard let day = Int(reset), (1...28).contains(day) else { return nil }
                    resetDay = day
                }
            }
            self.init(bytes: bytes, period: period, resetDay: resetDay)
        }

        /// The period that holds `date`, on the local calendar of `timeZone`: from its start (local midnight of the
        /// reset day) to the next one.
        func period(containing date: Date, timeZone: TimeZone) -> DateInterval {
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = timeZone
            let today = calendar.startOfDay(for: date)
            let start: Date
            let end: Date
            switch period {
            case .day:
                start = today
                end = calendar.date(byAdding: .day, value: 1, to: start) ?? start.addingTimeInterval(86_400)
            case .week:
                let weekday = (calendar.component(.weekday, from: today) + 5) % 7
                let back = ((weekday - resetDay) % 7 + 7) % 7
                start = calendar.date(byAdding: .day, value: -back, to: today) ?? today
                end = calendar.date(byAdding: .day, value: 7, to: start) ?? start.addingTimeInterval(7 * 86_400)
            case .month:
                var parts = calendar.dateComponents([.year, .month, .day], from: today)
                let day = min(max(resetDay, 1), 28)
                let thisMonth = (parts.day ?? 1) >= day
                parts.day = day
                let anchor = calendar.date(from: parts) ?? today
                start = thisMonth ? anchor : calendar.date(byAdding: .month, value: -1, to: anchor) ?? anchor
                end = calendar.date(byAdding: .month, value: 1, to: start) ?? start.addingTimeInterval(30 * 86_400)
            }
            return DateInterval(start: start, end: max(end, start))
        }

        /// `200 MiB/day` (`/month from the 5th`, `/week from mon`).
        public var description: String {
            let base = "\(ByteCountText.text(bytes))/\(period.rawValue)"
            switch period {
            case .day: return base
            case .week: return base + " from " + LocalWeek.dayNames[((resetDay % 7) + 7) % 7]
            case .month: return resetDay == 1 ? base : base + " from day \(resetDay)"
            }
        }
    }
}
