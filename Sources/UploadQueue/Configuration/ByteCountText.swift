import Foundation

/// Byte counts for people: `512 B`, `1.5 MiB`, `3.0 GiB` (binary units, one decimal).
package enum ByteCountText {
    /// The count in the largest binary unit that keeps it at or above 1.
    public static func text(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f %@", value, units[unit])
    }
}
