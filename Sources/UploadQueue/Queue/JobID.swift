import Foundation

/// A job's identity: a UUIDv7 string, so ids sort by creation time and "oldest first" is plain id order.
public struct JobID: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The canonical lowercase UUID text, e.g. `01934f7e-8c1a-7b3e-9d2f-0a1b2c3d4e5f`.
    public let rawValue: String

    /// Wraps an id read from the database, the CLI or a caller; returns nil unless it is a well-formed UUID.
    public init?(_ text: String) {
        guard let uuid = UUID(uuidString: text) else { return nil }
        self.rawValue = uuid.uuidString.lowercased()
    }

    init(trusted rawValue: String) {
        self.rawValue = rawValue
    }

    /// A new time-ordered id (RFC 9562 version 7): 48 bits of Unix milliseconds, then random bits.
    public static func generate(at date: Date = Date()) -> JobID {
        var bytes = [UInt8](repeating: 0, count: 16)
        let millis = UInt64(max(0, date.timeIntervalSince1970 * 1000))
        for index in 0..<6 {
            bytes[index] = UInt8(truncatingIfNeeded: millis >> (8 * (5 - index)))
        }
        var generator = SystemRandomNumberGenerator()
        for index in 6..<16 {
            bytes[index] = generator.next()
        }
        bytes[6] = (bytes[6] & 0x0F) | 0x70
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let uuid = UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                               bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
        return JobID(trusted: uuid.uuidString.lowercased())
    }

    public var description: String { rawValue }

    public static func < (lhs: JobID, rhs: JobID) -> Bool { lhs.rawValue < rhs.rawValue }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let id = JobID(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a job id: \(text)"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}
