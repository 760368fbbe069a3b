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
