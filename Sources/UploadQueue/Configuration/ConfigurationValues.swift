import Foundation

/// The value forms the config accepts, sizes (`8MiB`) and durations (`30s`): read, and written back exactly.
enum ConfigurationValues {
    /// Bytes from an integer or a text such as `512`, `8MiB`, `1.5GB`; nil if it is not a size.
    static func byteCount(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let units: [(String, Double)] = [
            ("KiB", 1024), ("MiB", 1024 * 1024), ("GiB", 1024 * 1024 * 1024),
            ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("B", 1),
        ]
        for (suffix, factor) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)
            guard let value = Double(number), value >= 0, value.isFinite, value * factor < 9e18 else { return nil }
            return Int64((value * factor).rounded())
        }
        guard let value = Int64(trimmed), value >= 0 else { return nil }
        return value
    }

    /// A duration from a text such as `500ms`, `30s`, `5m`, `1h`, `90d`; nil if it is not one.
    static func duration(_ text: String) -> Duration? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
        for (suffix, factor) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)
            guard !number.isEmpty, let value = Double(number), value >= 0, value.isFinite, value * factor < 1e10 else {
                continue
            }
            return .milliseconds(Int64((value * factor * 1000).rounded()))
        }
        return nil
    }

    /// A size in the largest binary unit that holds it exactly (`8MiB`), else in bytes: what `byteCount` reads back.
    static func sizeText(_ bytes: Int64) -> String {
        for (unit, factor) in [("GiB", Int64(1) << 30), ("MiB", Int64(1) << 20), ("KiB", Int64(1) << 10)]
        where bytes != 0 && bytes % factor == 0 {
            return "\(bytes / factor)\(unit)"
        }
        return "\(bytes)"
    }

    /// A duration in the largest unit that holds it exactly (`30s`, `5m`, `90d`, `250ms`): what `duration` reads
    /// back.
    static func durationText(_ duration: Duration) -> String {
        let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        for (unit, factor) in [("d", Int64(86_400_000)), ("h", 3_600_000), ("m", 60_000), ("s", 1000)]
        where milliseconds != 0 && milliseconds % factor == 0 {
            return "\(milliseconds / factor)\(unit)"
        }
        return milliseconds == 0 ? "0s" : "\(milliseconds)ms"
    }
}
