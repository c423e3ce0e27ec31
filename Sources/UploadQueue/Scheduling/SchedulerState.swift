import Foundation

/// Everything the scheduler decides with, in one value: the links, the running transfers and why any of them is
/// being stopped, the circuits and quotas, the device's constraints (power, windows, the bandwidth timetable, the
/// metered budget), what was last recorded, and the loop's own bookkeeping (the transfer ends waiting to be
/// recorded, the next due retry, the stray destinations, when traffic was booked, whether the queue takes writes).
/// Its decisions are pure: `decide(now:inputs:)` takes what the world says and returns the actions to take, and
/// the events (`ended`, `probeFinished`, `claimed`…) return what to say. The `Scheduler` actor only gathers the
/// inputs, performs the actions and holds the tasks it started, the way async-http-client's connection-pool state
/// machine drives its pool.
///
/// | input                                  | running transfer                                  | waiting jobs                              |
/// |----------------------------------------|---------------------------------------------------|-------------------------------------------|
/// | the link goes offline or metered and the job may not go on it | `stop` at once (resumes from its offset) | the gate shuts or narrows; a hold says why |
/// | the power no longer meets the requirement | `stopAtChunk` (`power`)                         | the gate shuts (`power`)                  |
/// | a window closes                        | `stopAtChunk` unless urgent (`outside-window`)    | only urgent jobs pass (`outside-window`)  |
/// | the metered budget is spent            | `stopAtChunk` unless `always` (`budget-spent`)    | only `always` jobs pass (`budget-spent`)  |
/// | a constraint clears before the chunk ends | `withdrawStop`                                 | the gate opens again                      |
/// | the timetable or the link class changes the cap | `setSendCap` (the lower of both)         | —                                         |
/// | a probe or a quota trial is due        | —                                                 | `probe`; the trial's job first in `claim` |
struct SchedulerState: Sendable {
    /// What the configuration says, read once.
    struct Settings: Sendable {
        var destinations: [String: Destination]
        var concurrency: Int
        var bandwidth: Configuration.Bandwidth
        var power: PowerSettings
        var schedule: Configuration.Schedule
        var budget: MeteredBudget?

        init(_ configuration: Configuration) {
            destinations = configuration.destinations
            concurrency = configuration.limits.concurrency
            bandwidth = configuration.bandwidth
            power = configuration.power
            schedule = configuration.schedule
            budget = configuration.link.meteredBudget
        }

        var week: LocalWeek { LocalWeek(timeZone: schedule.timeZone) }

        func powerRequirement(for name: String) -> PowerRequirement {
            destinations[name]?.power ?? power.require
        }

        func windows(for name: String) -> UploadWindows {
            destinations[name]?.windows ?? schedule.windows
        }

        /// Whether any destination requires something of the power (else it is never read).
        var needsPower: Bool {
            destinations.keys.contains { powerRequirement(for: $0) != .any }
        }
    }

    /// A transfer running now.
    struct Running: Sendable, Equatable {
        var job: Job
        /// Why the scheduler stopped it at once (a cancel, the link, a shutdown).
        var stop: TransferStop?
        /// The constraint it was asked to stop at its next chunk for.
        var constraintStop: WaitingReason?
    }

    /// What the world says this round.
    struct Inputs: Sendable {
        /// Links whose class changed since the last round (or that were looked at for the first time).
        var linkChanges: [String: LinkStatus] = [:]
        /// The power state, when some destination requires something of it.
        var power: PowerState?
        /// Bytes sent over metered links and not booked yet.
        var unbookedMetered: Int64 = 0
        /// Destinations of runnable jobs that are not configured, when they were looked for this round (nil: the
        /// last ones found stand; see `straysDue(at:)`).
        var strays: Set<String>?
        /// The monotonic clock now (when the strays were looked for).
        var clock: ContinuousClock.Instant = .now
    }

