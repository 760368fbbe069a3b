import SyncTransport

/// Node ids bound to pairings, through the mailbox (live sessions:
/// `ReplicationEndpoint+NodeIdentity`). A queued message does not say which
/// build wrote it, so a watch that takes a new node id when refused for it
/// says so first (`QueuedMessage.renewsNodeID`), and its phone refuses its
/// node id through the mailbox only then: a watch of an older build is served
/// as before protocol 6 (its pairing becomes its node's).
extension MailboxReplicator {
    /// On a watch of protocol 6: the node renewal notice goes ahead of
    /// anything else this process posts (once), so that its phone reads it
    /// before any message that could name a node id taken by another pairing.
    func announceNodeRenewal(into report: inout QueuedDeliveryReport) throws {
        guard port.role == .watch, !announcedNodeRenewal,
              configuration.protocolRange.upperBound >= SyncMessage.nodeRenewalProtocol else { return }
        let notice = QueuedMessage.renewsNodeID(header)
        do {
            try postOwn(notice.frame(), reserve: true)
        } catch let error as TransportError where error.code == .mailboxFull {
            return  // next round (nothing else fits before it either): the peer's inbox is read meanwhile
        }
        onPost?(notice)
        report.messagesPosted += 1
        announcedNodeRenewal = true
    }

    /// Whether `message` is a watch's node renewal notice; on a phone, what it
    /// says is kept for the pairing (on stable storage: the watch says it once a process).
    func takesNodeRenewalNotice(_ message: QueuedMessage) throws -> Bool {
        guard case .renewsNodeID = message else { return false }
        if port.role == .phone {
            try port.noteQueuedPeerRenewsNodeID(in: configuration.pairingEpoch)
            try port.syncCommitted()  // before the notice is taken: the watch posts it once a process
        }
        return true
    }

    /// On a phone of protocol 6: whether a message from `sender` is taken
    /// unused because its node id is bound to another pairing and the watch
    /// of this one said it renews (a store copied from another watch's).
    /// The first such message of each node id in this process is answered by
    /// a refusal naming it (`node-id-conflict`): the watch takes a new node id
    /// and posts again under it what it posted under the old one (it still
    /// holds it; nothing was acknowledged). The node id stays the other
    /// pairing's, whose watch's acknowledgements go on moving its cursor.
    func refusesTakenNodeID(_ sender: QueuedHeader, into report: inout QueuedDeliveryReport) throws -> Bool {
        guard port.role == .phone, sender.role == .watch, sender.pairingEpoch == configuration.pairingEpoch else { return false }
        // The watch of another mailbox (of this pairing or not) named this node id first in this process.
        let sharedWithAnotherMailbox = nodesOfOtherMailboxes.contains(sender.node) && learnedPeerNode != sender.node
        guard configuration.protocolRange.upperBound >= SyncMessage.nodeRenewalProtocol else { return false }
        let bound = try port.pairingEpoch(ofPeer: sender.node, reportingDamageTo: reporter, as: peerNode)
        let ofAnotherPairing = bound != nil && bound != configuration.pairingEpoch
        guard sharedWithAnotherMailbox || ofAnotherPairing else { return false }
        guard try port.queuedPeerRenewsNodeID(in: configuration.pairingEpoch) else {
            // A watch that cannot take a new node id (or has not said so yet): served as before, the app told the fix.
            if sharedWithAnotherMailbox, !ofAnotherPairing, toldSharedNodes.insert(sender.node).inserted {
                emit(.error(SyncError.nodeIDShared(node: sender.node, renews: false)))
            }
            return false
        }
        if refusedTakenNodes.contains(sender.node) { return true }
        let error = ofAnotherPairing ? SyncError.nodeIDConflict(node: sender.node) : SyncError.nodeIDShared(node: sender.node, renews: true)
        let refusal = QueuedMessage.refusal(header, code: error.code.rawValue, message: error.message)
        try postOwn(refusal.frame(), reserve: true)
        onPost?(refusal)
        refusedTakenNodes.insert(sender.node)
        report.messagesPosted += 1
        report.refused.append(error)
        emit(.error(error))
        return true
    }

    /// On a watch of protocol 6 whose phone refused its node id through the
    /// mailbox (`error`, read from `text`): when the refusal names the node id
    /// this store has, it takes a new one, and posting starts over from the
    /// phone's cursor under it. True when `error` is such a refusal (one that
    /// names a node id this store left since is passed over: it took one already).
    func renewsNodeID(after error: SyncError, text: String, into report: inout QueuedDeliveryReport) throws -> Bool {
        guard port.role == .watch, error.code == .nodeIDConflict,
              configuration.protocolRange.upperBound >= SyncMessage.nodeRenewalProtocol else { return false }
        guard let refused = SyncError.conflictingNode(in: text), refused == port.nodeID else { return true }
        let renewed = try port.renewNodeID(replacing: refused)
        reporter.logger.notice("the phone found this watch's node id taken by another watch (queued); this store took a new one",
                               metadata: ["old": "\(String(refused, radix: 16))", "new": "\(String(renewed, radix: 16))"])
        // What was posted under the old node id was taken unused: it goes again under the new one.
        startOverUnderNewNodeID()
        report.refused.append(error)
        emit(.error(error))
        return true
    }
}
