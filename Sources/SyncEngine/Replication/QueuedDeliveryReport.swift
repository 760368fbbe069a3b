/// What one round of queued delivery did (`SyncPeer.deliverQueued(through:)`).
public struct QueuedDeliveryReport: Sendable, Equatable {
    /// Messages read from the peer (batches, acknowledgements, refusals).
    public var messagesRead = 0
    /// Entries from the peer that changed this store.
    public var entriesApplied = 0
    /// Messages this end posted (batches, acknowledgements, refusals).
    public var messagesPosted = 0
    /// Entries this end posted for the peer.
    public var entriesPosted = 0
    /// The peer's cursor moved (an acknowledgement of our changes arrived).
    public var acknowledged = false
    /// Files or messages refused, with their codes (also reported as `.error` events).
    public var refused: [SyncError] = []
    /// The error that stopped the round (also an `.error` event), nil when it
    /// ran through. `storage-full`: this device has no room; what it read
    /// waits in its inbox for the next round.
    public var failure: SyncError?

    public init() {}
}
