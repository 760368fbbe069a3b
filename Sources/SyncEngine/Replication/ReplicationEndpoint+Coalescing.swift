import SyncTransport

/// Local commits held back to join the next batch during a burst (`BurstCoalescing`).
extension ReplicationEndpoint {
    /// Whether commits of a burst are held back (`localChange(now:at:)`).
    var holdsLocalChanges: Bool { configuration.burstCoalescing != nil && coalescing.heldSince != nil }

    /// A local commit happened (heard of at `instant`, a monotonic time): sends
    /// it as `pump` does, or holds it back to join the next batch while a
    /// batch is in flight during a burst (`ReplicationConfiguration.burstCoalescing`).
    /// Held commits go out from `releaseHeld` once `heldUntil` passed (the
    /// burst paused, or the oldest waited `maxDelay`), or with the next `tick`
    /// or explicit `pump`; frames from the peer send them only when one
    /// commit waits alone (not a burst) and nothing is in flight any more.
    /// `previousCommit`: when the commit before it was made (nil: the last
    /// instant given here), so that a session loop that fell behind still sees
    /// how close together the commits were. A wake-up for commits the stream
    /// was already read past (a frame's receipt pumped first) sends and holds nothing.
    package func localChange(now: Int64, at instant: ContinuousClock.Instant, previousCommit: ContinuousClock.Instant? = nil,
                             startedAt: ContinuousClock.Instant? = nil) -> [Frame] {
        guard let policy = configuration.burstCoalescing else { return pump(now: now) }
        let inFlight = session.isEstablished && !session.isQuiet
        // A wake-up queued behind a frame whose receipt pumped: its commit is on its way already.
        let alreadyRead = inFlight && (try? port.streamPosition()).map { $0 <= session.stream.scan } == true
        if coalescing.holds(at: instant, previous: previousCommit, startedAt: startedAt, policy: policy, inFlight: inFlight, alreadyRead: alreadyRead) {
            return []
        }
        return alreadyRead ? [] : pump(now: now)
    }

    /// When held commits go out if nothing sends them first; nil when none is held.
    package var heldUntil: ContinuousClock.Instant? {
        configuration.burstCoalescing.flatMap { coalescing.deadline(policy: $0) }
    }

    /// Sends the held commits if `heldUntil` has passed at `instant`;
    /// `lastCommit`: when the newest local commit was made, if known (a
    /// commit the session loop has not heard of yet extends the burst).
    package func releaseHeld(now: Int64, at instant: ContinuousClock.Instant, lastCommit: ContinuousClock.Instant? = nil) -> [Frame] {
        if let lastCommit, let last = coalescing.lastChange, lastCommit > last { coalescing.lastChange = lastCommit }
        guard let deadline = heldUntil, instant >= deadline else { return [] }
        return pump(now: now)
    }
}
