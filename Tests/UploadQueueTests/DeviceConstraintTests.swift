import Foundation
import Testing
@testable import UploadQueue

/// The device constraints' pure parts, on fixed clocks: windows and timetables through daylight saving time and
/// midnight, budget periods and their ledger through restarts and clock steps, and the power as a tree of files
/// of the kernel's layout says it.
@Suite struct UploadWindowTests {
    static let berlin = LocalWeek(timeZone: TimeZone(identifier: "Europe/Berlin")!)

    /// A wall-clock time in Berlin.
    static func berlin(_ text: String) -> Date {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = berlin.timeZone
        formatter.dateFormat = "yyyy-MM-dd HH:mm"
        return formatter.date(from: text)!
    }

    @Test("22:00-06:00 spans midnight; the night the clocks go forward it lasts 7 hours, and 9 when they go back")
    func overnight() throws {
        let windows = try UploadWindows(["22:00-06:00"])
        let week = Self.berlin
        #expect(!windows.isOpen(at: Self.berlin("2026-03-28 21:59"), in: week))
        #expect(windows.isOpen(at: Self.berlin("2026-03-28 22:00"), in: week))
        #expect(windows.isOpen(at: Self.berlin("2026-03-29 05:59"), in: week))
        #expect(!windows.isOpen(at: Self.berlin("2026-03-29 06:00"), in: week))
        let opens = try #require(windows.nextChange(after: Self.berlin("2026-03-28 12:00"), in: week))
        #expect(opens == Self.berlin("2026-03-28 22:00"))
        let closes = try #require(windows.nextChange(after: opens, in: week))
        #expect(closes == Self.berlin("2026-03-29 06:00"))
        #expect(closes.timeIntervalSince(opens) == 7 * 3600, "29 March 2026: 02:00 becomes 03:00")
        let autumnOpen = try #require(windows.nextChange(after: Self.berlin("2026-10-24 12:00"), in: week))
        let autumnClose = try #require(windows.nextChange(after: autumnOpen, in: week))
        #expect(autumnClose.timeIntervalSince(autumnOpen) == 9 * 3600, "25 October 2026: 03:00 becomes 02:00")
    }

    @Test("an edge inside the repeated hour of the fall-back night is found at its second occurrence")
    func edgeInTheRepeatedHour() throws {
        let york = LocalWeek(timeZone: TimeZone(identifier: "America/New_York")!)
        let windows = try UploadWindows(["22:00-01:30"])
        // 3 November 2024, 06:00 UTC: 01:00 EST, the second time the clocks show 01:00 that night.
        let second = Date(timeIntervalSince1970: 1_730_613_600)
        #expect(windows.isOpen(at: second, in: york))
        let closes = try #require(windows.nextChange(after: second, in: york))
        #expect(closes == second.addingTimeInterval(1800), "01:30 EST, not the next day's")
        // A timetable entry inside the repeated hour, in Berlin.
        let berlin = Self.berlin
        let table = try BandwidthTimetable(["02:30,1MiB", "04:00,off"])
        // 25 October 2026, 00:45 UTC: 02:45 CEST, before the clocks go back at 01:00 UTC.
        let first = Date(timeIntervalSince1970: 1_792_889_100)
        #expect(table.rate(at: first, in: berlin) == 1 << 20)
        // At 03:00 CEST the clocks show 02:00 CET: before 02:30 again, so the day before's last entry (off) holds
        // until 02:30 comes round a second time.
        let back = try #require(table.nextChange(after: first, in: berlin))
        #expect(back == Date(timeIntervalSince1970: 1_792_890_000) && table.rate(at: back, in: berlin) == 0)
        let again = try #require(table.nextChange(after: back, in: berlin))
        #expect(again == back.addingTimeInterval(1800) && table.rate(at: again, in: berlin) == 1 << 20)
    }

