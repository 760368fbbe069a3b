import SyncTransport

/// Entries from the peer: planned (`ApplyPlanner`), applied by the port, reported.
extension ReplicationEndpoint {
    /// Decides what `entries` from `peer` do (`ApplyPlanner`, against the
    /// stored state the port reads in its transaction), has the port execute
    /// that plan, and reports it. Returns the plan, for the acknowledgement.
    func apply(_ entries: [WireEntry], from peer: ReplicationSession.Peer, completing: ChunkedVersion?,
               reportsConflicts: Bool, receivedThrough: (through: Int64, anchor: Int64)? = nil) throws -> ApplyPlan {
        let now = port.nowMilliseconds()
        let context = ApplyPlanner.Context(peerRole: peer.role, mismatched: peer.mismatchedKeys, versionBound: port.versionBound(),
                                           now: now, maxValueSize: port.maxValueSize,
                                           lastArrivalWins: configuration.testingFaults.lastArrivalWins)
        let registry = port.registry
        var plan = ApplyPlan()
        // With nothing of the stream read and unacknowledged, what this apply adds for the other
        // peers is passed over for this one in its own transaction (no read, no commit after it).
        let stream = session.stream
        let passingOver = session.isEstablished && !awaitsPeerReceipt && stream.ranges.isEmpty && stream.scan == stream.cursor
            && stream.transfer == nil ? stream.scan : nil
        let outcome = try port.apply(entries, from: peer.node, completing: completing, durable: !defersAcknowledgementSync,
                                     receivedThrough: receivedThrough, passingOver: passingOver) { local in
            plan = ApplyPlanner.plan(entries, local: local, registry: registry, context: context)
            return plan
        }
        if let through = outcome.passedOverThrough {
            session.stream.read(through: through)
            _ = session.stream.complete(upper: through)
            endRoundIfReached(through)
            // A watch's cursor goes to stable storage (`complete(upper:)`): the apply's commit holds it.
            if port.role == .watch, defersAcknowledgementSync { cursorAwaitsSync = true }
        }
        let refusals = plan.versionRefusals
        count {
            $0.entriesReceived += entries.count
            $0.entriesIgnored += plan.ignored
            $0.entriesRejected += plan.rejected.count
            $0.conflicts += outcome.conflicts.count
            $0.deferred += outcome.deferred.count
            $0.versionsRefused += refusals.count
        }
        for step in plan.steps {
            if case .refuse(ApplyPlanner.policyViolation, _) = step.verdict {
                reporter.logger.warning("rejected an entry the peer may not send", metadata: ["key": "\(PeerText.escaped(step.entry.key))"])
            }
        }
        let tooLarge = plan.refusedAsTooLarge
        if !tooLarge.isEmpty { emit(.error(SyncError.refusedAsTooLarge(tooLarge, limit: port.maxValueSize))) }
        for refusal in refusals {
            emit(.versionRefused(key: PeerText.escaped(refusal.key), aheadMilliseconds: refusal.aheadMilliseconds))
        }
        if !refusals.isEmpty {
            reporter.logger.warning("refused entries whose versions are too far ahead of this device's clock",
                                    metadata: ["count": "\(refusals.count)"])
        }
        entriesApplied += plan.applied
        emit(.received(entries: entries.count, applied: plan.applied))
        for (key, size) in outcome.deferred { emit(.deferred(key: key, size: size)) }
        if reportsConflicts {
            for conflict in outcome.conflicts {
                emit(.conflictResolved(key: conflict.key, winner: conflict.winner, rule: conflict.rule))
            }
        }
        return plan
    }
}
