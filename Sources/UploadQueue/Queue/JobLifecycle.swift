import Foundation

/// The job state machine: takes events, checks they are legal in the current state and returns the new state.
///
/// A value type with no I/O, so every legal and illegal transition is tested without a database; `QueueStore`
/// applies it inside its write transactions.
package struct JobLifecycle: Sendable, Equatable {
    /// Something that happens to a job.
    package enum Event: Sendable, Equatable {
        /// A worker takes the job (pending → uploading); counts an attempt.
        case claim
        /// The runner takes the job for its next free slot (pending → uploading, waiting for `concurrency`): no
        /// other runner's claim takes it, and no attempt is counted until it `start`s.
        case claimAhead
        /// A job claimed ahead goes into a free slot (its wait for `concurrency` ends); counts an attempt.
        case start
        /// The server confirmed the whole file (uploading → uploaded).
        case succeed
        /// A failure that may go away by itself: retried at `retryAt` (uploading → failed, retryable).
        case failTransient(error: String, retryAt: Date)
        /// A failure that needs a person (pending or uploading → failed, permanent).
        case failPermanent(error: String)
        /// The transfer stopped without a verdict: graceful stop or a dead daemon (uploading → pending).
        case interrupt
        /// The retry time of a retryable failure has come (failed → pending).
        case retryDue(now: Date)
        /// A person asked to try again (`uploadq retry`): any failure → pending at once.
        case retryNow
        /// The job cannot start yet, for this reason (pending → pending).
        case wait(WaitingReason?)
        /// A person cancelled the job: it leaves the queue (any state but uploaded).
        case cancel
    }

    /// What the store must do after an event.
    package enum Effect: Sendable, Equatable {
        /// Write the new state.
        case update
        /// Remove the job from the queue.
        case remove
    }

    package private(set) var state: JobState
    package private(set) var waitingReason: WaitingReason?
    package private(set) var permanent: Bool
    package private(set) var attempts: Int
    /// Failures since the job last made it through, which picks the retry delay.
    package private(set) var failures: Int
    package private(set) var nextAttemptAt: Date?
    package private(set) var lastError: String?

    /// A new job: pending, no attempts.
    package init() {
        self.init(state: .pending, waitingReason: nil, permanent: false, attempts: 0, failures: 0,
                  nextAttemptAt: nil, lastError: nil)
    }

    /// A job as stored.
    package init(state: JobState, waitingReason: WaitingReason?, permanent: Bool, attempts: Int, failures: Int,
                nextAttemptAt: Date?, lastError: String?) {
        self.state = state
        self.waitingReason = waitingReason
        self.permanent = permanent
        self.attempts = attempts
        self.failures = failures
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
    }

    /// Applies `event`, or throws without changing anything when the event is illegal in the current state.
    @discardableResult
    package mutating func apply(_ event: Event) throws(JobTransitionError) -> Effect {
        switch (state, event) {
        case (.pending, .claim):
            state = .uploading
            waitingReason = nil
            nextAttemptAt = nil
            attempts += 1
        case (.pending, .claimAhead):
            state = .uploading
            waitingReason = .concurrency
            nextAttemptAt = nil
        case (.uploading, .start) where waitingReason == .concurrency:
            waitingReason = nil
            attempts += 1
        case (.uploading, .succeed):
            state = .uploaded
            failures = 0
            lastError = nil
            permanent = false
            nextAttemptAt = nil
        case (.uploading, .failTransient(let error, let retryAt)):
            state = .failed
            permanent = false
            failures += 1
            lastError = error
            nextAttemptAt = retryAt
        case (.pending, .failPermanent(let error)), (.uploading, .failPermanent(let error)):
            state = .failed
            permanent = true
            failures += 1
            lastError = error
            waitingReason = nil
            nextAttemptAt = nil
        case (.uploading, .interrupt):
            state = .pending
            waitingReason = nil
        case (.failed, .retryDue(let now)):
            guard !permanent, let due = nextAttemptAt, due <= now else {
                throw JobTransitionError(from: state, event: event, reason: permanent
                    ? "a permanent failure is only retried by hand" : "its retry time has not come")
            }
            state = .pending
            nextAttemptAt = nil
        case (.failed, .retryNow):
            state = .pending
            permanent = false
            failures = 0
            nextAttemptAt = nil
        case (.pending, .wait(let reason)):
            waitingReason = reason
        case (.pending, .cancel), (.uploading, .cancel), (.failed, .cancel):
            return .remove
        default:
            throw JobTransitionError(from: state, event: event, reason: nil)
        }
        return .update
    }
}

/// An event that is not allowed in a job's current state.
package struct JobTransitionError: Error, Sendable, Equatable, CustomStringConvertible {
    package let from: JobState
    package let event: JobLifecycle.Event
    package let reason: String?

    package var description: String {
        let name = String(describing: event).split(separator: "(").first.map(String.init) ?? "\(event)"
        if let reason {
            return "a \(from.rawValue) job cannot take '\(name)': \(reason)"
        }
        return "a \(from.rawValue) job cannot take '\(name)'"
    }
}
