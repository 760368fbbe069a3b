import SyncTransport

/// One pairing given to several watches (a pairing file copied to two, a
/// watch restored from another's backup): the phone has one mailbox per
/// watch, all of one pairing epoch. A mailbox is served for the watch its
/// messages name (`peerNode`), from that watch's own cursor, never from the
/// cursor of whichever watch of the pairing was seen last: that made the
/// phone post to one watch, every round, what the other had acknowledged.
extension MailboxReplicator {
    /// The record of this mailbox's peer: the node its messages named, else
    /// (none read yet in this process) the one peer of the pairing; nil when
    /// several share it (see `initialPeerNode`).
    func mailboxPeer() throws -> PeerRecord? {
        let counterpart = port.role.counterpart
        let peers = try port.queuedPeers(role: counterpart, epoch: configuration.pairingEpoch)
        if let peerNode, learnedPeerNode != nil || !nodesOfOtherMailboxes.contains(peerNode) {
            if let pinned = peers.first(where: { $0.node == peerNode }) { return pinned }
        } else if peers.count > 1 || peerNode != nil {
            return nil  // several watches, or a guess another mailbox's watch has since been met as
        }
        return try port.queuedPeer(role: counterpart, epoch: configuration.pairingEpoch)
    }

    /// The peer this mailbox is for before any of its messages is read in this
    /// process: the one peer of the pairing, or nil when several watches share
    /// it (which one writes here is not known until it posts: a guess could
    /// serve it from another's cursor, and skip what only it lacks). A nil
    /// peer is sent everything; its first acknowledgement records it.
    func initialPeerNode() throws -> UInt32? {
        let peers = try port.queuedPeers(role: port.role.counterpart, epoch: configuration.pairingEpoch)
        guard peers.count == 1, let only = peers.first?.node, !nodesOfOtherMailboxes.contains(only) else { return nil }
        return only
    }

    /// The record of `header`'s sender when this store keeps it under the message's pairing.
    func knownSender(_ header: QueuedHeader) throws -> PeerRecord? {
        try port.queuedPeers(role: header.role, epoch: header.pairingEpoch).first { $0.node == header.node }
    }
}

extension SyncError {
    /// Two watches name one node id through two mailboxes of a phone (a store
    /// copied from another watch's, or restored from its backup). Starts as
    /// `nodeIDConflict(node:)` does: a watch that renews reads the node id from it.
    static func nodeIDShared(node: UInt32, renews: Bool) -> SyncError {
        let id = String(node, radix: 16)
        let fix = renews
            ? "it takes a new node id and syncs again"
            : "this watch's build cannot take a new node id by itself: call SyncStore.renewNodeID() on one of the two (or set StoreOptions.renewsNodeIDWhenRestored), and pair each watch with a secret of its own (syncsim pair once per watch)"
        return SyncError(.nodeIDConflict, "the watch's node id \(id) is also the node id of the watch of another mailbox of this phone (its store was copied from that watch's, or restored from its backup): the phone would never send one what the other wrote; \(fix)")
    }
}
