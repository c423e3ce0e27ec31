import Foundation

/// Notices steps of the wall clock (a device without a real-time clock setting its time, a bad NTP answer): how
/// far the wall clock moved between two looks, minus how far the boot-time clock moved in the same time.
///
/// Due times are stored as wall-clock dates (they must survive a restart); when the wall clock steps, the queue
/// moves them by the step, so a retry due in 30 s is still due in 30 s, not in an hour and 30 s (a step back) or
/// at once together with every other (a step forwards). NTP's gradual slewing stays far below the tolerance.
/// The boot-time clock counts a suspend as the wall clock does, so waking up is not a step.
struct WallClockWatch: Sendable, Equatable {
    private var wall: Date
    private var bootNanoseconds: Int64
    /// A difference up to this is not a step (jitter between the two readings, slewing).
    let tolerance: TimeInterval

    init(wall: Date, bootNanoseconds: Int64, tolerance: TimeInterval = 2) {
        self.wall = wall
        self.bootNanoseconds = bootNanoseconds
        self.tolerance = tolerance
    }

    /// The watch as of now.
    static func now() -> WallClockWatch {
        WallClockWatch(wall: Date(), bootNanoseconds: bootTimeNanoseconds())
    }

    /// A step of the wall clock.
    struct Step: Sendable, Equatable {
        /// How far it jumped: positive forwards.
        var seconds: TimeInterval
        /// The latest time the old clock can have shown before the step: what was written under the old clock
        /// is no later than this.
        var oldClockUntil: Date
    }

    /// Takes a new pair of readings; returns the step when the wall clock moved more than `tolerance` away from
    /// the boot-time clock since the last look.
    mutating func observe(wall now: Date, bootNanoseconds boot: Int64) -> Step? {
        let expected = Double(boot - bootNanoseconds) / 1e9
        let step = now.timeIntervalSince(wall) - expected
        let oldClockUntil = wall.addingTimeInterval(expected)
        wall = now
        bootNanoseconds = boot
        return abs(step) > tolerance ? Step(seconds: step, oldClockUntil: oldClockUntil) : nil
    }

    /// Looks now.
    mutating func observe() -> Step? {
        observe(wall: Date(), bootNanoseconds: bootTimeNanoseconds())
    }
}

/// Nanoseconds of `CLOCK_BOOTTIME`: monotonic, and counting time spent suspended.
func bootTimeNanoseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_BOOTTIME, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
}
