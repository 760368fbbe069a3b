/// Node ids bound to pairings (protocol 6, `SyncStore+NodeIdentity`): a
/// phone refuses a watch that names a node id it met through another pairing,
/// and the watch takes a new one.
extension ReplicationEndpoint {
    /// On a phone: why a session with `peer` must not go on, if its node id
    /// is recorded under another pairing (a watch set up from a copy of
    /// another watch's store). A watch of an older protocol goes on: it
    /// cannot take a new node id, and the pairing it comes through becomes its
    /// node's (as before protocol 6).
    /// A damaged row of the node (one this engine never writes) is reported
    /// as the damage it is, and is no conflict: the session goes on and records
    /// the peer again under its pairing.
    func nodeIDConflict(with peer: ReplicationSession.Peer) throws -> SyncError? {
        guard port.role == .phone, peer.protocolVersion >= SyncMessage.nodeRenewalProtocol,
              let bound = try port.pairingEpoch(ofPeer: peer.node, reportingDamageTo: reporter, as: session.knownPeer?.node),
              bound != configuration.pairingEpoch else { return nil }
        // (The other pairing's epoch stays here: the refusal goes to a device of another pairing.)
        return SyncError.nodeIDConflict(node: peer.node)
    }

    /// On a watch whose phone ended the session with `node-id-conflict`: this
    /// store takes a new node id (unless it took one since the hello of this
    /// session named it), which the next session's hello names. Only in an
    /// established session that negotiated protocol 6, where a phone sends
    /// it: elsewhere the code says nothing a phone means, and the watch keeps its id.
    func renewNodeID(after error: SyncMessage.ErrorMessage) {
        guard port.role == .watch, error.code == SyncError.Code.nodeIDConflict.rawValue else { return }
        guard let peer = session.peer, peer.protocolVersion >= SyncMessage.nodeRenewalProtocol else {
            reporter.logger.warning("the peer refused this watch's node id outside a session of protocol 6; the node id stays")
            return
        }
        do {
            let renewed = try port.renewNodeID(replacing: session.identity.node)
            reporter.logger.notice("the phone found this watch's node id taken by another watch; this store took a new one",
                                   metadata: ["old": "\(String(session.identity.node, radix: 16))", "new": "\(String(renewed, radix: 16))"])
        } catch {
            reporter.logger.error("could not take a new node id", metadata: ["error": "\(error)"])
        }
    }
}

extension SyncError {
    /// A phone's refusal of a watch whose node id it met through another pairing.
    /// The text names the node id (`conflictingNode(in:)` reads it back): a
    /// queued refusal says which node id it refused, so that a watch that
    /// took a new one since keeps it.
    static func nodeIDConflict(node: UInt32) -> SyncError {
        SyncError(.nodeIDConflict, "the watch's node id \(String(node, radix: 16)) belongs to a watch of another pairing: its store was copied from that watch's; it takes a new node id and syncs again")
    }

    /// The node id a `nodeIDConflict(node:)` text names, if it names one.
    static func conflictingNode(in text: String) -> UInt32? {
        let prefix = "the watch's node id "
        guard text.hasPrefix(prefix) else { return nil }
        let digits = text.dropFirst(prefix.count).prefix { $0.isHexDigit }
        guard (1...8).contains(digits.count) else { return nil }
        return UInt32(digits, radix: 16)
    }
}
