import SyncTransport

/// What the peer's messages make this side report: the peer's words escaped
/// (`PeerText`) and bounded before they reach an event or the log, and an
/// answer to a manual request only when it answers one.
extension ReplicationEndpoint {
    /// Of the names only the peer declares, the most a `keyMismatch` event names.
    static let maxReportedPeerOnlyNames = 64

    /// Reports the keys declared differently on the two sides (`keyMismatch`,
    /// and a warning): every name this side declares, and of the names only
    /// the peer declares the first `maxReportedPeerOnlyNames`, escaped. A
    /// hello may declare any number of names, spelled any way: they were all
    /// reported as they came.
    func reportMismatches(_ names: Set<String>) {
        let reported = Self.reportedMismatches(names, ours: port.registry.wireDeclarations(from: port.role))
        emit(.keyMismatch(keys: reported))
        reporter.logger.warning("keys declared differently on the peer do not sync",
                                metadata: ["keys": "\(reported)", "count": "\(names.count)"])
    }

    /// The names a `keyMismatch` event gives of `names` (declared differently
    /// or on one side only), sorted: those of `ours` (this side's wire
    /// declarations) as they are, and the first `maxReportedPeerOnlyNames` of
    /// the others escaped. Live and queued comparisons report alike.
    static func reportedMismatches(_ names: Set<String>, ours declarations: [String]) -> [String] {
        let ours = ReplicationSession.declared(names, in: declarations)
        let theirs = names.subtracting(ours).sorted().prefix(maxReportedPeerOnlyNames)
        return (ours.sorted() + theirs.map { PeerText.escaped($0) }).sorted()
    }

    /// Takes the peer's answer to a manual request of this session: reported,
    /// and what it released is data to come. A reply to no request this
    /// session awaits (unasked, or answered already) is passed over: it was
    /// reported as an answer, and cleared the request this side awaited.
    func takeManualReply(_ reply: SyncMessage.ManualReply) {
        guard manualRequestIDs.remove(reply.id) != nil else {
            reporter.logger.notice("passed over a manual reply to no request of this session", metadata: ["id": "\(reply.id)"])
            return
        }
        // Released changes follow: the peer has more until it says it caught up again.
        if reply.released > 0 { session.peerSentData(id: reply.replyID) }
        emit(.manualRequestAnswered(accepted: reply.accepted, released: reply.released))
    }
}
