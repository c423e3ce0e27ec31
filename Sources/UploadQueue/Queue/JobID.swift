import Foundation
import Synchronization

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
    ///
    /// Ids made by this process are strictly increasing even within one millisecond (RFC 9562 §6.2, method 3:
    /// the random part of the previous id plus one), so "oldest first" holds for bursts of enqueues too.
    public static func generate(at date: Date = Date()) -> JobID {
        let millis = UInt64(max(0, date.timeIntervalSince1970 * 1000))
        var generator = SystemRandomNumberGenerator()
        let random = UInt128(generator.next() as UInt64) << 64 | UInt128(generator.next() as UInt64)
        let value = lastGenerated.withLock { last -> UInt128 in
            var candidate = UInt128(millis) << 80 | (random & randomMask)
            if candidate <= last {
                candidate = successor(of: last)
            }
            last = candidate
            return candidate
        }
        var bytes = (0..<16).map { UInt8(truncatingIfNeeded: value >> (8 * (15 - $0))) }
        bytes[6] = (bytes[6] & 0x0F) | 0x70
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let uuid = UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                               bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
        return JobID(trusted: uuid.uuidString.lowercased())
    }

    /// The 74 random bits of a UUIDv7 packed without the version and variant fields, low end of the 128 bits.
    /// Ids are built as `millis << 80 | random`, then the version and variant bits are stamped on; to keep the
    /// stamp from undoing an increment, the random part only uses bits the stamp leaves alone.
    private static let randomMask: UInt128 = (UInt128(0x0FFF) << 64) | UInt128(0x3FFF_FFFF_FFFF_FFFF)

    /// The next value after `value` that keeps the version and variant bits clear (carrying past them).
    private static func successor(of value: UInt128) -> UInt128 {
        let randB: UInt128 = 0x3FFF_FFFF_FFFF_FFFF
        let randA: UInt128 = UInt128(0x0FFF) << 64
        if value & randB != randB { return value + 1 }
        if value & randA != randA { return (value & ~randB) + (UInt128(1) << 64) }
        return ((value >> 80) + 1) << 80
    }

    private static let lastGenerated = Mutex<UInt128>(0)

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