    @Test("a window that starts inside the spring-forward gap opens when the gap ends")
    func startInTheGap() throws {
        let windows = try UploadWindows(["02:30-04:00"])
        let week = Self.berlin
        let opens = try #require(windows.nextChange(after: Self.berlin("2026-03-29 00:00"), in: week))
        // 02:00 CET is followed by 03:00 CEST: the first instant at or after 02:30 on the wall.
        #expect(opens == Self.berlin("2026-03-29 03:00"))
        #expect(windows.isOpen(at: opens, in: week))
        #expect(!windows.isOpen(at: opens.addingTimeInterval(-1), in: week))
    }

    @Test("days: a whole Saturday, Friday night into Saturday, Sunday night into Monday, ranges and lists")
    func days() throws {
        let week = Self.berlin
        let saturday = try UploadWindows(["sat 00:00-24:00"])
        // 2026-11-27 is a Friday.
        #expect(!saturday.isOpen(at: Self.berlin("2026-11-27 23:59"), in: week))
        #expect(saturday.isOpen(at: Self.berlin("2026-11-28 00:00"), in: week))
        #expect(saturday.isOpen(at: Self.berlin("2026-11-28 23:59"), in: week))
        #expect(!saturday.isOpen(at: Self.berlin("2026-11-29 00:00"), in: week))
        let friday = try UploadWindows(["fri 22:00-06:00"])
        #expect(friday.isOpen(at: Self.berlin("2026-11-28 05:00"), in: week))
        #expect(!friday.isOpen(at: Self.berlin("2026-11-28 07:00"), in: week))
        #expect(!friday.isOpen(at: Self.berlin("2026-11-27 21:00"), in: week))
        #expect(!friday.isOpen(at: Self.berlin("2026-11-26 23:00"), in: week), "Thursday night is not Friday's")
        let sunday = try UploadWindows(["sun 22:00-06:00"])
        #expect(sunday.isOpen(at: Self.berlin("2026-11-30 05:00"), in: week), "into Monday, across the week's end")
        #expect(!sunday.isOpen(at: Self.berlin("2026-11-30 06:00"), in: week))
        let weekdays = try UploadWindows(["mon-fri 12:00-13:00", "sat,sun 08:00-20:00"])
        #expect(weekdays.isOpen(at: Self.berlin("2026-11-25 12:30"), in: week))
        #expect(!weekdays.isOpen(at: Self.berlin("2026-11-28 12:30").addingTimeInterval(10 * 3600), in: week))
        #expect(weekdays.isOpen(at: Self.berlin("2026-11-29 09:00"), in: week))
        #expect(UploadWindows.always.isOpen(at: Date(), in: week))
        #expect(UploadWindows.always.nextChange(after: Date(), in: week) == nil)
    }

    @Test("entries that cannot be read are refused with the entry and why")
    func invalid() {
        for entry in ["25:00-26:00", "22:00-22:00", "xyz 10:00-11:00", "10:00", "24:00-02:00", "mon 10:00-11:00 x",
                      "10:0-11:00", "１０:00-11:00"] {
            #expect(throws: TimeRuleError.self, "\(entry)") { try UploadWindows([entry]) }
        }
    }
}

@Suite struct BandwidthTimetableTests {
    @Test("the cap of the last entry at or before the time, wrapping to the day before; off lifts it")
    func rates() throws {
        let table = try BandwidthTimetable(["08:00,512KiB", "12:00,4MiB", "19:00,off", "sat-10:00,1MiB"])
        let week = UploadWindowTests.berlin
        #expect(table.rate(at: UploadWindowTests.berlin("2026-11-25 07:59"), in: week) == 0, "Tuesday 19:00's off")
        #expect(table.rate(at: UploadWindowTests.berlin("2026-11-25 08:00"), in: week) == 512 << 10)
        #expect(table.rate(at: UploadWindowTests.berlin("2026-11-25 13:00"), in: week) == 4 << 20)
        #expect(table.rate(at: UploadWindowTests.berlin("2026-11-28 11:00"), in: week) == 1 << 20, "Saturday's own")
        #expect(try #require(table.nextChange(after: UploadWindowTests.berlin("2026-11-25 09:00"), in: week))
                == UploadWindowTests.berlin("2026-11-25 12:00"))
        #expect(BandwidthTimetable.lower(0, 100) == 100 && BandwidthTimetable.lower(50, 100) == 50
                && BandwidthTimetable.lower(0, 0) == 0)
        #expect(try BandwidthTimetable(["08:00,1MiB"]).nextChange(after: Date(), in: week) == nil, "one rate all week")
        for entry in ["8:00,1MiB", "08:00", "08:00,fast", "xyz-08:00,1MiB", "24:00,1MiB", "08:00,0"] {
            #expect(throws: TimeRuleError.self, "\(entry)") { try BandwidthTimetable([entry]) }
        }
    }
}

