import Foundation
import Testing
@testable import UploadQueue

/// `SchedulerState` without I/O: for each constraint, what a running transfer and the waiting jobs get when it is
/// lost and when it comes back, on a fixed clock.
@Suite struct SchedulerStateTests {
    static let zone = TimeZone(identifier: "Europe/Berlin")!
    static let noon = UploadWindowTests.berlin("2026-11-24 12:00")

    static func configuration(_ change: (inout Configuration) throws -> Void = { _ in }) throws -> Configuration {
        var tus = try Destination.tus(name: "tus", endpoint: "https://uploads.example.com/files/")
        tus.onMetered = .allow
        var configuration = Configuration(stateDirectory: "/nonexistent",
                                          destinations: ["tus": tus, "local": .localDirectory(name: "local", directory: "/tmp/x")])
        configuration.schedule.timeZone = zone
        try change(&configuration)
        return configuration
    }

    static func job(_ destination: String = "tus", priority: Int = 0, onMetered: String? = nil) -> Job {
        var job = QueueHoldsTests.job(destination, size: 1 << 20)
        job.priority = priority
        job.onMetered = onMetered
        return job
    }

    static let unmetered = LinkStatus(linkClass: .unmetered, source: .override)
    static let metered = LinkStatus(linkClass: .metered, source: .override)
    static let offline = LinkStatus(linkClass: .offline, source: .override)

    static func plan(_ actions: [SchedulerState.Action]) -> SchedulerState.ClaimPlan? {
        for case .claim(let plan) in actions { return plan }
        return nil
    }

    /// A state with `job` running on an unmetered link.
    static func running(_ job: Job, _ configuration: Configuration, power: PowerState? = nil) -> SchedulerState {
        var state = SchedulerState(settings: .init(configuration))
        _ = state.decide(now: noon, inputs: .init(linkChanges: ["tus": unmetered], power: power))
        _ = state.claimed([job], trials: [:])
        return state
    }

    @Test("power: unplugged, the running transfer stops after its chunk and the gate shuts; plugged back, it opens")
    func power() throws {
        let configuration = try Self.configuration { $0.power.require = .ac }
        let job = Self.job()
        let plugged = PowerState(onExternalPower: true, batteryPercent: 90, source: "sysfs")
        var state = Self.running(job, configuration, power: plugged)
        let battery = PowerState(onExternalPower: false, batteryPercent: 90, source: "sysfs")
        let lost = state.decide(now: Self.noon, inputs: .init(power: battery))
        #expect(lost.contains(.powerChanged(battery)))
        #expect(lost.contains { if case .stopAtChunk(job.id, .power, _) = $0 { true } else { false } })
        #expect(!lost.contains { if case .stop = $0 { true } else { false } }, "not at once: after its chunk")
        let shut = try #require(Self.plan(lost))
        #expect(shut.gate.doors["tus"] == nil && shut.gate.doors["local"] == nil)
        #expect(shut.holdsOtherwise.hold(.power, on: "tus")?.detail?.contains("on battery") == true)
        // Asked once: the next round says nothing more.
        let again = state.decide(now: Self.noon, inputs: .init(power: battery))
        #expect(!again.contains { if case .stopAtChunk = $0 { true } else { false } })
        // Back before the chunk ended: the request is withdrawn.
        let back = state.decide(now: Self.noon, inputs: .init(power: plugged))
        #expect(back.contains(.withdrawStop(job.id)))
        #expect(Self.plan(back)?.gate.doors["tus"] == .open)

        // battery-not-low: held below the threshold only.
        let low = try Self.configuration { $0.power.require = .batteryNotLow(percent: 20) }
        var lowState = Self.running(job, low, power: plugged)
        let at25 = lowState.decide(now: Self.noon, inputs: .init(power: .init(onExternalPower: false, batteryPercent: 25, source: "sysfs")))
        #expect(Self.plan(at25)?.gate.doors["tus"] == .open)
        let at15 = lowState.decide(now: Self.noon, inputs: .init(power: .init(onExternalPower: false, batteryPercent: 15, source: "sysfs")))
        #expect(Self.plan(at15)?.gate.doors["tus"] == nil)
        #expect(at15.contains { if case .stopAtChunk(job.id, .power, _) = $0 { true } else { false } })
    }

