import Foundation
import Testing
@testable import UploadQueue

/// Every state × event pair of the job state machine: legal ones give the documented state, illegal ones throw
/// and change nothing.
struct JobLifecycleTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static let events: [JobLifecycle.Event] = [
        .claim, .succeed, .failTransient(error: "503", retryAt: now.addingTimeInterval(30)),
        .failPermanent(error: "403"), .interrupt, .retryDue(now: now), .retryNow, .wait(.concurrency), .cancel,
        .claimAhead, .start,
    ]

    static func lifecycle(_ state: JobState, permanent: Bool = false, due: Bool = true) -> JobLifecycle {
        JobLifecycle(state: state, waitingReason: nil, permanent: permanent, attempts: 1, failures: state == .failed ? 1 : 0,
                     nextAttemptAt: state == .failed && !permanent ? now.addingTimeInterval(due ? -1 : 60) : nil,
                     lastError: state == .failed ? "earlier" : nil)
    }

    /// The legal transitions: (from, event index) → resulting state, or nil for removal.
    static let legal: [String: JobState?] = [
        "pending/claim": .uploading,
        "pending/claimAhead": .uploading,
        "pending/failPermanent": .failed,
        "pending/wait": .pending,
        "pending/cancel": nil,
        "uploading/succeed": .uploaded,
        "uploading/failTransient": .failed,
        "uploading/failPermanent": .failed,
        "uploading/interrupt": .pending,
        "uploading/cancel": nil,
        "failed/retryDue": .pending,
        "failed/retryNow": .pending,
        "failed/cancel": nil,
    ]

    static func name(_ event: JobLifecycle.Event) -> String {
        String(String(describing: event).prefix { $0 != "(" })
    }

    @Test("every legal transition lands in the documented state; every other one throws and changes nothing",
          arguments: JobState.allCases)
    func transitionTable(from state: JobState) throws {
        for event in Self.events {
            let key = "\(state.rawValue)/\(Self.name(event))"
            var machine = Self.lifecycle(state)
            let before = machine
            if let expected = Self.legal[key] {
                let effect = try machine.apply(event)
                if let expected {
                    #expect(effect == .update, "\(key)")
                    #expect(machine.state == expected, "\(key)")
                } else {
                    #expect(effect == .remove, "\(key)")
                }
            } else {
                #expect(throws: JobTransitionError.self, "\(key) must be illegal") { try machine.apply(event) }
                #expect(machine == before, "\(key) must not change the job")
            }
        }
    }

    @Test("claiming counts an attempt and clears the waiting reason")
    func claimCountsAttempt() throws {
        var machine = JobLifecycle()
        try machine.apply(.wait(.concurrency))
        #expect(machine.waitingReason == .concurrency)
        try machine.apply(.claim)
        #expect(machine.attempts == 1)
        #expect(machine.waitingReason == nil)
    }

    @Test("a claim ahead counts no attempt and waits for a slot; its start counts one; it goes back unstarted")
    func claimAhead() throws {
        var machine = JobLifecycle()
        try machine.apply(.claimAhead)
        #expect(machine.state == .uploading && machine.waitingReason == .concurrency && machine.attempts == 0)
        var back = machine
        try back.apply(.interrupt)
        #expect(back.state == .pending && back.waitingReason == nil && back.attempts == 0, "given back: no attempt")
        try machine.apply(.start)
        #expect(machine.state == .uploading && machine.waitingReason == nil && machine.attempts == 1)
        let started = machine
        #expect(throws: JobTransitionError.self, "a job starts once") { try machine.apply(.start) }
        #expect(machine == started)
        var claimed = JobLifecycle()
        try claimed.apply(.claim)
        #expect(throws: JobTransitionError.self, "a job claimed for a slot has started") { try claimed.apply(.start) }
    }

    @Test("a transient failure is retryable with its time; a permanent one has no time and needs a person")
    func failureKinds() throws {
        var transient = Self.lifecycle(.uploading)
        try transient.apply(.failTransient(error: "HTTP 503", retryAt: Self.now))
        #expect(transient.permanent == false)
        #expect(transient.nextAttemptAt == Self.now)
        #expect(transient.lastError == "HTTP 503")

        var permanent = Self.lifecycle(.uploading)
        try permanent.apply(.failPermanent(error: "HTTP 403"))
        #expect(permanent.permanent)
        #expect(permanent.nextAttemptAt == nil)
        #expect(throws: JobTransitionError.self) { try permanent.apply(.retryDue(now: Self.now.addingTimeInterval(1e6))) }
        try permanent.apply(.retryNow)
        #expect(permanent.state == .pending && !permanent.permanent && permanent.failures == 0)
    }

    @Test("a retryable failure does not come back before its time")
    func retryDueWaitsForItsTime() throws {
        var machine = Self.lifecycle(.failed, due: false)
        #expect(throws: JobTransitionError.self) { try machine.apply(.retryDue(now: Self.now)) }
        #expect(machine.state == .failed)
    }

    @Test("failures count up across retries and reset on success")
    func failureCount() throws {
        var machine = JobLifecycle()
        for round in 1...3 {
            try machine.apply(.claim)
            try machine.apply(.failTransient(error: "x", retryAt: Self.now))
            #expect(machine.failures == round)
            try machine.apply(.retryDue(now: Self.now))
        }
        try machine.apply(.claim)
        try machine.apply(.succeed)
        #expect(machine.failures == 0 && machine.attempts == 4 && machine.lastError == nil)
    }

    @Test("an uploaded job cannot be cancelled, retried or claimed again")
    func uploadedIsFinal() {
        var machine = Self.lifecycle(.uploaded)
        for event in [JobLifecycle.Event.cancel, .retryNow, .claim, .interrupt] {
            #expect(throws: JobTransitionError.self) { try machine.apply(event) }
        }
        #expect(machine.state == .uploaded)
    }
}
