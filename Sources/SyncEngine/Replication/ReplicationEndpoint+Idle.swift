/// Whether an endpoint is idle, and if not, why: one list of conditions
/// serves both (`isIdle` stops at the first).
extension ReplicationEndpoint {
    /// True when established, nothing is in flight or waiting to be sent, and
    /// the peer has nothing more for us: it said so (a caught-up notice,
    /// protocol 2) after the last data it sent, so entries it still resends
    /// arrive before this side is idle.
    /// Checked after every step of a session: no reason is put into words.
    package var isIdle: Bool { idleBlockers(upTo: 1, describing: false).isEmpty }

    /// Why `isIdle` is false, in words (empty when idle): for a simulator's
    /// report of what kept a run from settling.
    package var idleBlockers: [String] { idleBlockers(upTo: .max, describing: true) }

    /// At most `limit` reasons, cheapest checks first (the stream is read
    /// last); each an empty string unless `describing`.
    func idleBlockers(upTo limit: Int, describing: Bool) -> [String] {
        guard session.isEstablished, let peer = session.knownPeer else { return ["no session established"] }
        var reasons: [String] = []
        func note(_ reason: @autoclosure () -> String) -> Bool {
            reasons.append(describing ? reason() : "")
            return reasons.count >= limit
        }
        if let failure, note("failed: \(failure)") { return reasons }
        // An app update's lane pass a full disk put off: what it moves goes once it runs (a tick retries it).
        if port.defersWork, note("entries an app update moves wait for room on the disk") { return reasons }
        if awaitsPeerReceipt, note("waits for the peer's receipt") { return reasons }
        if let flights = session.established?.inFlight, !flights.isEmpty,
           note("\(flights.count) unacknowledged (\(Set(flights.values.map(\.payload.kind)).sorted().joined(separator: ", ")))") {
            return reasons
        }
        if let transfer = session.stream.transfer, note("sends \(transfer.key) in chunks (\(transfer.next) of \(transfer.count))") { return reasons }
        if !session.stream.repairRows.isEmpty, note("\(session.stream.repairRows.count) repair rows to send") { return reasons }
        if !session.peerHasNothingMore, note("the peer has not said it has nothing more") { return reasons }
        // Not once a version as new or newer of its key is stored: the peer stopped that transfer.
        if let receiving, receivingTransfer, note("receives \(receiving.key) at \(receiving.version) in chunks") { return reasons }
        if readsToStreamEnd { return reasons }
        let rows = try? port.pendingRows(for: peer.node, after: session.stream.scan, maxEntries: 1, maxBytes: 1) { key, _ in excluded(key) }
        guard let rows else { return reasons + ["the stream could not be read"] }
        if let first = rows.rows.first { _ = note("\(first.key) (change \(first.seq)) waits in the stream after \(session.stream.scan)") }
        return reasons
    }
}