@Suite struct MeteredBudgetTests {
    @Test("periods: a day (23 hours when the clocks go forward), a week from its weekday, a month from its day")
    func periods() throws {
        let zone = UploadWindowTests.berlin.timeZone
        let day = try #require(MeteredBudget("200MiB/day", reset: nil))
        #expect(day.bytes == 200 << 20 && day.period == .day)
        let spring = day.period(containing: UploadWindowTests.berlin("2026-03-29 12:00"), timeZone: zone)
        #expect(spring.start == UploadWindowTests.berlin("2026-03-29 00:00") && spring.duration == 23 * 3600)
        let week = try #require(MeteredBudget("1GiB/week", reset: "wed"))
        let weekPeriod = week.period(containing: UploadWindowTests.berlin("2026-11-24 12:00"), timeZone: zone)
        #expect(weekPeriod.start == UploadWindowTests.berlin("2026-11-18 00:00"), "the Wednesday before")
        #expect(weekPeriod.end == UploadWindowTests.berlin("2026-11-25 00:00"))
        let month = try #require(MeteredBudget("5GiB/month", reset: "5"))
        let early = month.period(containing: UploadWindowTests.berlin("2026-12-03 12:00"), timeZone: zone)
        #expect(early.start == UploadWindowTests.berlin("2026-11-05 00:00") && early.end == UploadWindowTests.berlin("2026-12-05 00:00"))
        #expect(MeteredBudget("200MiB", reset: nil) == nil && MeteredBudget("200MiB/year", reset: nil) == nil)
        #expect(MeteredBudget("200MiB/day", reset: "5") == nil && MeteredBudget("1GiB/month", reset: "29") == nil)
        #expect(MeteredBudget("1GiB/week", reset: "5") == nil)
        #expect(MeteredBudget("0MiB/day", reset: nil) == nil, "a budget of nothing is a mistake: defer does that")
    }

