import Foundation
import RawStructuredFieldValues

/// A resumable-upload server's `Upload-Limit` (an RFC 9651 dictionary): the sizes it takes and how long an
/// upload lives. Unknown keys are ignored, as the draft asks; a known key with a value of the wrong type makes
/// the whole field unusable (nil), never a guess.
struct UploadLimit: Sendable, Equatable, Codable {
    /// `max-size`: the largest upload the server takes.
    var maximumSize: Int64?
    /// `min-size`: below it, the server may not offer a resumable upload.
    var minimumSize: Int64?
    /// `max-append-size`: the largest body of one request.
    var maximumAppendSize: Int64?
    /// `min-append-size`: the smallest body of a request that does not complete the upload.
    var minimumAppendSize: Int64?
    /// `max-age` (interop 7 and later) or `expires` (interop 6): seconds the upload lives from this answer on.
    var lifetime: Int64?

    enum CodingKeys: String, CodingKey {
        case maximumSize = "max_size"
        case minimumSize = "min_size"
        case maximumAppendSize = "max_append_size"
        case minimumAppendSize = "min_append_size"
        case lifetime
    }

    init(maximumSize: Int64? = nil, minimumSize: Int64? = nil, maximumAppendSize: Int64? = nil,
         minimumAppendSize: Int64? = nil, lifetime: Int64? = nil) {
        self.maximumSize = maximumSize
        self.minimumSize = minimumSize
        self.maximumAppendSize = maximumAppendSize
        self.minimumAppendSize = minimumAppendSize
        self.lifetime = lifetime
    }

    /// Reads the field's text; nil when it is not a dictionary or a known key is not a non-negative integer.
    init?(field: String) {
        var parser = StructuredFieldValueParser(Array(field.utf8))
        guard let dictionary = try? parser.parseDictionaryFieldValue() else { return nil }
        for (key, member) in dictionary {
            let known = ["max-size", "min-size", "max-append-size", "min-append-size", "max-age", "expires"]
            guard known.contains(key) else { continue }
            guard case .item(let item) = member, case .integer(let value) = item.rfc9651BareItem, value >= 0 else {
                return nil
            }
            let number = Int64(value)
            switch key {
            case "max-size": maximumSize = number
            case "min-size": minimumSize = number
            case "max-append-size": maximumAppendSize = number
            case "min-append-size": minimumAppendSize = number
            default: lifetime = number
            }
        }
    }

    /// The limits of a response, if it carries a usable `Upload-Limit`.
    init?(_ response: HTTPResponse) {
        guard let text = response.header("Upload-Limit"), let limit = UploadLimit(field: text) else { return nil }
        self = limit
    }

    /// How many bytes the next request sends, given `remaining` bytes and the size the destination would send:
    /// within `max-append-size`, and at least `min-append-size` unless it completes the upload.
    func appendLength(remaining: Int64, preferred: Int64) -> Int64 {
        var length = min(remaining, max(1, preferred))
        if let maximum = maximumAppendSize, maximum > 0 { length = min(length, maximum) }
        if length < remaining, let minimum = minimumAppendSize, length < minimum {
            length = min(remaining, minimum, maximumAppendSize.map { $0 > 0 ? $0 : minimum } ?? minimum)
        }
        return length
    }
}

/// RFC 9651 items of the resumable-upload fields: `Upload-Offset`, `Upload-Length` (integers) and
/// `Upload-Complete` (a boolean).
enum StructuredField {
    /// A non-negative sf-integer; nil for anything else.
    static func integer(_ text: String?) -> Int64? {
        guard case .integer(let value) = item(text)?.rfc9651BareItem, value >= 0 else { return nil }
        return Int64(value)
    }

    /// An sf-boolean (`?0`, `?1`); nil for anything else.
    static func boolean(_ text: String?) -> Bool? {
        guard case .bool(let value) = item(text)?.rfc9651BareItem else { return nil }
        return value
    }

    private static func item(_ text: String?) -> Item? {
        guard let text else { return nil }
        var parser = StructuredFieldValueParser(Array(text.utf8))
        return try? parser.parseItemFieldValue()
    }

    /// `?1` or `?0`.
    static func text(_ value: Bool) -> String { value ? "?1" : "?0" }
}