    /// What the scheduler does this round, in order.
    enum Action: Sendable, Equatable {
        /// Tell of a link's class (`first`: the first look at it).
        case linkChanged(String, LinkStatus, first: Bool)
        /// These destinations came back online: their failed jobs are due now.
        case retryFailedNow(Set<String>)
        /// The power changed.
        case powerChanged(PowerState)
        /// A new budget period began: store the ledger.
        case budgetPeriodBegan(BudgetLedger)
        /// Stop this transfer at once (it resumes from its confirmed offset).
        case stop(JobID, TransferStop)
        /// Stop this transfer before its next chunk, for `reason`, told in `message`.
        case stopAtChunk(JobID, WaitingReason, String)
        /// The constraint cleared before the transfer's next chunk: let it go on.
        case withdrawStop(JobID)
        /// Send no faster than this (bytes per second, 0 for no cap); `tell`: a change worth a line in the log (no
        /// cap at the start is not news).
        case setSendCap(Int64, tell: Bool)
        /// Probe this destination's open circuit.
        case probe(String)
        /// Claim jobs for the free slots and record the holds (in the round's transaction).
        case claim(ClaimPlan)
    }

    /// The claims of a round: a trial for each full destination due one, then jobs through the gate, and the holds
    /// to record with them.
    struct ClaimPlan: Sendable, Equatable {
        /// Free slots.
        var limit: Int
        var gate: ClaimGate
        /// Full destinations whose trial is due, each with the gate of its own door.
        var trials: [(name: String, gate: ClaimGate)]
        /// The holds when the claims fill every slot, and when they do not.
        var holdsWhenFull: QueueHolds
        var holdsOtherwise: QueueHolds
        /// How many jobs may wait claimed for the next free slots (`JobLifecycle.Event.claimAhead`), so that a
        /// transfer that ends hands its slot on at once instead of waiting for the round that refills it: twice
        /// the slots, so that the round can wait until half of them went and record that many ends at once. Only
        /// through a gate open everywhere, without trials (any condition that narrows a door is decided at each
        /// round, where jobs claimed ahead would go past it): 0 otherwise.
        var ahead = 0

        static func == (lhs: ClaimPlan, rhs: ClaimPlan) -> Bool {
            lhs.limit == rhs.limit && lhs.ahead == rhs.ahead && lhs.gate == rhs.gate
                && lhs.trials.map(\.name) == rhs.trials.map(\.name)
                && lhs.trials.map(\.gate) == rhs.trials.map(\.gate) && lhs.holdsWhenFull == rhs.holdsWhenFull
                && lhs.holdsOtherwise == rhs.holdsOtherwise
        }
    }

    /// Something to tell after an event.
    enum Notice: Sendable, Equatable {
        case circuitOpened(String, threshold: Int, probeIn: Duration)
        case circuitClosed(String)
        case probeAnswered(String)
        case probeUnanswered(String, next: Date?)
        case held(String, TrialWatch.Change)
        case trialStarted(String, JobID)
        case trialNothingToTry(String)
    }

    let settings: Settings
    /// The link to each destination as last seen; a destination missing here has not been looked at yet.
    private(set) var links: [String: LinkStatus] = [:]
    private(set) var running: [JobID: Running] = [:]
    private(set) var breakers: [String: CircuitBreaker]
    /// Destinations whose storage is full (`quota-full`) or whose answers proved nothing (`unverified-answer`):
    /// their jobs wait, one tries again now and then.
    private(set) var refusals = TrialWatch()
    /// The power as last read (nil: not read, as nothing requires it).
    private(set) var power: PowerState?
    /// The metered budget's ledger (nil without a budget, or before it was loaded).
    private(set) var ledger: BudgetLedger?
    /// Bytes sent over metered links and not booked yet, as the last round read them.
    private(set) var unbookedMetered: Int64 = 0
    /// The send cap in force.
    private(set) var appliedCap: Int64?
    /// The holds last recorded; written again only when they change.
    private(set) var recordedHolds: QueueHolds?
    /// Each destination's window state and until when it holds (computed again when that time comes).
    private var windowCache: [String: (open: Bool, until: Date?)] = [:]
    /// The timetable's cap and until when it holds.
    private var timetableCache: (rate: Int64?, until: Date?)?
    /// The conditions the last `decide` saw (what `nextWake` judges trials by, without working them out again).
    private var lastConditions: [String: DestinationConditions] = [:]
    /// The links as they were before the last round's changes (what the bytes sent until then are booked under).
    private(set) var linksBefore: [String: LinkStatus] = [:]

