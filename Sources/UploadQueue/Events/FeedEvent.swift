import Foundation

/// One line of `uploadq events`: something that happened to a job (or to the link), when, with what matters.
///
/// Written as one JSON object per line: `type`, `time`, `seq` (live lines: the daemon's running count, so a
/// reader sees order and gaps), `job`, then the type's own fields in name order. URLs are redacted as everywhere
/// the CLI shows them.
public struct FeedEvent: Sendable, Equatable {
    /// What happened.
    public enum Kind: String, Sendable, Equatable, CaseIterable {
        /// A file became a job (`name`, `destination`, `size`).
        case enqueued
        /// A transfer began (`destination`, `attempt`, `offset`).
        case started
        /// Bytes moved, at most once a second per job (`confirmed`, `sent`, `size`).
        case progress
        /// The job is uploaded (`destination`, `remote_url`, `size`).
        case uploaded
        /// A transfer failed (`error`, `permanent`, and `retry_at` when it is tried again).
        case failed
        /// What answered a transfer proved nothing (a captive portal, a proxy): the job waits, nothing failed for
        /// good (`destination`, `reason`: what answered and what to do).
        case unverified
        /// The job was cancelled.
        case cancelled
        /// Its metadata patch was delivered, failed for good, or will be tried again (`state`, `error`).
        case patch
        /// A hook ran (`hook`, `state`, `attempt`, `error`).
        case hook
        /// A lane's head failed: the lane waits for it (`lane`, `error`, `permanent`); the job is the head.
        case laneBlocked = "lane.blocked"
        /// The job that held a lane was uploaded, skipped or cancelled, or the lane went on past it (`lane`).
        case laneUnblocked = "lane.unblocked"
        /// Every member of a closed group is uploaded (`group`, `members`, `remote_urls`); the job is the member
        /// whose upload completed it, or the last one uploaded when its close or a cancel did (none when no member
        /// was left).
        case groupUploaded = "group.uploaded"
        /// A member of a group failed for good (`group`, `failed`, `error`); the job is that member.
        case groupIncomplete = "group.incomplete"
        /// A destination's link class changed (`destination`, `class`, `source`, `interface`).
        case link
        /// The first line a follower gets: it is attached (`seq` is where it starts).
        case following
        /// The last line a reader gets when it fell too far behind (`lost`: lines it will not get).
        case dropped
    }

    /// A field's value.
    public enum Value: Sendable, Equatable {
        case string(String)
        case integer(Int64)
        case boolean(Bool)
        case null
        /// A list of strings (a group's remote URLs).
        case strings([String])
    }

    public var kind: Kind
    public var time: Date
    public var job: JobID?
    public var fields: [String: Value]
    /// The daemon's count for a live line; nil for a replayed one.
    public var sequence: Int64?

    public init(_ kind: Kind, job: JobID? = nil, time: Date = Date(), fields: [String: Value] = [:]) {
        self.kind = kind
        self.job = job
        self.time = time
        self.fields = fields
    }

    /// The JSON line, without its newline; every string escaped so that no name can break or forge a line.
    public var jsonLine: String {
        var out = "{\"type\":\(SafeText.jsonString(kind.rawValue)),\"time\":\(SafeText.jsonString(Self.timeText(time)))"
        if let sequence { out += ",\"seq\":\(sequence)" }
        if let job { out += ",\"job\":\(SafeText.jsonString(job.rawValue))" }
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
            out += ",\(SafeText.jsonString(name)):"
            switch value {
            case .string(let text): out += SafeText.jsonString(text)
            case .integer(let number): out += "\(number)"
            case .boolean(let flag): out += flag ? "true" : "false"
            case .null: out += "null"
            case .strings(let list): out += "[" + list.map(SafeText.jsonString).joined(separator: ",") + "]"
            }
        }
        return out + "}"
    }

    /// An event from its JSON line (as `jsonLine` writes it); nil for a line that is not one, or of a kind this
    /// version does not know (a newer daemon's).
    init?(jsonLine line: String) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any],
              let kind = (object["type"] as? String).flatMap(Kind.init(rawValue:)) else { return nil }
        let time = (object["time"] as? String).flatMap {
            try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse($0)
        }
        self.init(kind, job: (object["job"] as? String).flatMap(JobID.init), time: time ?? Date(timeIntervalSince1970: 0))
        sequence = (object["seq"] as? NSNumber)?.int64Value
        for (name, value) in object where !["type", "time", "seq", "job"].contains(name) {
            fields[name] = switch value {
            case let text as String: .string(text)
            case _ where ContractJSON.isBoolean(value): .boolean(value as? Bool ?? false)
            case let number as NSNumber: .integer(number.int64Value)
            case let list as [Any]: .strings(list.compactMap { $0 as? String })
            default: .null
            }
        }
    }

    /// RFC 3339 with milliseconds in UTC: events of one second keep their order when sorted by time.
    static func timeText(_ date: Date) -> String {
        let text = StoredDate.text(date)  // yyyy-MM-dd HH:mm:ss.SSS, UTC
        return text.replacingOccurrences(of: " ", with: "T") + "Z"
    }
}
