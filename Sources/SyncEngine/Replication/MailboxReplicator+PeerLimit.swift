/// A store that keeps `StoreOptions.maxKnownPeers` peers refuses a new one
/// (`too-many-peers`): live, the session ends before anything goes; queued,
/// its messages are set aside. Nor does this end post it its changes: its
/// acknowledgements would be set aside too, and what went would go again each
/// time the peer had read it (the whole store, round after round).
extension MailboxReplicator {
    /// Whether posting waits: this mailbox's peer was refused for the limit
    /// and the store is still full. Once a place is free it goes on (the
    /// peer's next message is taken, and it is baselined).
    func waitsForAPlace() throws -> Bool {
        guard let node = refusedForLimit else { return false }
        if try port.refusesNewPeer(node) { return true }
        refusedForLimit = nil
        return false
    }
}