    // The loop's bookkeeping.

    /// Ends of transfers not recorded yet: those of the last moments, written together by the next round (group
    /// commit), and those the database could not take (a full disk), tried again every round until they are
    /// recorded, so an upload the server confirmed is never sent again. Their rows stay `uploading` meanwhile,
    /// which no claim takes.
    private(set) var unsettled: [JobID: Settlement] = [:]
    /// Cancelled transfers whose end is being recorded in the background (unsettled too until it is written).
    private(set) var recordingCancels: Set<JobID> = []
    /// Unrecorded transfer ends already told of in the log (once each).
    private var toldUnrecorded: Set<JobID> = []
    /// When the first retryable failure is due, as the last round read it.
    private(set) var nextDue: Date?
    /// Destinations of runnable jobs that are not configured, as last looked for (at the start and once a minute:
    /// a retry that comes due, `uploadq retry`, or a CLI with another config can make more). Their jobs are
    /// claimed and fail with a clear reason instead of waiting for ever.
    private(set) var strays: Set<String> = []
    private var straysLookedAt: ContinuousClock.Instant?
    /// When the bytes sent were last booked into the database.
    private var trafficBookedAt: ContinuousClock.Instant
    /// Whether the ledger holds a change a write could not take yet (stored with the next booking).
    private(set) var ledgerUnsaved = false
    /// Whether the queue takes writes: a spell of failures is said once, and once more when it is over.
    private(set) var health = StoreHealth()
    /// Since when (on the wall clock in force) this process has written due times: only those were written under
    /// a clock that stepped. Rows from before it were written under the clock of their own time, which may be the
    /// right one (a device without a real-time clock starts in 1970 and is then set right).
    private(set) var clockEraStart: Date

    /// How often the strays are looked for.
    static let strayInterval = Duration.seconds(60)
    /// How often the bytes sent are booked while transfers run (and how soon after the last one ends).
    static let bookingInterval = Duration.seconds(1)

    init(settings: Settings, ledger: BudgetLedger? = nil, now: Date = Date(), clock: ContinuousClock.Instant = .now) {
        self.settings = settings
        self.ledger = ledger
        breakers = settings.destinations.mapValues { CircuitBreaker(policy: $0.circuitBreaker) }
        trafficBookedAt = clock
        clockEraStart = now.addingTimeInterval(-1)
    }

    /// The stored budget ledger, read once the database could be read.
    mutating func takeLedger(_ stored: BudgetLedger) {
        ledger = stored
    }

    // MARK: Decisions

    /// Takes in what the world says, and returns what to do this round.
    mutating func decide(now: Date, inputs: Inputs) -> [Action] {
        var actions: [Action] = []
        linksBefore = links
        if let found = inputs.strays {
            strays = found
            straysLookedAt = inputs.clock
        }
        var cameBack: Set<String> = []
        for (name, status) in inputs.linkChanges.sorted(by: { $0.key < $1.key }) {
            let before = links[name]
            links[name] = status
            // Back from offline, or out from behind a portal: failed jobs are due now, and what the portal answered
            // is forgotten.
            let away: Set<LinkStatus.LinkClass> = [.offline, .portal]
            if let before, away.contains(before.linkClass), !away.contains(status.linkClass) { cameBack.insert(name) }
            actions.append(.linkChanged(name, status, first: before == nil))
        }
        if !cameBack.isEmpty {
            actions.append(.retryFailedNow(cameBack))
            for name in cameBack {
                breakers[name] = CircuitBreaker(policy: settings.destinations[name]?.circuitBreaker ?? CircuitBreakerPolicy())
                refusals.forgetUnverified(name)
            }
        }
        if let reading = inputs.power, reading != power {
            // Told when the feed changes or a requirement is met or lost, not at every percent.
            let settings = settings
            let held = { (state: PowerState?) in
                Set(settings.destinations.keys.filter { state?.unmet(settings.powerRequirement(for: $0)) != nil })
            }
            let told = power == nil || power?.isExternal != reading.isExternal || held(power) != held(reading)
            power = reading
            if told { actions.append(.powerChanged(reading)) }
        }
        if let budget = settings.budget, var current = ledger {
            if current.follow(now: now, budget: budget, timeZone: settings.schedule.timeZone) {
                actions.append(.budgetPeriodBegan(current))
            }
            ledger = current
        }
        unbookedMetered = inputs.unbookedMetered
        let conditions = conditions(now: now)
        lastConditions = conditions
        actions += stops(conditions)
        if let cap = sendCap(now: now), cap != appliedCap {
            actions.append(.setSendCap(cap, tell: cap != (appliedCap ?? 0)))
            appliedCap = cap
        }
        for name in breakers.keys.sorted() where breakers[name]?.startProbeIfDue(now: now) == true {
            actions.append(.probe(name))
        }
        actions.append(.claim(claimPlan(conditions, now: now, strays: strays)))
        return actions
    }