    @Test("the ledger: a new period at the reset, kept through a restart, a clock behind, and clock steps")
    func ledger() throws {
        let zone = UploadWindowTests.berlin.timeZone
        let budget = try #require(MeteredBudget("10MiB/day", reset: nil))
        let noon = UploadWindowTests.berlin("2026-11-24 12:00")
        var ledger = BudgetLedger.opening(budget, now: noon, timeZone: zone)
        ledger.add(6 << 20)
        #expect(!ledger.isSpent(budget) && ledger.isSpent(budget, unbooked: 4 << 20))
        let stillOn = ledger.follow(now: noon.addingTimeInterval(3600), budget: budget, timeZone: zone)
        #expect(!stillOn)
        #expect(ledger.used == 6 << 20)

        // A restart: the stored period is taken over, not anchored until the clock is seen inside it.
        var resumed = BudgetLedger.resumed(periodStart: ledger.periodStart, resetsAt: ledger.resetsAt, used: ledger.used,
                                           budget: budget, now: noon, timeZone: zone)
        #expect(resumed.used == 6 << 20 && !resumed.anchored)
        // A device without a real-time clock boots in 1970: nothing resets, and the step to the right time that
        // follows does not move a period that was not seen under the wrong clock.
        let notInThePast = resumed.follow(now: Date(timeIntervalSince1970: 0), budget: budget, timeZone: zone)
        #expect(!notInThePast)
        resumed.shift(by: noon.timeIntervalSince1970)
        #expect(resumed.resetsAt == ledger.resetsAt && resumed.used == 6 << 20)
        let anchoredNow = resumed.follow(now: noon, budget: budget, timeZone: zone)
        #expect(!anchoredNow && resumed.anchored)

        // Anchored, a bad step forwards by a year moves the period with it: the budget is not reset.
        var stepped = resumed
        stepped.shift(by: 365 * 86_400)
        let notReset = stepped.follow(now: noon.addingTimeInterval(365 * 86_400), budget: budget, timeZone: zone)
        #expect(!notReset)
        #expect(stepped.used == 6 << 20)
        stepped.shift(by: -365 * 86_400)
        #expect(stepped.resetsAt == ledger.resetsAt)

        // Midnight: a new period, nothing used.
        let newPeriod = ledger.follow(now: UploadWindowTests.berlin("2026-11-25 00:00"), budget: budget, timeZone: zone)
        #expect(newPeriod)
        #expect(ledger.used == 0 && ledger.periodStart == UploadWindowTests.berlin("2026-11-25 00:00"))

        // The budget configured anew (a week now): what was used stays, in the period that holds now.
        let weekly = try #require(MeteredBudget("50MiB/week", reset: nil))
        let changed = BudgetLedger.resumed(periodStart: resumed.periodStart, resetsAt: resumed.resetsAt, used: 6 << 20,
                                           budget: weekly, now: noon, timeZone: zone)
        #expect(changed.used == 6 << 20 && changed.periodStart == UploadWindowTests.berlin("2026-11-23 00:00"))
    }
}

/// The times a waiting reason names, on fixed clocks: the hour alone within 20 hours, with the weekday within six
/// days, else the date; on the clock of the configured zone, in English whatever the locale.
@Suite struct WaitingHoldClockTests {
    @Test("a reset at midnight reads `sat 00:00` until 20 hours before it, then `00:00`; a week ahead, its date")
    func thresholds() {
        let zone = UploadWindowTests.berlin.timeZone
        let berlin: (String) -> Date = UploadWindowTests.berlin
        // 2026-11-28 is a Saturday: the daily budget's reset at the end of Friday.
        let midnight = berlin("2026-11-28 00:00")
        #expect(WaitingHold.clock(midnight, timeZone: zone, now: berlin("2026-11-27 00:52")) == "sat 00:00")
        #expect(WaitingHold.clock(midnight, timeZone: zone, now: berlin("2026-11-27 04:00")) == "sat 00:00", "20 hours")
        #expect(WaitingHold.clock(midnight, timeZone: zone, now: berlin("2026-11-27 04:01")) == "00:00")
        #expect(WaitingHold.clock(midnight, timeZone: zone, now: berlin("2026-11-27 23:59")) == "00:00")
        #expect(WaitingHold.clock(midnight, timeZone: zone, now: berlin("2026-11-22 00:01")) == "sat 00:00")
        #expect(WaitingHold.clock(midnight, timeZone: zone, now: berlin("2026-11-21 23:59")) == "2026-11-28 00:00")
        // The same instant on another zone's clock.
        let york = TimeZone(identifier: "America/New_York")!
        #expect(WaitingHold.clock(midnight, timeZone: york, now: berlin("2026-11-27 12:00")) == "18:00")
        let hold = WaitingHold(reason: .budgetSpent, until: midnight, detail: "10.0 MiB/day")
        #expect(hold.text(timeZone: zone, now: berlin("2026-11-27 00:52"))
                == "metered link, budget 10.0 MiB/day spent, resets sat 00:00")
        #expect(hold.text(timeZone: zone, now: berlin("2026-11-27 12:00"))
                == "metered link, budget 10.0 MiB/day spent, resets 00:00")
    }
}

@Suite struct PowerTests {
    /// A power-supply tree of the kernel's layout.
    static func tree(_ supplies: [String: [String: String]]) throws -> String {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("power-\(UUID().uuidString)").path
        for (name, attributes) in supplies {
            let directory = root + "/" + name
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            for (attribute, value) in attributes {
                try (value + "\n").write(toFile: directory + "/" + attribute, atomically: true, encoding: .utf8)
            }
        }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        return root
    }