    @Test("jobs are claimed ahead only through doors no condition narrows: a shut destination has none and stops nothing")
    func claimAhead() throws {
        let configuration = try Self.configuration()
        let twice = 2 * SchedulerState.Settings(configuration).concurrency
        var open = SchedulerState(settings: .init(configuration))
        #expect(Self.plan(open.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.unmetered])))?.ahead == twice)
        // A metered link narrows tus's door (on_metered = "allow" still sets its terms): nothing is claimed ahead.
        var metered = SchedulerState(settings: .init(configuration))
        let narrowed = try #require(Self.plan(metered.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.metered]))))
        #expect(narrowed.gate.doors["tus"] != nil && narrowed.gate.doors["tus"] != .open && narrowed.ahead == 0)
        // Offline, tus has no door: the local directory's jobs are still claimed ahead.
        var offline = SchedulerState(settings: .init(configuration))
        let shut = try #require(Self.plan(offline.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.offline]))))
        #expect(shut.gate.doors["tus"] == nil && shut.gate.doors["local"] == .open && shut.ahead == twice)
        // Outside a window with an urgent priority, the doors let urgent jobs alone through: none ahead.
        let windowed = try Self.configuration {
            $0.schedule.windows = try UploadWindows(["22:00-06:00"])
            $0.schedule.urgentPriority = 10
        }
        var outside = SchedulerState(settings: .init(windowed))
        let urgentOnly = try #require(Self.plan(outside.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.unmetered]))))
        #expect(urgentOnly.gate.doors["tus"]?.minimumPriority == 10 && urgentOnly.ahead == 0)
    }

    @Test("a destination's own power requirement overrides the global one")
    func powerPerDestination() throws {
        let configuration = try Self.configuration {
            $0.power.require = .ac
            $0.destinations["local"]?.power = .any
        }
        var state = SchedulerState(settings: .init(configuration))
        let actions = state.decide(now: Self.noon, inputs: .init(
            linkChanges: ["tus": Self.unmetered], power: .init(onExternalPower: false, batteryPercent: 50, source: "sysfs")))
        #expect(Self.plan(actions)?.gate.doors == ["local": .open])
    }

    @Test("windows: closing stops the running transfer after its chunk, urgent jobs pass, and the next opening is known")
    func windows() throws {
        let configuration = try Self.configuration {
            $0.schedule.windows = try UploadWindows(["22:00-06:00"])
            $0.schedule.urgentPriority = 10
        }
        let night = UploadWindowTests.berlin("2026-11-24 23:00")
        let job = Self.job()
        let urgent = Self.job(priority: 10)
        var state = SchedulerState(settings: .init(configuration))
        _ = state.decide(now: night, inputs: .init(linkChanges: ["tus": Self.unmetered]))
        _ = state.claimed([job, urgent], trials: [:])
        let morning = UploadWindowTests.berlin("2026-11-25 06:00")
        let closed = state.decide(now: morning, inputs: .init())
        #expect(closed.contains { if case .stopAtChunk(job.id, .outsideWindow, _) = $0 { true } else { false } })
        #expect(!closed.contains { if case .stopAtChunk(urgent.id, _, _) = $0 { true } else { false } })
        let plan = try #require(Self.plan(closed))
        #expect(plan.gate.doors["tus"] == ClaimGate.Door(minimumPriority: 10))
        let hold = try #require(plan.holdsOtherwise.hold(.outsideWindow, on: "tus"))
        #expect(hold.until == UploadWindowTests.berlin("2026-11-25 22:00") && hold.minimumPriority == 10)
        let wake = state.nextWake(now: morning)
        #expect(wake == UploadWindowTests.berlin("2026-11-25 22:00"))

        // Without an urgent priority the door shuts.
        let strict = try Self.configuration { $0.schedule.windows = try UploadWindows(["22:00-06:00"]) }
        var strictState = SchedulerState(settings: .init(strict))
        let shut = strictState.decide(now: morning, inputs: .init(linkChanges: ["tus": Self.unmetered]))
        #expect(Self.plan(shut)?.gate.doors["tus"] == nil)
        // A destination's own windows override the global ones.
        let own = try Self.configuration {
            $0.schedule.windows = try UploadWindows(["22:00-06:00"])
            $0.destinations["tus"]?.windows = try UploadWindows(["00:00-24:00"])
        }
        var ownState = SchedulerState(settings: .init(own))
        let ownActions = ownState.decide(now: morning, inputs: .init(linkChanges: ["tus": Self.unmetered]))
        #expect(Self.plan(ownActions)?.gate.doors["tus"] == .open)
    }