    /// Each destination's conditions now (see `DestinationConditions`).
    mutating func conditions(now: Date) -> [String: DestinationConditions] {
        var result: [String: DestinationConditions] = [:]
        // What is left of the metered budget, and its hold when it is all spent.
        var left: (bytes: Int64, budget: MeteredBudget, resetsAt: Date)?
        if let budget = settings.budget, let ledger {
            left = (max(0, budget.bytes - ledger.used - unbookedMetered), budget, ledger.resetsAt)
        }
        // For whole files: less what the whole files on their way will still send, in steps of 64 KiB (so the
        // hold that says it is not written again at every booking).
        var leftForWholeFiles: Int64 = 0
        if let left {
            let promised = running.values.reduce(Int64(0)) { sum, entry in
                let job = entry.job
                guard let destination = settings.destinations[job.destination], destination.sendsWholeFiles,
                      links[job.destination]?.linkClass == .metered,
                      !Self.ignoresBudget(job, DestinationConditions(onMetered: destination.onMetered)) else { return sum }
                return sum + max(0, job.size - job.bytesConfirmed)
            }
            leftForWholeFiles = max(0, left.bytes - promised) / (64 << 10) * (64 << 10)
        }
        for (name, destination) in settings.destinations {
            var condition = DestinationConditions()
            condition.linkClass = destination.isNetwork ? links[name]?.linkClass : nil
            condition.onMetered = destination.onMetered
            condition.circuitOpen = breakers[name]?.isOpen ?? false
            if let held = refusals.heldDestinations[name] {
                switch held.reason {
                case .unverifiedAnswer: condition.unverifiedAnswer = held.detail ?? "an answer that proves nothing"
                default: condition.quotaFull = true
                }
            }
            condition.power = power?.unmet(settings.powerRequirement(for: name))
            let window = window(of: name, now: now)
            if !window.open {
                condition.outsideWindow = .init(opensAt: window.until, urgentPriority: settings.schedule.urgentPriority)
            }
            if condition.linkClass == .metered, let left {
                if left.bytes == 0 {
                    condition.budgetSpent = .init(budget: left.budget.description, resetsAt: left.resetsAt)
                } else if destination.sendsWholeFiles {
                    // A whole file cannot stop half-way: only one that fits in what is left may start.
                    condition.budgetSpent = .init(budget: left.budget.description, resetsAt: left.resetsAt,
                                                  sizeAbove: leftForWholeFiles)
                }
            }
            result[name] = condition
        }
        return result
    }

    /// Whether `name`'s windows are open now, and until when that holds.
    private mutating func window(of name: String, now: Date) -> (open: Bool, until: Date?) {
        // No time of change: open (or shut) all week.
        if let cached = windowCache[name], cached.until.map({ now < $0 }) ?? true { return cached }
        let windows = settings.windows(for: name)
        let week = settings.week
        let state = (open: windows.isOpen(at: now, in: week), until: windows.nextChange(after: now, in: week))
        windowCache[name] = state
        return state
    }

