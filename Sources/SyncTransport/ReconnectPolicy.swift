/// How long a reconnect loop waits between attempts: exponential backoff
/// with jitter, reset only by a session that stayed up for a while.
///
/// The n-th consecutive failure (n >= 1) waits
/// `min(maxDelay, initialDelay * multiplier^(n-1))`, then scaled by a random
/// factor in `1-jitter ... 1+jitter`, and never more than `maxDelay`. A
/// failure is a dial that did not connect, and also a connection that ended
/// less than `resetAfter` after it was established (accepted and then
/// dropped, or a session refused at once: wrong pairing, wrong role). Only a
/// connection that lasted `resetAfter` starts the count over.
/// `ReconnectingDialer` follows it (see `ReconnectBackoff`), and so does
/// `SyncPeer.maintainConnection`, which dials through one.
public struct ReconnectPolicy: Sendable, Hashable {
    /// The wait after the first failure (and before redialing a dropped connection).
    public var initialDelay: Duration
    /// The longest wait.
    public var maxDelay: Duration
    /// The growth factor per failure (at least 1).
    public var multiplier: Double
    /// The random spread as a fraction of the delay, in `0...1`.
    public var jitter: Double
    /// How long a connection must stay established for the backoff to start
    /// over; one that ends sooner counts as a failure.
    public var resetAfter: Duration

    /// Creates a policy; the defaults are 100 ms, doubling up to 30 s, ±20 %,
    /// reset after a connection that lasted 5 s.
    public init(
        initialDelay: Duration = .milliseconds(100), maxDelay: Duration = .seconds(30),
        multiplier: Double = 2, jitter: Double = 0.2, resetAfter: Duration = .seconds(5)
    ) {
        self.initialDelay = initialDelay
        self.maxDelay = maxDelay
        self.multiplier = multiplier
        self.jitter = jitter
        self.resetAfter = resetAfter
    }

    /// The delay before the attempt that follows the `failures`-th
    /// consecutive failure.
    /// Delays are at least 1 ms: an `initialDelay` of zero (or less) doubled
    /// nothing, and a loop against a peer that refuses redialed without rest.
    public func delay(afterFailures failures: Int, using random: inout SeededRandom) -> Duration {
        let growth = max(1, multiplier)
        let longest = max(maxDelay, ReconnectPolicy.shortest)
        var base = max(initialDelay, ReconnectPolicy.shortest)
        var step = 1
        while step < failures, base < longest {
            // Past the longest, it is the longest: the product itself may be beyond `Duration` (a trap).
            base = base < longest / growth ? base * growth : longest
            step += 1
        }
        base = min(base, longest)
        let spread = min(1, max(0, jitter))
        let factor = 1 - spread + 2 * spread * random.nextDouble()
        let delay = base * factor
        return min(max(delay, ReconnectPolicy.shortest), longest)
    }

    /// The shortest delay between attempts.
    static let shortest = Duration.milliseconds(1)
}

/// The state of one reconnect loop under a `ReconnectPolicy`, as a pure
/// value: tell it what happened, it says how long to wait before the next dial.
public struct ReconnectBackoff: Sendable {
    /// The policy it follows.
    public let policy: ReconnectPolicy
    /// Consecutive failures so far (dials that failed, connections that ended early).
    public private(set) var failures = 0
    private var random: SeededRandom

    /// Starts with no failure; `seed` makes the jitter reproducible.
    public init(policy: ReconnectPolicy, seed: UInt64 = .random(in: 0...UInt64.max)) {
        self.policy = policy
        random = SeededRandom(seed: seed)
    }

    /// A dial failed: the wait before the next one.
    public mutating func dialFailed() -> Duration {
        failures += 1
        return policy.delay(afterFailures: failures, using: &random)
    }

    /// A dial the peer refused (`TransportError.Code.isPermanent`): the
    /// longest wait the policy gives (jittered), as after many failures.
    public mutating func dialRefused() -> Duration {
        failures = max(failures + 1, ReconnectBackoff.refusedFailures)
        return policy.delay(afterFailures: failures, using: &random)
    }

    /// Failures counted for a refusal: enough for any multiplier of 1.5 or more
    /// to reach `maxDelay` from 1 ms (30 s is reached after 26 doublings).
    static let refusedFailures = 64

    /// An established connection ended after `lasted`: the wait before
    /// redialing. `initialDelay` (jittered) if it lasted `resetAfter`;
    /// otherwise it counts as one more failure.
    public mutating func connectionEnded(after lasted: Duration) -> Duration {
        if lasted >= policy.resetAfter { failures = 0 }
        failures += 1
        return policy.delay(afterFailures: failures, using: &random)
    }
}
