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
        self.interval = max(.zero, interval)
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
/// with no acknowledgement to send); when the next sync starts
/// (`SyncSpacing`), shared by the session loop that holds them, the timer
/// that ends an interval and the task that syncs and sends them.
final class AcknowledgementSyncQueue: Sendable {
    /// What the session loop does once it held acknowledgements.
    enum Start: Equatable {
        /// Sync now.
        case now
        /// Arm the timer for this instant (`armTimer`); its end starts the sync.
        case arm(ContinuousClock.Instant)
        /// The armed timer starts the sync.
        case armed
    }

    private struct State {
        var frames: [Frame] = []
        var requested = false
        var spacing: SyncSpacing
        var timer: Task<Void, Never>?
        var timerArmed = false
    }

    let interval: Duration
    /// As many waiting acknowledgements as this sync at once (half the window: the peer's never fills with them).
    let atOnceFrom: Int
    private let state: Mutex<State>

    init(interval: Duration, atOnceFrom: Int) {
        let spacing = SyncSpacing(interval: interval)
        self.interval = spacing.interval
        self.atOnceFrom = max(1, atOnceFrom)
        state = Mutex(State(spacing: spacing))
    }

    /// Adds acknowledgements that wait for the next sync (none: a sync is asked
    /// for all the same) and says when it starts.
    func hold(_ more: [Frame], now: ContinuousClock.Instant) -> Start {
        state.withLock { state in
            state.frames += more
            state.requested = true
            if state.frames.count < atOnceFrom, let due = state.spacing.wait(now: now) {
                if state.timerArmed { return .armed }
                state.timerArmed = true
                return .arm(due)
            }
            state.spacing.started(at: now)
            state.timer?.cancel()
            state.timer = nil
            state.timerArmed = false
            return .now
        }
    }

    /// Keeps the timer armed after `.arm`, to cancel it should a sync start sooner.
    func armTimer(_ timer: Task<Void, Never>) {
        state.withLock { state in
            if state.timerArmed { state.timer = timer } else { timer.cancel() }
        }
    }

    /// The armed timer ended: true when a sync starts now (one was asked for).
    func timerFired(now: ContinuousClock.Instant) -> Bool {
        state.withLock { state in
            guard state.timerArmed else { return false }
            state.timerArmed = false
            state.timer = nil
            guard state.requested else { return false }
            state.spacing.started(at: now)
            return true
        }
    }

    /// The session ended: no timer starts a sync any more.
    func cancelTimer() {
        state.withLock { state in
            state.timer?.cancel()
            state.timer = nil
            state.timerArmed = false
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