    @Test("budget: spent on a metered link, transfers stop after their chunk and only `always` jobs go; unmetered, all go")
    func budget() throws {
        let budget = try #require(MeteredBudget("10MiB/day", reset: nil))
        let configuration = try Self.configuration { $0.link.meteredBudget = budget }
        let job = Self.job()
        let always = Self.job(onMetered: "always")
        var ledger = BudgetLedger.opening(budget, now: Self.noon, timeZone: Self.zone)
        ledger.add(9 << 20)
        var state = SchedulerState(settings: .init(configuration), ledger: ledger)
        let before = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.metered]))
        #expect(Self.plan(before)?.gate.doors["tus"] == .metered(below: .max))
        _ = state.claimed([job, always], trials: [:])
        // The bytes not booked yet count: 9 MiB booked and 1 MiB in flight is the whole budget.
        let spent = state.decide(now: Self.noon, inputs: .init(unbookedMetered: 1 << 20))
        #expect(spent.contains { if case .stopAtChunk(job.id, .budgetSpent, _) = $0 { true } else { false } })
        #expect(!spent.contains { if case .stopAtChunk(always.id, _, _) = $0 { true } else { false } })
        let plan = try #require(Self.plan(spent))
        #expect(plan.gate.doors["tus"] == ClaimGate.Door(budgetSpent: true))
        let hold = try #require(plan.holdsOtherwise.hold(.budgetSpent, on: "tus"))
        #expect(hold.until == UploadWindowTests.berlin("2026-11-25 00:00") && hold.detail == "10.0 MiB/day")
        #expect(plan.holdsOtherwise.holds(for: Self.job()).map(\.reason) == [.budgetSpent])
        #expect(plan.holdsOtherwise.holds(for: Self.job(onMetered: "always")).isEmpty)
        // Booked: the ledger holds it and says so.
        let booked = state.booked(metered: 1 << 20)
        #expect(booked?.used == 10 << 20)
        // Unmetered: the budget does not apply.
        let wifi = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.unmetered]))
        #expect(wifi.contains(.withdrawStop(job.id)))
        #expect(Self.plan(wifi)?.gate.doors["tus"] == .open)
        // Midnight: a new period; the ledger is stored.
        let midnight = UploadWindowTests.berlin("2026-11-25 00:00")
        let reset = state.decide(now: midnight, inputs: .init(linkChanges: ["tus": Self.metered]))
        #expect(reset.contains { if case .budgetPeriodBegan(let ledger) = $0 { ledger.used == 0 } else { false } })
        #expect(Self.plan(reset)?.gate.doors["tus"] == .metered(below: .max))
        // A destination whose policy is `always` lets its jobs without a policy go too.
        let allAlways = try Self.configuration {
            $0.link.meteredBudget = budget
            $0.destinations["tus"]?.onMetered = .always
        }
        var spentLedger = ledger
        spentLedger.add(1 << 20)
        var alwaysState = SchedulerState(settings: .init(allAlways), ledger: spentLedger)
        let alwaysActions = alwaysState.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.metered]))
        #expect(Self.plan(alwaysActions)?.gate.doors["tus"] == ClaimGate.Door(budgetSpent: true, destinationIgnoresBudget: true))
    }

    @Test("a destination that sends whole files takes on a metered link only files that fit in what the budget has left")
    func wholeFilesFit() throws {
        let budget = try #require(MeteredBudget("10MiB/day", reset: nil))
        let configuration = try Self.configuration {
            $0.link.meteredBudget = budget
            var dav = try Destination.httpPut(name: "dav", url: "https://files.example.com/{job_id}")
            dav.onMetered = .allow
            $0.destinations["dav"] = dav
        }
        var ledger = BudgetLedger.opening(budget, now: Self.noon, timeZone: Self.zone)
        ledger.add(7 << 20)
        var state = SchedulerState(settings: .init(configuration), ledger: ledger)
        let actions = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.metered, "dav": Self.metered],
                                                                 unbookedMetered: 1 << 20))
        let plan = try #require(Self.plan(actions))
        #expect(plan.gate.doors["dav"] == ClaimGate.Door(meteredBelow: .max, maximumSize: 2 << 20))
        #expect(plan.gate.doors["tus"] == .metered(below: .max), "chunked: goes, and stops at the chunk that crosses")
        let hold = try #require(plan.holdsOtherwise.hold(.budgetSpent, on: "dav"))
        #expect(hold.sizeAbove == 2 << 20 && hold.detail == "10.0 MiB/day: 2.0 MiB left")
        var large = QueueHoldsTests.job("dav", size: 3 << 20)
        large.onMetered = nil
        #expect(plan.holdsOtherwise.holds(for: large).map(\.reason) == [.budgetSpent])
        #expect(WaitingHold(hold).text(timeZone: Self.zone, now: Self.noon)
                == "metered link, budget 10.0 MiB/day: 2.0 MiB left, too little for this whole file, resets 00:00")
        #expect(plan.holdsOtherwise.holds(for: QueueHoldsTests.job("dav", size: 1 << 20)).isEmpty)
        #expect(plan.holdsOtherwise.hold(.budgetSpent, on: "tus") == nil)
        // A whole file on its way has promised its bytes: the next file must fit in what is left after it.
        _ = state.claimed([QueueHoldsTests.job("dav", size: 1 << 20)], trials: [:])
        let next = try #require(Self.plan(state.decide(now: Self.noon, inputs: .init(unbookedMetered: 1 << 20))))
        #expect(next.gate.doors["dav"]?.maximumSize == 1 << 20)
    }

    @Test("the link: metered with a deferring destination stops the transfer at once; offline back online retries")
    func link() throws {
        let configuration = try Self.configuration { $0.destinations["tus"]?.onMetered = .defer }
        let job = Self.job()
        var state = Self.running(job, configuration)
        let metered = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.metered]))
        #expect(metered.contains(.stop(job.id, .link)))
        #expect(metered.contains(.linkChanged("tus", Self.metered, first: false)))
        #expect(state.stopReason(job.id) == .link)
        _ = state.ended(job, attempt: 1, result: .failure(TransferFailure(.interrupted, code: "link", "stopped")), now: Self.noon)
        #expect(state.running.isEmpty)
        _ = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.offline]))
        let back = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.unmetered]))
        #expect(back.contains(.retryFailedNow(["tus"])))
    }

    @Test("the timetable and the link class's cap: the lower one wins, and the change is one action")
    func sendCap() throws {
        let configuration = try Self.configuration {
            $0.bandwidth.timetable = try BandwidthTimetable(["08:00,4MiB", "12:00,512KiB", "19:00,off"])
            $0.bandwidth.unmetered = 1 << 20
        }
        var state = SchedulerState(settings: .init(configuration))
        let morning = state.decide(now: UploadWindowTests.berlin("2026-11-24 09:00"),
                                   inputs: .init(linkChanges: ["tus": Self.unmetered]))
        #expect(morning.contains(.setSendCap(1 << 20, tell: true)), "the link's 1 MiB/s is below 4 MiB/s")
        let ten = state.decide(now: UploadWindowTests.berlin("2026-11-24 10:00"), inputs: .init())
        #expect(ten.filter { if case .setSendCap = $0 { true } else { false } }.isEmpty, "unchanged: said once")
        let twelve = state.decide(now: UploadWindowTests.berlin("2026-11-24 12:00"), inputs: .init())
        #expect(twelve.contains(.setSendCap(512 << 10, tell: true)))
        let evening = state.decide(now: UploadWindowTests.berlin("2026-11-24 19:00"), inputs: .init())
        #expect(evening.contains(.setSendCap(1 << 20, tell: true)), "off: the link's cap alone")
        let wake = state.nextWake(now: UploadWindowTests.berlin("2026-11-24 19:00"))
        #expect(wake == UploadWindowTests.berlin("2026-11-25 08:00"))
    }

    @Test("a cancel or a shutdown stops a transfer without blaming its destination; a clock step moves the budget period")
    func stopsAndClockSteps() throws {
        let budget = try #require(MeteredBudget("10MiB/day", reset: nil))
        let configuration = try Self.configuration { $0.link.meteredBudget = budget }
        let job = Self.job()
        var state = Self.running(job, configuration)
        state.takeLedger(BudgetLedger.opening(budget, now: Self.noon, timeZone: Self.zone))
        let stopped = state.stop(job.id, .cancel)
        #expect(stopped && state.stopReason(job.id) == .cancel)
        let stranger = state.stop(JobID.generate(), .shutdown)
        #expect(!stranger, "not running here")
        // A stopped transfer's failure is not the destination's: no breaker counts it.
        let failure = TransferFailure(.transient(retryAfter: nil), code: "http", "503", destinationFault: true)
        for _ in 0..<5 {
            var again = state
            _ = again.claimed([job], trials: [:])
            _ = again.stop(job.id, .shutdown)
            let notices = again.ended(job, attempt: 1, result: .failure(failure), now: Self.noon)
            #expect(notices.isEmpty)
            state = again
        }
        #expect(state.breakers["tus"]?.isOpen == false && state.running.isEmpty)
        // A step of the wall clock: the anchored period moves with it, and no new period begins at the step.
        _ = state.decide(now: Self.noon, inputs: .init())
        let resets = try #require(state.ledger?.resetsAt)
        state.shift(by: 86_400)
        #expect(state.ledger?.resetsAt == resets.addingTimeInterval(86_400))
        let after = state.decide(now: Self.noon.addingTimeInterval(86_400 + 60), inputs: .init())
        #expect(!after.contains { if case .budgetPeriodBegan = $0 { true } else { false } })
    }

    @Test("circuits and quotas: a breaker opens after five failures, probes when due; a 507 holds, a trial goes first")
    func circuitsAndQuotas() throws {
        let configuration = try Self.configuration()
        var state = SchedulerState(settings: .init(configuration))
        _ = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.unmetered]))
        let failure = TransferFailure(.transient(retryAfter: nil), code: "http", "503", destinationFault: true)
        var notices: [SchedulerState.Notice] = []
        for _ in 0..<5 { notices += state.ended(Self.job(), attempt: 1, result: .failure(failure), now: Self.noon) }
        #expect(notices.contains { if case .circuitOpened("tus", threshold: 5, _) = $0 { true } else { false } })
        let open = state.decide(now: Self.noon, inputs: .init())
        #expect(Self.plan(open)?.gate.doors["tus"] == nil)
        let probeAt = try #require(state.breakers["tus"]?.nextProbeAt)
        let due = state.decide(now: probeAt, inputs: .init())
        #expect(due.contains(.probe("tus")))
        let answered = state.probeFinished("tus", answered: true, now: probeAt)
        #expect(answered == .probeAnswered("tus"))
        let closed = state.decide(now: probeAt, inputs: .init())
        #expect(Self.plan(closed)?.gate.doors["tus"] == .open)

        let full = Self.job()
        let quota = TransferFailure(.transient(retryAfter: nil), code: TransferFailure.quotaFullCode, "507")
        let told = state.ended(full, attempt: 1, result: .failure(quota), now: Self.noon)
        #expect(told.contains { if case .held("tus", .held(.init(reason: .quotaFull), _)) = $0 { true } else { false } })
        let held = try #require(Self.plan(state.decide(now: Self.noon, inputs: .init())))
        #expect(held.gate.doors["tus"] == nil && held.trials.isEmpty)
        #expect(held.holdsOtherwise.hold(.quotaFull, on: "tus") != nil)
        let trialAt = Self.noon.addingTimeInterval(3600)
        let trial = try #require(Self.plan(state.decide(now: trialAt, inputs: .init())))
        #expect(trial.trials.map(\.name) == ["tus"] && trial.trials.first?.gate.doors == ["tus": .open])
    }

    @Test("a portal's answers are tried again at most a minute apart; a proof that failed otherwise waits as a circuit does")
    func unverifiedTiming() throws {
        let configuration = try Self.configuration()  // circuit_probe_interval 30 s, at most 300 s
        func waits(_ failure: TransferFailure) throws -> [TimeInterval] {
            var state = SchedulerState(settings: .init(configuration))
            _ = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.unmetered]))
            var now = Self.noon
            _ = state.ended(Self.job(), attempt: 1, result: .failure(failure), now: now)
            var gaps: [TimeInterval] = []
            for _ in 0..<6 {
                let due = try #require(state.refusals.breakers["tus"]?.nextProbeAt)
                gaps.append(due.timeIntervalSince(now))
                let plan = try #require(Self.plan(state.decide(now: due, inputs: .init())))
                #expect(plan.trials.map(\.name) == ["tus"])
                let trial = Self.job()
                _ = state.claimed([trial], trials: ["tus": trial.id])
                now = due
                _ = state.ended(trial, attempt: 1, result: .failure(failure), now: now)
            }
            return gaps
        }
        let portal = try waits(TransferFailure.unverified("a portal answered", portal: true))
        #expect(portal.first == 30 && portal.allSatisfy { $0 <= 60 }, "\(portal)")
        let proof = try waits(TransferFailure.unverified("the HEAD shows 1000 bytes"))
        #expect(proof.first == 30 && proof.last == 300, "\(proof)")
    }

    @Test("an unverified answer holds the destination with its words, opens no circuit, and one trial goes when due")
    func unverifiedAnswer() throws {
        let configuration = try Self.configuration()
        var state = SchedulerState(settings: .init(configuration))
        _ = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.unmetered]))
        let portal = TransferFailure.unverified("a captive portal answered PATCH for destination \"tus\"")
        var told: [SchedulerState.Notice] = []
        for _ in 0..<6 { told += state.ended(Self.job(), attempt: 1, result: .failure(portal), now: Self.noon) }
        #expect(!told.contains { if case .circuitOpened = $0 { true } else { false } }, "a portal is not a dead server")
        #expect(state.breakers["tus"]?.isOpen == false)
        let held = try #require(Self.plan(state.decide(now: Self.noon, inputs: .init())))
        #expect(held.gate.doors["tus"] == nil && held.trials.isEmpty)
        let hold = try #require(held.holdsOtherwise.hold(.unverifiedAnswer, on: "tus"))
        #expect(hold.detail == portal.message)
        #expect(WaitingHold(hold).text(timeZone: Self.zone, now: Self.noon)
                == "unverified answer (one upload tries again now and then): " + portal.message)
        #expect(held.holdsOtherwise.holds(for: Self.job()).map(\.reason) == [.unverifiedAnswer])
        // The local directory is not held by what answered for the tus server.
        #expect(held.gate.doors["local"] == .open)
        let trialAt = Self.noon.addingTimeInterval(3600)
        let trial = try #require(Self.plan(state.decide(now: trialAt, inputs: .init())))
        #expect(trial.trials.map(\.name) == ["tus"])
        let job = Self.job()
        _ = state.claimed([job], trials: ["tus": job.id])
        let cleared = state.ended(job, attempt: 1, result: .success(UploadOutcome(remoteURL: "https://x/1")), now: trialAt)
        #expect(cleared.contains { if case .held("tus", .cleared(.unverifiedAnswer)) = $0 { true } else { false } })
        let open = try #require(Self.plan(state.decide(now: trialAt, inputs: .init())))
        #expect(open.gate.doors["tus"] == .open && open.holdsOtherwise.hold(.unverifiedAnswer, on: "tus") == nil)
    }

    @Test("the loop's bookkeeping: ends wait in the state until recorded, told once; cancels go alone; a clock step moves them")
    func unsettledEnds() throws {
        let configuration = try Self.configuration()
        let (done, cancelled) = (Self.job(), Self.job())
        var state = Self.running(done, configuration)
        _ = state.claimed([cancelled], trials: [:])
        let stopped = state.stop(cancelled.id, .cancel)
        #expect(stopped)
        _ = state.ended(done, attempt: 2, result: .success(UploadOutcome(remoteURL: "https://x/1")), now: Self.noon)
        _ = state.ended(cancelled, attempt: 1, result: .failure(TransferFailure(.interrupted, code: "cancel", "cancelled")),
                        now: Self.noon)
        #expect(state.running.isEmpty && state.unsettled.count == 2)
        let ends = state.unsettledEnds
        #expect(ends.together.map(\.job.id) == [done.id] && ends.together.first?.attempt == 2)
        #expect(ends.alone.map(\.job.id) == [cancelled.id] && ends.alone.first?.stop == .cancel)
        // The database refuses: said once, however many rounds it takes.
        let (first, second) = (state.endNotRecorded(done.id), state.endNotRecorded(done.id))
        #expect(first && !second)
        // A spell of failures lasts while an end waits, a cancel recorded in the background included.
        let clock = ContinuousClock.now
        let failed = state.storeFailed("disk full", diskFull: true, at: clock)
        #expect(failed == [.releaseReserve, .report("disk full", diskFull: true)])
        state.cancelRecording(cancelled.id)
        let bothWait = state.roundSucceeded(at: clock)
        #expect(!bothWait.contains(.recovered), "two ends still wait")
        state.endRecorded(done.id)
        let cancelWaits = state.roundSucceeded(at: clock)
        #expect(!cancelWaits.contains(.recovered), "the cancel is still being recorded")
        state.cancelRecordingEnded(cancelled.id, kept: state.unsettled[cancelled.id] ?? ends.alone[0])
        #expect(state.unsettled[cancelled.id] != nil, "kept for a later round")
        // A step of the wall clock moves the kept end's time and this process's era of due times.
        let era = state.clockEraStart
        state.shift(by: 3600)
        #expect(state.unsettled[cancelled.id]?.at == Self.noon.addingTimeInterval(3600))
        #expect(state.clockEraStart == era.addingTimeInterval(3600))
        state.endRecorded(cancelled.id)
        let recovered = state.roundSucceeded(at: clock)
        #expect(recovered.contains(.recovered))
        // Told again after a new spell.
        _ = state.ended(done, attempt: 3, result: .success(UploadOutcome(remoteURL: "https://x/1")), now: Self.noon)
        let toldAgain = state.endNotRecorded(done.id)
        #expect(toldAgain)
    }

    @Test("the loop's sleep: until the next due retry with a free slot, at most the poll, soon for bytes to book when idle")
    func sleep() throws {
        let start = ContinuousClock.now
        var state = SchedulerState(settings: .init(try Self.configuration()), now: Self.noon, clock: start)
        _ = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.unmetered], clock: start))
        #expect(state.sleep(now: Self.noon, clock: start, poll: .seconds(5), unbooked: false) == .seconds(5))
        state.nextDueRead(Self.noon.addingTimeInterval(3))
        #expect(state.sleep(now: Self.noon, clock: start, poll: .seconds(5), unbooked: false) == .seconds(3))
        state.nextDueRead(Self.noon.addingTimeInterval(-30))
        #expect(state.sleep(now: Self.noon, clock: start, poll: .seconds(5), unbooked: false) == .milliseconds(10),
                "overdue: at once, not a busy loop")
        state.nextDueRead(nil)
        // Bytes counted and not booked: within a second of the last booking while nothing runs.
        #expect(state.sleep(now: Self.noon, clock: start + .milliseconds(400), poll: .seconds(5), unbooked: true)
                == .milliseconds(600))
        #expect(!state.bookingDue(at: start + .milliseconds(400)) && state.bookingDue(at: start + .seconds(1)))
        state.trafficBooked(at: start + .seconds(1))
        #expect(!state.bookingDue(at: start + .milliseconds(1500)))
        // While a transfer runs, its end wakes the loop (and books): no earlier wake for the bytes.
        _ = state.claimed([Self.job()], trials: [:])
        #expect(state.sleep(now: Self.noon, clock: start + .seconds(1), poll: .seconds(5), unbooked: true) == .seconds(5))
    }

    @Test("stray destinations are looked for at the start and once a minute; what was found stands in between")
    func strays() throws {
        let start = ContinuousClock.now
        var state = SchedulerState(settings: .init(try Self.configuration()), now: Self.noon, clock: start)
        #expect(state.straysDue(at: start))
        let first = try #require(Self.plan(state.decide(now: Self.noon, inputs: .init(strays: ["gone"], clock: start))))
        #expect(first.gate.doors["gone"] == .open)
        #expect(!state.straysDue(at: start + .seconds(59)))
        let between = try #require(Self.plan(state.decide(now: Self.noon, inputs: .init(clock: start + .seconds(30)))))
        #expect(between.gate.doors["gone"] == .open, "not looked for: the last ones found stand")
        #expect(state.straysDue(at: start + .seconds(60)))
    }

    @Test("the send cap: none at the start is not told; a change is")
    func sendCapTold() throws {
        var state = SchedulerState(settings: .init(try Self.configuration()))
        let first = state.decide(now: Self.noon, inputs: .init(linkChanges: ["tus": Self.unmetered]))
        #expect(first.contains(.setSendCap(0, tell: false)))
        let again = state.decide(now: Self.noon, inputs: .init())
        #expect(!again.contains { if case .setSendCap = $0 { true } else { false } })
    }
}
