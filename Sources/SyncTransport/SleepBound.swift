/// The longest a timer of this package sleeps at once. `Task.sleep` traps
/// ("Not enough bits to represent the passed value") on a deadline whose
/// seconds do not fit 64 bits, such as an app's "never" (`.seconds(.max)` as
/// a timeout or interval), and its deadline in nanoseconds overflows from
/// about 292 years on: such a wait sleeps 100 years instead.
extension Duration {
    /// 100 years (about 2^61.5 nanoseconds).
    package static let longestSleep: Duration = .seconds(100 * 365 * 86_400)

    /// This duration, at most `longestSleep`: what a timer may sleep for.
    package var cappedForSleep: Duration { min(self, .longestSleep) }
}

extension ContinuousClock.Instant {
    /// This instant, at most `Duration.longestSleep` from now: what a timer may sleep until.
    package var cappedForSleep: ContinuousClock.Instant { min(self, .now + .longestSleep) }
}