    @Test("the kernel's tree: mains online, on battery, a charging battery, a mouse's battery, no supply at all")
    func supplyTree() throws {
        let unplugged = try Self.tree(["AC": ["type": "Mains", "online": "0"],
                                       "BAT0": ["type": "Battery", "capacity": "55", "status": "Discharging"],
                                       "hidpp_battery_0": ["type": "Battery", "scope": "Device", "capacity": "5"]])
        let state = PowerSupplyReader(root: unplugged).read()
        #expect(state == PowerState(onExternalPower: false, batteryPercent: 55, source: "sysfs"))
        #expect(state.unmet(.ac)?.contains("on battery (55%)") == true)
        #expect(state.unmet(.batteryNotLow(percent: 20)) == nil)
        #expect(state.unmet(.batteryNotLow(percent: 60))?.contains("below 60%") == true)
        #expect(state.unmet(.any) == nil)

        let plugged = try Self.tree(["ADP1": ["type": "Mains", "online": "1"], "usb": ["type": "USB", "online": "0"],
                                     "BAT0": ["type": "Battery", "capacity": "10", "status": "Charging"]])
        let charging = PowerSupplyReader(root: plugged).read()
        #expect(charging.isExternal && charging.unmet(.ac) == nil && charging.unmet(.batteryNotLow(percent: 20)) == nil)

        // A phone's battery reports charging with no mains entry at all.
        let phone = try Self.tree(["battery": ["type": "Battery", "capacity": "80", "status": "Full"]])
        #expect(PowerSupplyReader(root: phone).read().isExternal)

        let none = try Self.tree([:])
        #expect(PowerSupplyReader(root: none).read() == .unknown)
        #expect(PowerState.unknown.unmet(.ac) == nil, "a server without a battery runs on external power")
        #expect(PowerSupplyReader(root: "/nonexistent/power").read() == .unknown)
    }

    @Test("UPower's answers through busctl are read strictly")
    func upower() {
        #expect(UPowerProbe.parseBoolean("b true\n") == true && UPowerProbe.parseBoolean("b false") == false)
        #expect(UPowerProbe.parseBoolean("u 1") == nil && UPowerProbe.parseBoolean("b maybe") == nil)
        #expect(UPowerProbe.parseDouble("d 54.000000") == 54 && UPowerProbe.parseDouble("d 120") == nil)
        #expect(UPowerProbe.parseDouble("s \"54\"") == nil)
        // No busctl: no answer (sysfs is read instead in auto mode).
        #expect(UPowerProbe(bus: SystemBus(busctl: nil)).query() == nil)
    }
}

@Suite struct SendPacerTests {
    @Test("the bucket: a tenth of a second of bytes, reads paused when empty, a lowered rate holds at once")
    func bucket() {
        let pacer = SendPacer()
        let start = ContinuousClock.now
        #expect(pacer.take(65_536, now: start) == 65_536, "no cap: everything")
        pacer.setRate(1 << 20, now: start)
        #expect(pacer.take(65_536, now: start) == 0, "an empty bucket pauses the read")
        #expect(pacer.wait(now: start) == .milliseconds(4), "4 KiB at 1 MiB/s")
        let later = start + .seconds(1)
        // A second refills at most a tenth of a second's worth.
        #expect(pacer.take(1 << 20, now: later) == (1 << 20) / 10)
        pacer.setRate(64 << 10, now: later)
        let next = later + .milliseconds(500)
        // Lowered: half a second at 64 KiB/s, but never more than its own tenth of a second.
        #expect(pacer.take(1 << 20, now: next) == 6_553)
        #expect(pacer.take(100, now: next) == 0 || pacer.take(100, now: next) <= 100)
        pacer.setRate(0, now: next)
        #expect(pacer.wait(now: next) == .zero && pacer.take(10, now: next) == 10, "cap lifted")
    }
}
