/// A wait a loop of the engine scheduled on a timer (`SyncStore.timedWaits`):
/// tests follow how the waits of a store or peer at rest grow apart, event by
/// event, instead of sleeping and counting.
enum TimedWait: Sendable, Equatable {
    /// A session loop's next tick (`SyncPeer`).
    case tick(Duration)
    /// The next timed round of queued delivery (`SyncPeer.runQueued`).
    case queuedRound(Duration)
    /// The next look for the replication lock another process or store holds.
    case replicationLock(Duration)
    /// The store timer's next look for other processes' commits.
    case externalLook(Duration)
    /// The pause before dialing again after a session failed for a full
    /// device (`ReplicationConfiguration.storageFullRetryInterval`).
    case storageFullPause(Duration)
}
