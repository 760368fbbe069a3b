import SyncTransport

/// When a session loop's next tick comes (`SyncPeer`): `base` apart while
/// the session has something to do or a timer of its own pending (a hello
/// or a message that may be due again); while it is idle, each tick that
/// finds nothing to do doubles the wait, up to `quiet`. Anything else the
/// loop handles (a frame, a local change, a request) starts again at `base`.
struct TickSchedule: Sendable {
    enum Handled: Sendable {
        /// A tick; `sent`: it sent something.
        case tick(sent: Bool)
        /// A question about the session's state (it changes nothing).
        case diagnostics
        /// A frame, a local change, a request, a release of held commits.
        case other
    }

    let base: Duration
    let quiet: Duration
    /// Ticks in a row that found the session idle with nothing to do.
    private(set) var quietTicks = 0

    /// `base` is at least 1 ms: a tick interval or poll interval of zero (or
    /// less) ticked in a loop that never rested, the backoff doubling nothing.
    /// Both are at most `Duration.longestSleep` (`.seconds(.max)` trapped in
    /// `Task.sleep`, and in the doubling).
    init(base: Duration, quiet: Duration) {
        self.base = max(base, TickSchedule.shortest).cappedForSleep
        self.quiet = max(quiet.cappedForSleep, self.base)
    }

    static let shortest = Duration.milliseconds(1)

    /// How long until the next tick after the loop handled `input`, the
    /// session then being `quiet` (idle, with no timer of its own pending).
    mutating func next(after input: Handled, quiet: Bool) -> Duration {
        switch input {
        case .tick(let sent): quietTicks = quiet && !sent ? quietTicks + 1 : 0
        case .diagnostics: if !quiet { quietTicks = 0 }
        case .other: quietTicks = 0
        }
        return interval
    }

    var interval: Duration {
        quietTicks == 0 ? base : min(base * (1 << min(quietTicks, 20)), quiet)
    }
}