    /// Why a running job must stop for a constraint now, with the words for it; nil when it may go on.
    func constraintStop(_ job: Job, _ conditions: [String: DestinationConditions]) -> (WaitingReason, String)? {
        guard let condition = conditions[job.destination] else { return nil }
        if let power = condition.power {
            return (.power, "stopped after its chunk for the power: \(power); it resumes from its confirmed offset")
        }
        if let window = condition.outsideWindow, job.priority < window.urgentPriority ?? .max {
            return (.outsideWindow, "stopped after its chunk: outside its upload windows; it resumes from its "
                + "confirmed offset when one opens")
        }
        if let spent = condition.budgetSpent, spent.sizeAbove == nil, !Self.ignoresBudget(job, condition) {
            return (.budgetSpent, "stopped after its chunk: the metered budget (\(spent.budget)) is spent; it resumes "
                + "from its confirmed offset when the budget resets or the link is unmetered")
        }
        return nil
    }

    /// Whether a job goes on a metered link even when the budget is spent (`always`, its own or its destination's).
    static func ignoresBudget(_ job: Job, _ condition: DestinationConditions) -> Bool {
        job.onMetered.map { $0 == "always" } ?? condition.onMetered.ignoresBudget
    }

    /// The running transfers the link or a constraint no longer allows (and those whose constraint cleared).
    private mutating func stops(_ conditions: [String: DestinationConditions]) -> [Action] {
        var actions: [Action] = []
        for id in running.keys.sorted(by: { $0.rawValue < $1.rawValue }) {
            guard var entry = running[id], entry.stop == nil else { continue }
            let job = entry.job
            if let destination = settings.destinations[job.destination], let link = links[job.destination],
               LinkPolicy.waitingReason(for: job, destination: destination, link: link) != nil {
                entry.stop = .link
                actions.append(.stop(id, .link))
            } else if let (reason, message) = constraintStop(job, conditions) {
                if entry.constraintStop != reason {
                    entry.constraintStop = reason
                    actions.append(.stopAtChunk(id, reason, message))
                }
            } else if entry.constraintStop != nil {
                entry.constraintStop = nil
                actions.append(.withdrawStop(id))
            }
            running[id] = entry
        }
        return actions
    }

    /// The send cap now: the link class's of the running transfers, and the timetable's, the lower one.
    private mutating func sendCap(now: Date) -> Int64? {
        let metered = running.values.contains { links[$0.job.destination]?.linkClass == .metered }
        let linkCap = metered ? settings.bandwidth.metered : settings.bandwidth.unmetered
        guard let rate = timetableRate(now: now) else { return linkCap }
        return BandwidthTimetable.lower(linkCap, rate)
    }

    private mutating func timetableRate(now: Date) -> Int64? {
        let timetable = settings.bandwidth.timetable
        guard !timetable.isEmpty else { return nil }
        // No time of change: the cap is the same all week.
        if let cached = timetableCache, cached.until.map({ now < $0 }) ?? true { return cached.rate }
        let week = settings.week
        let rate = timetable.rate(at: now, in: week)
        timetableCache = (rate, timetable.nextChange(after: now, in: week))
        return rate
    }

    /// The round's claims: trials first, then the gate; and the holds either way.
    private mutating func claimPlan(_ conditions: [String: DestinationConditions], now: Date, strays: Set<String>)
        -> ClaimPlan
    {
        let free = max(0, settings.concurrency - running.count)
        // A trial goes through its destination's own door: everything but the refusal still counts.
        let unrefused = Self.withoutRefusals(conditions)
        let eligible = Set(refusals.heldDestinations.keys.filter { unrefused[$0].map { !$0.isShut } ?? false })
        let trials = refusals.dueTrials(now: now, limit: free, among: eligible)
        let everyDoor = ClaimGate.make(conditions: unrefused).doors
        let gate = ClaimGate.make(conditions: conditions, strays: strays)
        // Destinations that are shut have no door: none of their jobs is claimed, ahead or not.
        let openEverywhere = !gate.doors.isEmpty && gate.doors.values.allSatisfy { $0 == .open }
        return ClaimPlan(
            limit: free,
            gate: gate,
            trials: trials.map { name in (name, ClaimGate(doors: everyDoor.filter { $0.key == name })) },
            holdsWhenFull: QueueHolds.make(conditions: conditions, slotsFull: true),
            holdsOtherwise: QueueHolds.make(conditions: conditions, slotsFull: false),
            ahead: openEverywhere && trials.isEmpty && refusals.heldDestinations.isEmpty ? 2 * settings.concurrency : 0)
    }

