/// How long `ReconnectingDialer` waits between failed attempts:
/// exponential backoff with jitter.
///
/// The n-th consecutive failure (n >= 1) waits
/// `min(maxDelay, initialDelay * multiplier^(n-1))`, then scaled by a random
/// factor in `1-jitter ... 1+jitter`, and never more than `maxDelay`.
public struct ReconnectPolicy: Sendable, Hashable {
    /// The wait after the first failure (and before redialing a dropped connection).
    public var initialDelay: Duration
    /// The longest wait.
    public var maxDelay: Duration
    /// The growth factor per failure (at least 1).
    public var multiplier: Double
    /// The random spread as a fraction of the delay, in `0...1`.
    public var jitter: Double

    /// Creates a policy; the defaults are 100 ms, doubling up to 30 s, ±20 %.
    public init(
        initialDelay: Duration = .milliseconds(100), maxDelay: Duration = .seconds(30),
        multiplier: Double = 2, jitter: Double = 0.2
    ) {
        self.initialDelay = initialDelay
        self.maxDelay = maxDelay
        self.multiplier = multiplier
        self.jitter = jitter
    }

    /// The delay before the attempt that follows the `failures`-th
    /// consecutive failure.
    public func delay(afterFailures failures: Int, using random: inout SeededRandom) -> Duration {
        let growth = max(1, multiplier)
        var base = initialDelay
        var step = 1
        while step < failures, base < maxDelay {
            base = base * growth
            step += 1
        }
        base = min(base, maxDelay)
        let spread = min(1, max(0, jitter))
        let factor = 1 - spread + 2 * spread * random.nextDouble()
        let delay = base * factor
        return min(max(delay, .zero), maxDelay)
    }
}
