import Foundation

/// What a cancel request did.
public enum CancelOutcome: String, Sendable, Equatable {
    /// The job left the queue.
    case removed
    /// The job is transferring; its worker stops it and removes it.
    case requested
}