    /// The largest file claimed ahead for a free slot: a larger one waits for a slot of its own (its transfer
    /// outlasts a round anyway). A job of higher priority enqueued meanwhile waits for the jobs claimed before it:
    /// at most twice `concurrency` files of at most this size.
    static let claimAheadLargest: Int64 = 1 << 20

    /// The longest wait between two trials of a destination a captive portal answered for.
    static let longestPortalWait = Duration.seconds(60)

    /// The conditions with the refusals (a full storage, an unverified answer) lifted: the door a trial goes through.
    private static func withoutRefusals(_ conditions: [String: DestinationConditions]) -> [String: DestinationConditions] {
        conditions.mapValues { condition in
            var lifted = condition
            lifted.quotaFull = false
            lifted.unverifiedAnswer = nil
            return lifted
        }
    }

    /// When the scheduler must look again at the latest: a retry (`nextDue`, when a slot is free), a probe, a
    /// trial, a window or the timetable changing, the budget resetting.
    func nextWake(now: Date) -> Date? {
        var times: [Date] = []
        let slotsFull = running.count >= settings.concurrency
        if !slotsFull, let nextDue { times.append(nextDue) }
        times += breakers.values.compactMap(\.nextProbeAt)
        if !slotsFull {
            let unrefused = Self.withoutRefusals(lastConditions)
            let eligible = Set(refusals.heldDestinations.keys.filter { unrefused[$0].map { !$0.isShut } ?? false })
            if let trial = refusals.nextTrialAt(among: eligible) { times.append(trial) }
        }
        times += windowCache.values.compactMap(\.until)
        if let until = timetableCache?.until { times.append(until) }
        if settings.budget != nil, let resetsAt = ledger?.resetsAt { times.append(resetsAt) }
        // The power needs no wake-up of its own: running transfers read it before each chunk, and the loop's poll
        // interval brings waiting jobs back soon after the charger is.
        return times.min()
    }

    /// How long the loop sleeps unless woken: until `nextWake`, at most `poll` (in case a wake-up was missed), at
    /// least 10 ms. Bytes the engine counted and the database does not hold yet (`unbooked`) are booked within a
    /// second once no transfer runs, so `status` and the budget's ledger on disk catch up even when nothing else
    /// moves (while transfers run, the rounds they cause book them).
    func sleep(now: Date, clock: ContinuousClock.Instant, poll: Duration, unbooked: Bool) -> Duration {
        let due = nextWake(now: now).map { Duration.seconds($0.timeIntervalSince(now)) } ?? poll
        var wait = min(max(due, .milliseconds(10)), poll)
        if running.isEmpty, unbooked {
            wait = min(wait, max(Self.bookingInterval - (clock - trafficBookedAt), .milliseconds(10)))
        }
        return wait
    }

    /// Whether the stray destinations are due to be looked for.
    func straysDue(at clock: ContinuousClock.Instant) -> Bool {
        straysLookedAt.map { clock - $0 >= Self.strayInterval } ?? true
    }

    /// Whether the stored budget ledger still has to be read (tried every round until it is).
    var needsLedger: Bool { settings.budget != nil && ledger == nil }

    /// Whether the bytes sent are due to be booked (at most once a second while transfers run).
    func bookingDue(at clock: ContinuousClock.Instant) -> Bool {
        clock - trafficBookedAt >= Self.bookingInterval
    }

    /// The bytes sent were booked (or a link change booked them under the classes before it).
    mutating func trafficBooked(at clock: ContinuousClock.Instant) {
        trafficBookedAt = clock
    }

