import SyncTransport

/// Receipts and stream ranges (protocol 3): each side tells the other, first
/// thing in a session, how far it has received the other's stream, so that
/// an acknowledgement lost when a session ended costs nothing. Without it,
/// a watch's write that the phone received (unacknowledged) is sent again
/// in the next session; if the phone deleted that key meanwhile and purged
/// the tombstone after forgetting the watch, the old value would come back.
extension ReplicationEndpoint {
    /// A watch waiting for the phone's receipt (it sends nothing before it)
    /// over a connection that delivers every frame ends the session with
    /// `timeout` once `receiptTimeoutMilliseconds` passed since the first tick
    /// that found it waiting. Over a lossy one the phone sends it again.
    func receiptTimedOut(now: Int64) -> [Frame]? {
        guard !session.retransmits else { return nil }
        // The first tick that finds it waiting starts the wait, and so does one that finds the
        // wall clock set back before the wait began (it would last until the clock caught up).
        guard let since = receiptAwaitedSince, since <= now else {
            receiptAwaitedSince = now
            return nil
        }
        let limit = configuration.receiptTimeoutMilliseconds
        guard now - since >= limit else { return nil }
        return fail(SyncError(.timeout, "the phone did not send its receipt within \(limit) ms of the session's start; this watch sends nothing before it"),
                    notifyPeer: true)
    }

    /// Takes the peer's receipt: its cursor for this side says how far this
    /// side received its stream; and a watch waiting for the phone's receipt
    /// starts after what the phone says it received (never past what this
    /// store has written), on stable storage like an acknowledgement. A
    /// phone keeps its own cursor: a forgotten watch gets its whole stream
    /// again after a re-baseline notice.
    func takeReceipt(_ receipt: SyncMessage.Receipt, from peer: ReplicationSession.Peer) throws {
        receivedStream.note(acknowledgedThrough: receipt.acknowledgedThrough, anchor: receipt.acknowledgedAnchor,
                            anchorBound: port.versionBound())
        guard awaitsPeerReceipt else { return }  // a phone, or a duplicate
        awaitsPeerReceipt = false
        receiptTakenFrom = peer.node
        // An anchor past any version this store reached: the phone's record is not of this
        // stream as it stands (its tail lost to a power cut, or a claim of a buggy or
        // hostile peer that used this node id). Nothing is skipped: what follows the cursor goes again.
        guard receipt.receivedAnchor <= port.latestVersion() else {
            reporter.logger.warning("the phone's receipt names a version this store never reached; everything after the acknowledged cursor is sent again",
                                    metadata: ["anchor": "\(receipt.receivedAnchor)", "latest": "\(port.latestVersion())"])
            return
        }
        var received = min(receipt.receivedThrough, try port.streamPosition())
        guard received > session.stream.cursor else { return }
        // A change there newer than what the phone saw was written since, at a position given out
        // again (a power cut lost the stream's tail after it was sent): start before it.
        if let rewritten = try port.firstChangeNewer(than: receipt.receivedAnchor, for: peer.node, after: session.stream.cursor, through: received) {
            received = rewritten - 1
            guard received > session.stream.cursor else { return }
        }
        try port.acknowledge(peer: peer.node, through: received)
        if defersAcknowledgementSync { cursorAwaitsSync = true } else { try port.syncCommitted() }
        session.stream.start(after: received)
        cursorAtStart = max(cursorAtStart ?? 0, received)
        reporter.logger.info("the phone had received writes whose acknowledgement was lost; they are not sent again",
                             metadata: ["through": "\(received)"])
    }

    /// How often, at most, applying a batch also records how far the peer's
    /// stream was received (milliseconds); the end of a session records it too.
    static let receivedRecordInterval: Int64 = 1_000

    /// Records how far `peer`'s stream was received, if the store lags behind
    /// (the session ends). After the commits it vouches for, so never ahead of them.
    func recordReceivedStream(from peer: UInt32) {
        guard receivedStream.through > receivedStream.stored else { return }
        do {
            try port.recordReceived(from: peer, through: receivedStream.through, anchor: receivedStream.anchor)
            receivedStream.stored = receivedStream.through
        } catch {
            reporter.logger.warning("could not record how far the peer's changes were received", metadata: ["error": "\(error)"])
        }
    }

    /// A message of protocol 2 (caught-up notice, manual request or reply) in
    /// an established session that negotiated protocol 1: no peer of it sends
    /// one, and a manual request would release this side's manual changes and
    /// be answered with a message the peer cannot read.
    func protocol2Violation(_ message: SyncMessage) -> SyncError? {
        guard let peer = session.peer, peer.protocolVersion < ReplicationSession.caughtUpProtocol else { return nil }
        let name: String
        switch message {
        case .caughtUp: name = "caught-up notice"
        case .manualRequest: name = "manual request"
        case .manualReply: name = "manual reply"
        default: return nil
        }
        return SyncError(.protocolViolation, "the peer sent a \(name) (protocol 2) in a session that negotiated protocol \(peer.protocolVersion)")
    }

    /// A batch or chunk that names a stream range in a session that did not negotiate protocol 3.
    func rangeViolation(_ frame: Frame, peer: ReplicationSession.Peer) -> SyncError? {
        guard SyncMessage.payloadSchema(of: frame) == SyncMessage.rangedPayloadSchema, peer.protocolVersion < SyncMessage.receiptProtocol else {
            return nil
        }
        return SyncError(.protocolViolation, "the peer sent a stream range (payload schema 3) in a session that negotiated protocol \(peer.protocolVersion)")
    }
}
