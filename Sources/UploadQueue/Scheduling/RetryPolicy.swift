import Foundation

extension Configuration {
    /// When a job that failed transiently is tried again: a pure function of the failure count and a random number.
    ///
    /// The default is the field app's schedule:
    ///
    /// | failures | delay          |
    /// |----------|----------------|
    /// | 1 … 10   | 30 s ± 10 %    |
    /// | 11 …     | 5 min ± 10 %   |
    ///
    /// With `exponential` the delay after failure n is `initialInterval × 2^(n-1)`, capped at `laterInterval`, with
    /// the same jitter. A server's `Retry-After` replaces the computed delay when it is longer.
    public struct RetryPolicy: Sendable, Equatable {
        /// How delays grow.
        public enum Backoff: String, Sendable, Equatable, CaseIterable {
            /// `initialInterval` for the first `initialAttempts` failures, then `laterInterval`.
            case steps
            /// Doubling from `initialInterval`, capped at `laterInterval`.
            case exponential
        }

        public var backoff: Backoff
        public var initialInterval: Duration
        public var initialAttempts: Int
        public var laterInterval: Duration
        /// Fraction of the delay added or removed at random (0.1 = ±10 %), so many clients do not retry in step.
        public var jitter: Double

        public init(backoff: Backoff = .steps, initialInterval: Duration = .seconds(30), initialAttempts: Int = 10,
                    laterInterval: Duration = .seconds(300), jitter: Double = 0.1) {
            self.backoff = backoff
            self.initialInterval = initialInterval
            self.initialAttempts = initialAttempts
            self.laterInterval = laterInterval
            self.jitter = jitter
        }

        /// The delay after the `failures`-th consecutive failure (1-based), given `random` in 0…1.
        public func delay(afterFailure failures: Int, random: Double, retryAfter: Duration? = nil) -> Duration {
            let base: Double
            switch backoff {
            case .steps:
                base = failures <= initialAttempts ? initialInterval.seconds : laterInterval.seconds
            case .exponential:
                let exponent = Double(min(max(failures - 1, 0), 62))
                base = min(initialInterval.seconds * pow(2, exponent), laterInterval.seconds)
            }
            let factor = 1 + jitter * (2 * min(max(random, 0), 1) - 1)
            var seconds = max(0, base * factor)
            if let retryAfter, retryAfter.seconds > seconds { seconds = retryAfter.seconds }
            return .milliseconds(Int64((seconds * 1000).rounded()))
        }
    }
}

extension Duration {
    /// The duration in seconds, as a floating-point number.
    var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