    /// The round read when the first retryable failure is due.
    mutating func nextDueRead(_ due: Date?) {
        nextDue = due
    }

    /// Whether a ledger write went through (one that did not is made with the next booking).
    mutating func ledgerStored(_ stored: Bool) {
        ledgerUnsaved = !stored
    }

    // MARK: Events

    /// Jobs claimed this round; `trials` names the job each due trial took (nil: none to try).
    mutating func claimed(_ jobs: [Job], trials: [String: JobID?]) -> [Notice] {
        for job in jobs { running[job.id] = Running(job: job) }
        var notices: [Notice] = []
        for (name, job) in trials.sorted(by: { $0.key < $1.key }) {
            if let job {
                refusals.started(name, job: job)
                notices.append(.trialStarted(name, job))
            } else if refusals.nothingToTry(name) != nil {
                notices.append(.trialNothingToTry(name))
            }
        }
        return notices
    }

    /// The round's transaction failed: its due trials are due again at `retryAt`.
    mutating func trialsNotStarted(_ names: [String], retryAt: Date) {
        for name in names { refusals.trialNotStarted(name, retryAt: retryAt) }
    }

    /// The holds were recorded.
    mutating func holdsRecorded(_ holds: QueueHolds) {
        recordedHolds = holds
    }

    /// Stops a running transfer at once (a cancel, a shutdown); false when it is not running here.
    mutating func stop(_ id: JobID, _ reason: TransferStop) -> Bool {
        guard running[id] != nil else { return false }
        running[id]?.stop = reason
        return true
    }

    /// Why the scheduler stopped a transfer, if it did.
    func stopReason(_ id: JobID) -> TransferStop? {
        running[id]?.stop
    }

    /// A transfer ended: feeds its destination's circuit breaker and trial watch, forgets it as running, and keeps
    /// its end for the next round to record (together with the others that ended meanwhile; until then its row
    /// stays `uploading`, which no claim takes). Returns what to tell.
    mutating func ended(_ job: Job, attempt: Int, result: Result<UploadOutcome, TransferFailure>, now: Date) -> [Notice] {
        let stop = running[job.id]?.stop
        running[job.id] = nil
        unsettled[job.id] = Settlement(job: job, attempt: attempt, result: result, stop: stop, at: now)
        var notices: [Notice] = []
        switch result {
        case .success: notices += breakerUpdate(job.destination, failure: nil, now: now)
        case .failure(let failure) where stop == nil || failure.kind == .permanent:
            notices += breakerUpdate(job.destination, failure: failure, now: now)
        case .failure: break
        }
        let name = job.destination
        let change: TrialWatch.Change?
        let policy = settings.destinations[name]?.circuitBreaker ?? CircuitBreakerPolicy()
        switch result {
        case .failure(let failure) where failure.code == TransferFailure.quotaFullCode:
            change = refusals.refused(name, .init(reason: .quotaFull), job: job.id, policy: policy, now: now)
        case .failure(let failure) where failure.isUnverified:
            // A portal goes when a person logs in: its trials come at most a minute apart. A proof that failed
            // otherwise (a size, a digest) waits as a circuit does, or whole files would go every minute.
            var trialPolicy = policy
            if failure.bearsPortalMarks {
                trialPolicy.maximumProbeInterval = min(policy.maximumProbeInterval, Self.longestPortalWait)
                trialPolicy.probeInterval = min(policy.probeInterval, trialPolicy.maximumProbeInterval)
            }
            change = refusals.refused(name, .init(reason: .unverifiedAnswer, detail: failure.message), job: job.id,
                                      policy: trialPolicy, now: now)
        case .failure:
            change = refusals.finished(name, job: job.id, outcome: .other, now: now)
        case .success:
            change = refusals.finished(name, job: job.id, outcome: .uploaded, now: now)
        }
        if let change { notices.append(.held(name, change)) }
        return notices
    }

