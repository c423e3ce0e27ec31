import Synchronization

/// Bytes sent, per label (the destination's name), until someone takes the counts: request bodies as libcurl
/// reads them, and each request's own header bytes when it ends.
///
/// The engine thread adds as it reads bodies (a rewound body counts again: those bytes go out again); the
/// scheduler drains the counts and books them under the link class of the moment (and the metered budget).
final class TrafficCounter: Sendable {
    private let counts = Mutex<[String: Int64]>([:])

    func add(_ label: String, _ bytes: Int) {
        guard bytes > 0 else { return }
        counts.withLock { $0[label, default: 0] += Int64(bytes) }
    }

    /// The sum of the counts since the last drain whose label passes `include`, left in place.
    func peek(_ include: (String) -> Bool) -> Int64 {
        counts.withLock { counts in counts.reduce(0) { include($1.key) ? $0 + $1.value : $0 } }
    }

    /// The counts since the last drain, reset to zero.
    func drain() -> [String: Int64] {
        counts.withLock { counts in
            defer { counts = [:] }
            return counts
        }
    }
}
