import Synchronization
import SyncTransport

/// When a live session's next WAL sync for acknowledgements may start
/// (`ReplicationConfiguration.acknowledgementSyncInterval`): at once after a
/// quiet spell, else once the interval since the last one's start has
/// passed, so that the commits applied meanwhile share one fsync.
struct SyncSpacing: Sendable {
    let interval: Duration
    /// When the last sync started (nil: none yet in this session).
    private(set) var lastStart: ContinuousClock.Instant?

    init(interval: Duration) {
        self.interval = max(.zero, interval).cappedForSleep
    }

    /// The instant to wait for before the next sync, or nil to sync now.
    func wait(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard let lastStart, interval > .zero else { return nil }
        let due = lastStart + interval
        return now < due ? due : nil
    }

    /// A sync starts at `now`.
    mutating func started(at now: ContinuousClock.Instant) {
        lastStart = now
    }
}

/// Acknowledgements waiting for their commits to reach stable storage, and
/// whether a sync was asked for at all (a watch's moved cursor asks for one
/// with no acknowledgement to send); it starts each sync (`startSync`, which
/// wakes the task that syncs and sends them) at most once per interval
/// (`SyncSpacing`), from the session loop that holds them or from its own
/// timer at the interval's end, so the loop is not woken for it.
final class AcknowledgementSyncQueue: Sendable {
    private struct State {
        var frames: [Frame] = []
        var requested = false
        var spacing: SyncSpacing
        /// The timer armed for the interval's end, numbered: a cancelled one that wakes late starts nothing.
        var timer: (number: Int, task: Task<Void, Never>)?
        var timersArmed = 0
    }

    /// As many waiting acknowledgements as this sync at once (half the window: the peer's never fills with them).
    let atOnceFrom: Int
    private let startSync: @Sendable () -> Void
    private let state: Mutex<State>

    init(interval: Duration, atOnceFrom: Int, startSync: @escaping @Sendable () -> Void) {
        self.atOnceFrom = max(1, atOnceFrom)
        self.startSync = startSync
        state = Mutex(State(spacing: SyncSpacing(interval: interval)))
    }

    /// Adds acknowledgements that wait for the next sync (none: a sync is asked
    /// for all the same), and starts it now or arms the timer for the interval's end.
    func hold(_ more: [Frame], now: ContinuousClock.Instant) {
        let startsNow = state.withLock { state -> Bool in
            state.frames += more
            state.requested = true
            if state.frames.count < atOnceFrom, let due = state.spacing.wait(now: now) {
                if state.timer == nil {
                    state.timersArmed += 1
                    let number = state.timersArmed, tolerance = state.spacing.interval / 4
                    state.timer = (number, Task { [self] in
                        try? await Task.sleep(until: due, tolerance: tolerance, clock: .continuous)
                        if timerEnded(number, now: .now) { startSync() }
                    })
                }
                return false
            }
            state.spacing.started(at: now)
            state.timer?.task.cancel()
            state.timer = nil
            return true
        }
        if startsNow { startSync() }
    }

    /// Timer `number` ended: true when a sync starts now (it is still the armed one, and one was asked for).
    private func timerEnded(_ number: Int, now: ContinuousClock.Instant) -> Bool {
        state.withLock { state in
            guard state.timer?.number == number else { return false }
            state.timer = nil
            guard state.requested else { return false }
            state.spacing.started(at: now)
            return true
        }
    }

    /// The session ended: no timer starts a sync any more.
    func cancelTimer() {
        state.withLock { state in
            state.timer?.task.cancel()
            state.timer = nil
        }
    }

    /// The frames to send once synced; nil when no sync was asked for since the last call.
    func takeAll() -> [Frame]? {
        state.withLock { state in
            defer {
                state.frames = []
                state.requested = false
            }
            return state.requested ? state.frames : nil
        }
    }
}
