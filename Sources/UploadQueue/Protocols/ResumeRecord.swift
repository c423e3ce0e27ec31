import Foundation

/// What a protocol remembers between attempts, kept in the job (`resume_state`) as JSON with sorted keys.
protocol ResumeRecord: Codable {
    /// Whether a decoded record can be resumed from (an S3 record needs its UploadId); true by default.
    var isUsable: Bool { get }
}

extension ResumeRecord {
    var isUsable: Bool { true }

    /// The record stored in the job, or nil when there is none, it belongs to another protocol, or it is unusable.
    init?(json: String?) {
        guard let json, let decoded = try? JSONDecoder().decode(Self.self, from: Data(json.utf8)), decoded.isUsable
        else { return nil }
        self = decoded
    }

    /// The record as the job keeps it.
    var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data("{}".utf8), as: UTF8.self)
    }
}
