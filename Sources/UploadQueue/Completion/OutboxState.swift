import Foundation

extension Job {
    /// Where an outbox entry stands.
    public enum OutboxState: String, Sendable, Equatable {
        case pending
        case done
        case failed
    }
}
