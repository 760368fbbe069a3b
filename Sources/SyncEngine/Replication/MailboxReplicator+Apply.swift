import SyncTransport

extension MailboxReplicator {
    /// Applies a batch's entries; nil (nothing applied) when a live re-baseline
    /// notice was acted on since `rebaselinesBefore` (`ReplicationPort.liveRebaselineCount`).
    /// `bytes`: the message's payload, counted as received.
    func apply(_ entries: [WireEntry], from peer: PeerRecord, mismatched: Set<String>,
               unlessRebaselinedSince rebaselinesBefore: Int, bytes: Int = 0) throws -> ApplyPlan? {
        let context = ApplyPlanner.Context(peerRole: port.role.counterpart, mismatched: mismatched, versionBound: port.versionBound(),
                                           now: port.nowMilliseconds(), maxValueSize: port.maxValueSize,
                                           lastArrivalWins: configuration.testingFaults.lastArrivalWins)
        let registry = port.registry
        var plan = ApplyPlan()
        var superseded = false
        let port = self.port
        let outcome = try port.apply(entries, from: peer.node, completing: nil, durable: true, receivedThrough: nil) { local in
            // Inside the write transaction: a notice's marks are committed before, or wait until after.
            guard port.liveRebaselineCount == rebaselinesBefore else {
                superseded = true
                return plan
            }
            plan = ApplyPlanner.plan(entries, local: local, registry: registry, context: context)
            return plan
        }
        if superseded { return nil }
        var delta = SyncCounters()
        delta.batchesReceived = 1
        delta.bytesReceived = bytes  // the message's payload, as a live session counts a batch's
        delta.entriesReceived = entries.count
        delta.entriesIgnored = plan.ignored
        delta.entriesRejected = plan.rejected.count
        delta.conflicts = outcome.conflicts.count
        delta.deferred = outcome.deferred.count
        delta.versionsRefused = plan.versionRefusals.count
        reporter.count(delta)
        let tooLarge = plan.refusedAsTooLarge
        if !tooLarge.isEmpty { emit(.error(SyncError.refusedAsTooLarge(tooLarge, limit: port.maxValueSize))) }
        for refusal in plan.versionRefusals { emit(.versionRefused(key: PeerText.escaped(refusal.key), aheadMilliseconds: refusal.aheadMilliseconds)) }
        emit(.received(entries: entries.count, applied: plan.applied))
        for (key, size) in outcome.deferred { emit(.deferred(key: key, size: size)) }
        for conflict in outcome.conflicts { emit(.conflictResolved(key: conflict.key, winner: conflict.winner, rule: conflict.rule)) }
        return plan
    }

    /// The entries of `rows` as a queued batch carries them: a large value whole
    /// (a row whose key changed since is left out: a later row carries it).
    func entries(of rows: [OutboundRow]) throws -> [WireEntry] {
        try rows.compactMap { row in
            guard row.isLarge else { return row.entry }
            guard let value = try port.largeValue(key: row.key, seq: row.seq) else { return nil }
            var entry = row.entry
            entry.value = value
            return entry
        }
    }
}