    private mutating func breakerUpdate(_ destination: String, failure: TransferFailure?, now: Date) -> [Notice] {
        guard var breaker = breakers[destination] else { return [] }
        let wasOpen = breaker.isOpen
        var opened = false
        if let failure {
            guard case .transient = failure.kind, failure.destinationFault else { return [] }
            opened = breaker.recordFailure(now: now)
        } else {
            breaker.recordSuccess()
        }
        breakers[destination] = breaker
        if opened {
            return [.circuitOpened(destination, threshold: breaker.policy.threshold,
                                   probeIn: CircuitBreaker.probeDelay(policy: breaker.policy, openings: breaker.openings))]
        }
        return wasOpen && !breaker.isOpen ? [.circuitClosed(destination)] : []
    }

    /// A probe came back.
    mutating func probeFinished(_ name: String, answered: Bool, now: Date) -> Notice {
        breakers[name]?.finishProbe(answered: answered, now: now)
        return answered ? .probeAnswered(name) : .probeUnanswered(name, next: breakers[name]?.nextProbeAt)
    }

    /// The wall clock stepped: probe and trial times, an anchored budget period, the times of unrecorded ends and
    /// the start of this process's era of due times move with it.
    mutating func shift(by seconds: TimeInterval) {
        clockEraStart.addTimeInterval(seconds)
        for id in unsettled.keys { unsettled[id]?.at.addTimeInterval(seconds) }
        for name in breakers.keys { breakers[name]?.shift(by: seconds) }
        refusals.shift(by: seconds)
        ledger?.shift(by: seconds)
        windowCache = [:]
        timetableCache = nil
    }

    /// Bytes that went over metered links were booked: counted in the ledger. Returns the ledger to store (nil
    /// without a budget).
    mutating func booked(metered bytes: Int64) -> BudgetLedger? {
        guard settings.budget != nil, bytes > 0 else { return nil }
        ledger?.add(bytes)
        return ledger
    }

    /// Whether any running transfer goes over a metered link now.
    var anyRunningOnMetered: Bool {
        running.values.contains { links[$0.job.destination]?.linkClass == .metered }
    }

    // MARK: Recording the ends

    /// The ends waiting to be recorded, in job order: those that go in the round's transaction, and the cancels,
    /// each recorded alone (their remote clean-up may take its time).
    var unsettledEnds: (together: [Settlement], alone: [Settlement]) {
        unsettled.values.sorted { $0.job.id.rawValue < $1.job.id.rawValue }
            .reduce(into: ([Settlement](), [Settlement]())) { parts, settlement in
                if SettlementRecorder.isGroupable(settlement) { parts.0.append(settlement) } else { parts.1.append(settlement) }
            }
    }

    /// An end was recorded (or dropped, its job having changed meanwhile).
    mutating func endRecorded(_ id: JobID) {
        unsettled[id] = nil
        toldUnrecorded.remove(id)
    }

    /// An end could not be recorded yet: it stays for a later round. Returns whether this is the first time, so
    /// the log says it once.
    mutating func endNotRecorded(_ id: JobID) -> Bool {
        toldUnrecorded.insert(id).inserted
    }

    /// A cancelled transfer's end is handed to a background recording.
    mutating func cancelRecording(_ id: JobID) {
        unsettled[id] = nil
        recordingCancels.insert(id)
    }

    /// The background recording of a cancel ended; one the database could not take (`kept`) is unsettled again.
    mutating func cancelRecordingEnded(_ id: JobID, kept: Settlement?) {
        recordingCancels.remove(id)
        if let kept { unsettled[id] = kept }
    }

    // MARK: Whether the queue takes writes

    /// A write failed (see `StoreHealth`).
    mutating func storeFailed(_ reason: String, diskFull: Bool, at clock: ContinuousClock.Instant) -> [StoreHealth.Action] {
        health.failed(reason, diskFull: diskFull, at: clock)
    }

    /// A round's writes went through; the spell lasts while ends (a cancel recorded in the background too) wait.
    mutating func roundSucceeded(at clock: ContinuousClock.Instant) -> [StoreHealth.Action] {
        health.succeeded(unsettled: unsettled.count + recordingCancels.count, at: clock)
    }
}
