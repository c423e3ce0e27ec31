import Synchronization

/// Request-body bytes handed to libcurl, per label (the destination's name), until someone takes the counts.
///
/// The engine thread adds as it reads bodies (a rewound body counts again: those bytes go out again); the
/// scheduler drains the counts and books them under the link class of the moment.
final class TrafficCounter: Sendable {
    private let counts = Mutex<[String: Int64]>([:])

    func add(_ label: String, _ bytes: Int) {
        guard bytes > 0 else { return }
        counts.withLock { $0[label, default: 0] += Int64(bytes) }
    }

    /// The counts since the last drain, reset to zero.
    func drain() -> [String: Int64] {
        counts.withLock { counts in
            defer { counts = [:] }
            return counts
        }
    }
}
