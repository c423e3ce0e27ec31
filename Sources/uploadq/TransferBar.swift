import Foundation
import UploadQueue

/// One line per transfer: name, progress bar, percent, confirmed of total, rate and time left. Shared by
/// `uploadq watch` and `enqueue --wait`.
enum TransferBar {
    static func line(name: String, confirmed: Int64, size: Int64, rate: Int64, state: String? = nil,
                     width: Int = 28) -> String {
        let fraction = size > 0 ? min(1, Double(confirmed) / Double(size)) : (state == "uploaded" ? 1 : 0)
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
        var text = "\(name.prefix(24).padding(toLength: 24, withPad: " ", startingAt: 0)) \(bar) "
            + String(format: "%3d%%", Int(fraction * 100))
            + " \(TextOutput.bytes(confirmed))/\(TextOutput.bytes(size))"
        if rate > 0 { text += "  \(TextOutput.bytes(rate))/s  ETA \(eta(remaining: size - confirmed, rate: rate))" }
        if let state { text += "  \(state)" }
        return text
    }

    /// `42s`, `3m05s`, `1h02m`.
    static func eta(remaining: Int64, rate: Int64) -> String {
        guard rate > 0 else { return "-" }
        let seconds = Int((Double(max(0, remaining)) / Double(rate)).rounded(.up))
        if seconds < 60 { return "\(seconds)s" }
        if seconds < 3600 { return String(format: "%dm%02ds", seconds / 60, seconds % 60) }
        return String(format: "%dh%02dm", seconds / 3600, (seconds % 3600) / 60)
    }
}
