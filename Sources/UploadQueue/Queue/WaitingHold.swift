import Foundation

extension Job {
    /// One thing that keeps a pending job from starting, with when it is expected to clear where that is known.
    public struct WaitingHold: Sendable, Equatable, Codable {
        /// What holds the job.
        public var reason: WaitingReason
        /// When it is expected to clear: a window opens, a metered budget resets. nil: not known (the power, the
        /// link), or nothing to wait for but a free slot.
        public var until: Date?
        /// A word on it: what the power lacks (`on battery (55%); waits for external power`), which budget is spent
        /// (`200.0 MiB/day`).
        public var detail: String?

        /// A hold for `reason`, clearing at `until` if known.
        public init(reason: WaitingReason, until: Date? = nil, detail: String? = nil) {
            self.reason = reason
            self.until = until
            self.detail = detail
        }

        init(_ hold: QueueHolds.Hold) {
            self.init(reason: hold.reason, until: hold.until, detail: hold.detail)
        }

        /// In words, with times on the local clock of `timeZone`: `metered link, budget 200.0 MiB/day spent, resets
        /// 00:00`, `outside window until 22:00`, `power: on battery (55%); waits for external power`.
        public func text(timeZone: TimeZone = .current, now: Date = Date()) -> String {
            let when = until.map { Self.clock($0, timeZone: timeZone, now: now) }
            switch reason {
            case .offline: return "offline"
            case .portal: return "captive portal on the link (log in on the network, or wait)"
            case .meteredLink: return "metered link (on_metered keeps it off)"
            case .budgetSpent:
                // Spent, or (a whole file) more than what is left: `10.0 MiB/day: 2.0 MiB left`.
                let partly = detail?.hasSuffix(" left") == true
                return "metered link, budget \(detail ?? "")" + (partly ? ", too little for this whole file" : " spent")
                    + (when.map { ", resets \($0)" } ?? "")
            case .outsideWindow: return "outside window" + (when.map { " until \($0)" } ?? "")
            case .power: return "power: " + (detail ?? "not as required")
            case .circuitOpen: return "destination not answering (circuit open, probed)"
            case .quotaFull: return "destination storage full (HTTP 507; one upload tries again now and then)"
            case .unverifiedAnswer:
                return "unverified answer (one upload tries again now and then)" + (detail.map { ": \($0)" } ?? "")
            case .concurrency: return "every transfer slot busy"
            case .fairShare: return "every transfer slot busy; other owners' files take their turn first"
            case .backoff: return "retry later"
            case .sourceUnstable: return "file still changing"
            case .lane: return "behind an earlier job of its lane" + (detail.map { " (\($0))" } ?? "")
            case .prerequisite: return "waits for a job it comes after" + (detail.map { " (\($0))" } ?? "")
            }
        }

        /// `22:00` within the next 20 hours, `sat 22:00` within six days, else the date and time: on the clock of
        /// `timeZone`.
        public static func clock(_ date: Date, timeZone: TimeZone, now: Date) -> String {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = timeZone
            let ahead = date.timeIntervalSince(now)
            formatter.dateFormat = ahead < 20 * 3600 ? "HH:mm" : ahead < 6 * 86_400 ? "EEE HH:mm" : "yyyy-MM-dd HH:mm"
            return formatter.string(from: date).lowercased()
        }
    }
}
