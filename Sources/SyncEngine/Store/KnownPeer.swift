/// A peer this store keeps a cursor for, as `SyncStore.knownPeerDetails()`
/// lists it: who it is, the pairing it came through, and when it was last
/// seen.
public struct KnownPeer: Sendable, Equatable, Codable {
    /// Its node id (as in `SyncEvent.connected` and `knownPeers()`).
    public let node: UInt32
    /// A watch on a phone; the phone on a watch.
    public let role: DeviceRole
    /// The pairing it was last met through (`PairingSecret.epoch`).
    public let pairingEpoch: String
    /// When it was last seen, in milliseconds since 1970 by this device's
    /// clock (`StoreOptions.clock`): when a session with it began or a queued
    /// round met it, or when it last acknowledged changes. `peerHorizon`
    /// counts from here.
    public let lastSeenMilliseconds: Int64
    /// Whether a live session with it runs now. A connected peer with
    /// nothing to acknowledge is being seen, whatever `lastSeenMilliseconds` says.
    public let isConnected: Bool
}

extension SyncStore {
    /// Every peer this store keeps a cursor for, by node id (ascending).
    ///
    /// A watch that took a new node id (restored from a backup with
    /// `StoreOptions.renewsNodeIDWhenRestored`, or by `renewNodeID()`) stays
    /// listed under its old id, last seen when that id last synced, until
    /// `StoreOptions.peerHorizon` forgets it. Until then the phone's
    /// `pendingSummary()` counts what the old id never received. An app that
    /// gives each watch a pairing of its own can forget, once the new id has
    /// synced, the other ids of that pairing that are not connected
    /// (`forgetPeer(_:)`). An app whose watches share a pairing cannot tell
    /// an old id from another watch; it can only wait for the horizon.
    public func knownPeerDetails() throws -> [KnownPeer] {
        try checkOpen()
        let live = livePeers.withLock { Set($0.keys) }
        return try database.read { conn in
            let stmt = try conn.statement("SELECT peer_node, peer_role, epoch, last_seen FROM sync_peers ORDER BY peer_node")
            defer { stmt.reset() }
            var peers: [KnownPeer] = []
            while try stmt.step() {
                let node = UInt32(truncatingIfNeeded: stmt.int64(0))
                // A file damaged by hand could name another role: the peer's role is the counterpart of ours.
                peers.append(KnownPeer(node: node, role: DeviceRole(rawValue: stmt.string(1)) ?? role.counterpart,
                                       pairingEpoch: stmt.string(2), lastSeenMilliseconds: stmt.int64(3),
                                       isConnected: live.contains(node)))
            }
            return peers
        }
    }
}
