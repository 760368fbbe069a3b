/// Sync rounds, for progress events (`batchSent(number:total:entries:)`):
/// a round begins with the first batch after the peer had everything, its
/// total is counted then, and it ends once the stream was read through it.
extension ReplicationEndpoint {
    /// A sync round begins with its first batch (stream read up to `scan`
    /// before it): when someone listens for progress, it counts the batches
    /// that the changes pending now make (a scan of keys and sizes), and ends once it
    /// sent them; changes committed meanwhile go to the next round. The total
    /// stays fixed (0 when nobody listened as the round began).
    func beginRoundIfNeeded(from scan: Int64, peer: ReplicationSession.Peer) throws {
        guard !session.stream.inRound else { return }
        session.stream.inRound = true
        session.stream.batchNumber = 0
        session.stream.batchTotal = 0
        session.stream.roundEnd = nil
        guard reporter.wantsProgress else { return }
        var batches = 0
        var repair = session.stream.repairRows[...]
        while let first = repair.first {
            if first.isLarge {
                repair = repair.dropFirst()
            } else {
                let size = repair.prefix(configuration.maxBatchEntries).prefix { !$0.isLarge }.count
                repair = repair.dropFirst(size)
                batches += 1
            }
        }
        let (stream, position) = try port.pendingBatches(for: peer.node, after: scan, maxEntries: configuration.maxBatchEntries,
                                                         maxBytes: configuration.maxBatchBytes,
                                                         dropsDeletes: configuration.testingFaults.skipTombstones) { key, _ in excluded(key) }
        batches += stream
        session.stream.batchTotal = batches
        session.stream.roundEnd = position
    }

    /// The round ends once the stream was read through its end.
    func endRoundIfReached(_ scanned: Int64) {
        if let end = session.stream.roundEnd, scanned >= end { endRound() }
    }

    func endRound() {
        session.stream.inRound = false
        session.stream.roundEnd = nil
    }

    /// Reads the changes of the keys declared alike again (`repairedNames`), unless a lane pass
    /// a full disk put off may still hold some of them for `sync()`: the pump reads them once it ran.
    func readRepairRows(for peer: UInt32) throws {
        guard !session.stream.repairedNames.isEmpty else { return }
        repairAwaitsLanes = port.defersWork
        guard !repairAwaitsLanes else { return }
        session.stream.repairRows = try port.rows(declaredBy: session.stream.repairedNames, for: peer, maxEntries: Int.max)
            .filter { !excluded($0.key) }
        try finishRepairIfDone()
    }

    /// Once every repaired key's changes were acknowledged, the peer's record
    /// of mismatched keys is what this session found.
    func finishRepairIfDone() throws {
        guard session.stream.finishRepairIfDone(), let peer = session.knownPeer else { return }
        try port.setMismatchedKeys(ReplicationSession.declared(peer.mismatchedKeys, in: port.registry.wireDeclarations(from: port.role)), for: peer.node)
    }

    /// The watch acknowledged a caught-up notice: it removed what a re-baseline notice marked.
    func settleLiveCaughtUp() throws {
        guard let peer = session.knownPeer else { return }
        try port.settleLiveCaughtUp(for: peer.node)
        owesLiveCaughtUp = false
    }
}
