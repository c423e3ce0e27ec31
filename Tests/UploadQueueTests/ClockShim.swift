import Foundation
import Testing

/// The wall clock of a child process, moved by the clock shim (`contrib/test-servers/clockshift.c`, LD_PRELOAD):
/// the offset file it reads, and the environment that puts a daemon or a command under it.
///
/// The clock sweep (`contrib/clock-sweep/run.sh`) runs the whole test process under the shim already. An offset
/// written here is the child's distance from this process's clock, so the file gets that plus the offset this
/// process runs with: a daemon "at 11:59:35" reads 11:59:35, whatever instant the sweep set.
struct ClockShim {
    /// The file the child's shim reads its offset from (again every 100 ms, so rewriting it steps the clock).
    let file: String

    /// The environment for a child under this clock.
    let environment: [String: String]

    /// A shim whose clock runs `seconds` ahead of this process's (behind, if negative).
    init(file: String, offset seconds: Double = 0) throws {
        self.file = file
        let library = try TestServers.address("UPLOADQ_TEST_CLOCKSHIFT")
        #expect(FileManager.default.fileExists(atPath: library), "the clock shim is built by contrib/test-servers/setup.sh")
        environment = ["LD_PRELOAD": library, "CLOCKSHIFT_FILE": file]
        try set(offset: seconds)
    }

    /// A shim whose clock reads `date` now.
    init(file: String, showing date: Date) throws {
        try self.init(file: file, offset: date.timeIntervalSinceNow)
    }

    /// Moves the child's clock to `seconds` from this process's clock; a running child follows within 100 ms.
    func set(offset seconds: Double) throws {
        guard let own = Self.ownOffset else {
            Issue.record("this process runs under the clock shim, but its offset file cannot be read as seconds")
            throw CocoaError(.fileReadCorruptFile)
        }
        let text = String(format: "%.3f\n", seconds + own)
        try text.write(toFile: file, atomically: true, encoding: .utf8)
    }

    /// `time` (`HH:MM:SS`) on today's date in UTC, on this process's clock.
    static func today(at time: String) throws -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = time.split(separator: ":").compactMap { Int($0) }
        try #require(parts.count == 3, "\(time) is not HH:MM:SS")
        return try #require(calendar.date(bySettingHour: parts[0], minute: parts[1], second: parts[2], of: Date()))
    }

    /// The seconds this process's own wall clock is moved by: nonzero under the clock sweep; nil when it runs
    /// under the shim and the offset cannot be read (written in a locale with a decimal comma, say).
    static let ownOffset: Double? = {
        let environment = ProcessInfo.processInfo.environment
        guard environment["LD_PRELOAD"]?.contains("clockshift") == true, let path = environment["CLOCKSHIFT_FILE"]
        else { return 0 }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        return Double(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }()
}
