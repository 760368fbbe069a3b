import Logging
import SyncTransport

/// The replication shell for one session: feeds frames to the pure
/// `ReplicationSession`, decides what incoming entries do with the pure
/// `ApplyPlanner`, performs both against a `ReplicationPort` (the store),
/// reports events and counters to a `ReplicationReporter` (the driver's), and
/// returns the frames to send. Synchronous and step-driven, so the same code
/// runs under the deterministic simulator and under the async `SyncPeer` over TCP.
///
/// Not thread-safe: one task owns an endpoint.
package final class ReplicationEndpoint {
    /// The store, as the session sees it.
    package let port: any ReplicationPort
    /// Where events, counters and log lines go.
    package let reporter: any ReplicationReporter
    package let configuration: ReplicationConfiguration
    /// The protocol state: handshake, window, retransmits.
    var session: ReplicationSession
    /// Why the session ended, once it has failed.
    package var failure: SyncError? { session.failure }
    private var failureReported = false
    /// When true, acknowledgements of commits are not synced here: they wait in
    /// `takeFramesAwaitingSync()` for the shell to put the commits on stable
    /// storage (`SyncStore.syncCommittedAsync()`) and then send them, so the
    /// session goes on applying while the disk syncs. When false (the
    /// default, for step-driven use) every such acknowledgement is returned
    /// only after its commit was synced.
    package var defersAcknowledgementSync = false
    /// Acknowledgements waiting for their commits to be synced (`ReplicationEndpoint+DurableAcks.swift`).
    var awaitingSync: [Frame] = []
    /// Local commits held back to join the next batch (`localChange(now:at:)`).
    var coalescing = CoalescingState()
    /// At most this many frames of the stream (batches, chunks) per `pump(now:)`;
    /// unbounded by default (step-driven use gets everything the window allows at
    /// once). A shell that sends as it goes (`SyncPeer`) sets 1 and pumps again while
    /// `pumpStoppedEarly`: the first batch of a session is on the wire while the next
    /// is read and compressed, rather than after the whole window was.
    package var framesPerPump = Int.max {
        didSet { framesPerPump = max(1, framesPerPump) }
    }
    /// Whether the last `pump(now:)` stopped at `framesPerPump` with room left in the window.
    package private(set) var pumpStoppedEarly = false

    /// `retransmits: false` for a transport that delivers every frame while
    /// connected (see `FrameConnection.deliversEveryFrame`).
    /// Events and counters go to `store`'s `events()`, `peerEvents()` and `syncCounters`.
    package convenience init(store: SyncStore, configuration: ReplicationConfiguration, retransmits: Bool = true) {
        self.init(port: SQLiteReplicationPort(store), reporter: StoreReporter(store), configuration: configuration, retransmits: retransmits)
    }

    /// A session over any store behind `port`, reporting to `reporter`.
    package init(port: any ReplicationPort, reporter: any ReplicationReporter, configuration: ReplicationConfiguration,
                 retransmits: Bool = true) {
        self.port = port
        self.reporter = reporter
        self.configuration = configuration
        let identity = ReplicationSession.Identity(
            node: port.nodeID, role: port.role, pairingEpoch: configuration.pairingEpoch,
            protocolRange: configuration.protocolRange, declarations: port.registry.wireDeclarations(from: port.role),
            fingerprint: port.registry.fingerprint(for: port.role))
        session = ReplicationSession(identity: identity, helloRetryInterval: configuration.helloRetryMilliseconds,
                                      retransmitInterval: configuration.retransmitMilliseconds, window: configuration.window)
        session.maxBytesInFlight = configuration.maxBytesInFlight
        session.retransmits = retransmits
        session.helloTimeout = retransmits ? nil : configuration.helloTimeoutMilliseconds
        session.ignoresKeyMismatch = configuration.testingFaults.ignoreKeyMismatch
    }

    package var isEstablished: Bool { session.isEstablished }
    /// Whether time alone can make `tick` act (a hello or a message may be
    /// due again); when not, and the session is idle, ticks may be far apart.
    package var waitsOnTimers: Bool { session.waitsOnTimers }
    /// The peer's node id once established.
    package var peerNode: UInt32? { session.knownPeer?.node }
    /// Keys declared differently by the peer.
    package var mismatchedKeys: Set<String> { session.knownPeer?.mismatchedKeys ?? [] }

    /// Starts the session: the hello.
    package func start(now: Int64) -> [Frame] {
        session.partialTransfers = announcedPartialTransfers()
        return perform(session.start(now: now), now: now)
    }

    /// Handles one frame from the peer; returns the frames to send.
    package func receive(_ frame: Frame, now: Int64) -> [Frame] {
        guard failure == nil else { return [] }
        return receive(frame, decoded: Result { try SyncMessage(frame: frame) }, now: now)
    }

    /// `receive(_:now:)` of a frame whose message was decoded beforehand
    /// (`SyncMessage(frame:)`, pure): a driver's reader decodes the next
    /// frame while this endpoint applies the one before.
    package func receive(_ frame: Frame, decoded: Result<SyncMessage, any Error>, now: Int64) -> [Frame] {
        guard failure == nil else { return [] }
        let message: SyncMessage
        do {
            message = try decoded.get()
        } catch let error as SyncError {
            return fail(error, notifyPeer: true)
        } catch {
            return fail(SyncError(.malformedMessage, "\(error)"), notifyPeer: true)
        }
        if case .hello = message {} else { session.peerIsReachable() }
        if let violation = protocol2Violation(message) { return fail(violation, notifyPeer: true) }
        var out: [Frame] = []
        do {
            switch message {
            case .hello(let hello):
                out += perform(session.receiveHello(hello, now: now), now: now)
            case .batch(let batch):
                guard session.isEstablished, let peer = session.knownPeer else {
                    return perform(session.receivedDataBeforeHandshake(now: now), now: now)
                }
                if let schema = SyncMessage.payloadSchema(of: frame), schema > SyncMessage.payloadSchema, peer.protocolVersion < 2 {
                    return fail(SyncError(.protocolViolation, "the peer sent a columnar batch (payload schema \(schema)) in a session that negotiated protocol \(peer.protocolVersion)"), notifyPeer: true)
                }
                if let violation = rangeViolation(frame, peer: peer) { return fail(violation, notifyPeer: true) }
                session.peerSentData(id: batch.id)
                // How far the peer's stream is received goes into the batch's transaction once a second
                // (a page more per transaction otherwise), and when the session ends.
                var received = receivedStream
                if let range = batch.range { received.note(range, anchorBound: port.versionBound()) }
                let records = received.through > received.stored && now - receivedRecordedAt >= ReplicationEndpoint.receivedRecordInterval
                let plan = try apply(batch.entries, from: peer, completing: nil, reportsConflicts: true,
                                     receivedThrough: records ? (received.through, received.anchor) : nil)
                if records {
                    received.stored = received.through
                    receivedRecordedAt = now
                }
                receivedStream = received
                count {
                    $0.batchesReceived += 1
                    $0.bytesReceived += frame.payload.count
                }
                try acknowledgeDurably(SyncMessage.acknowledgement(of: batch.id, applied: plan.applied, rejected: plan.rejected).frame(), into: &out)
            case .ack(let ack):
                if owesLiveCaughtUp, session.isCaughtUpNotice(ack.batchID) { try settleLiveCaughtUp() }
                if case .batch? = session.acknowledgeBatch(ack.batchID) {
                    if let upper = session.stream.batchRanges.removeValue(forKey: ack.batchID) { try complete(upper: upper) }
                    if session.stream.repairBatches.remove(ack.batchID) != nil { try finishRepairIfDone() }
                    if !ack.rejected.isEmpty {
                        emit(.error(SyncError.refusedByPeer(ack.rejected)))
                    }
                }
            case .chunk(let chunk):
                guard session.isEstablished, let peer = session.knownPeer else {
                    return perform(session.receivedDataBeforeHandshake(now: now), now: now)
                }
                if let violation = rangeViolation(frame, peer: peer) { return fail(violation, notifyPeer: true) }
                count { $0.bytesReceived += frame.payload.count }
                for reply in try receiveChunk(chunk, peer: peer) {
                    if reply.restsOnCommit { try acknowledgeDurably(reply.frame, into: &out) } else { out.append(reply.frame) }
                    // The value is done with (applied, or refused for good): its range counts as received
                    // (recorded with the next batch's transaction).
                    if reply.completes, let range = chunk.range { receivedStream.note(range, anchorBound: port.versionBound()) }
                }
            case .chunkAck(let ack):
                if let violation = chunkAckViolation(ack) { return fail(violation, notifyPeer: true) }
                try takeChunkAck(ack)
            case .rebaseline(let notice):
                guard session.isEstablished, let peer = session.knownPeer else {
                    return perform(session.receivedDataBeforeHandshake(now: now), now: now)
                }
                // The phone's receipt goes first: a notice that overtook it (a lossy transport)
                // is left unacknowledged, and comes again.
                if awaitsPeerReceipt { return [] }
                guard notice.generation == nil || peer.protocolVersion >= SyncMessage.generationProtocol else {
                    return fail(SyncError(.protocolViolation, "the peer sent a re-baseline notice with a generation in a session that negotiated protocol \(peer.protocolVersion)"), notifyPeer: true)
                }
                session.peerSentData(id: notice.id)
                // A copy that comes after the baseline began would mark what the phone already sent
                // in this session, and does not send again: those values would go at its caught-up notice.
                guard noticesActedOn.insert(notice.id).inserted else {
                    try acknowledgeDurably(SyncMessage.ack(.init(batchID: notice.id, applied: 0, rejected: [])).frame(), into: &out)
                    break
                }
                // With caught-up notices, what the notice would remove is marked, and what the
                // baseline does not bring back goes once the phone caught up: values it brings never go.
                let known = try port.applyRebaseline(purgedThrough: notice.purgedThrough, from: peer.node,
                                                       mismatched: peer.mismatchedKeys.union(mismatchedAtStart),
                                                       acknowledgedBefore: cursorAtStart, generation: notice.generation,
                                                       removal: peer.protocolVersion >= ReplicationSession.caughtUpProtocol
                                                           && !configuration.testingFaults.removeRebaselinedAtOnce ? .atCaughtUp : .immediately)
                try acknowledgeDurably(SyncMessage.ack(.init(batchID: notice.id, applied: known, rejected: [])).frame(), into: &out)
            case .receipt(let receipt):
                guard session.isEstablished, let peer = session.knownPeer else {
                    return perform(session.receivedDataBeforeHandshake(now: now), now: now)
                }
                guard peer.protocolVersion >= SyncMessage.receiptProtocol else {
                    return fail(SyncError(.protocolViolation, "the peer sent a receipt in a session that negotiated protocol \(peer.protocolVersion)"), notifyPeer: true)
                }
                try takeReceipt(receipt, from: peer)
                out.append(SyncMessage.ack(.init(batchID: receipt.id, applied: 0, rejected: [])).frame())
            case .caughtUp(let notice):
                guard session.isEstablished else {
                    return perform(session.receivedDataBeforeHandshake(now: now), now: now)
                }
                session.receiveCaughtUp(id: notice.id)
                // The peer sends the notice only with nothing in flight: a value it sent part of was
                // given up (overtaken); what came stays staged for a later session.
                if session.peerHasNothingMore { receiving = nil }
                // Everything the phone sent before the notice is applied: what a re-baseline notice
                // marked and its baseline did not send again goes now.
                if port.role == .watch, session.peerHasNothingMore { _ = try port.sweepRebaselineMarks(after: .caughtUp) }
                out.append(SyncMessage.ack(.init(batchID: notice.id, applied: 0, rejected: [])).frame())
            case .manualRequest(let request):
                guard session.isEstablished, let peer = session.knownPeer else {
                    return perform(session.receivedDataBeforeHandshake(now: now), now: now)
                }
                let accepted = configuration.answersManualRequests(peer.node)
                let released = accepted ? try port.releaseManualChanges() : 0
                // What was released goes out after the answer; a caught-up notice follows it again.
                if released > 0 { session.retractCaughtUp() }
                out.append(SyncMessage.manualReply(.init(id: request.id, accepted: accepted, released: released,
                                                         replyID: session.takeMessageID())).frame())
                emit(.manualRequestReceived(accepted: accepted, released: released))
                if !accepted {
                    reporter.logger.info("declined the peer's request for the manual changes", metadata: ["peer": "\(String(peer.node, radix: 16))"])
                }
            case .manualReply(let reply):
                guard session.isEstablished else { return perform(session.receivedDataBeforeHandshake(now: now), now: now) }
                takeManualReply(reply)
            case .error(let error):
                renewNodeID(after: error)
                // The peer's words, escaped and bounded: they end up in logs and events.
                let reported = SyncError(SyncError.Code(PeerText.escaped(error.code, maxLength: 64)),
                                         "the peer ended the session: \(PeerText.escaped(error.message))")
                session.fail(reported)
                failureReported = true
                endLiveSession()
                emit(.error(reported))
                return []
            }
        } catch let error as SyncError {
            return out + fail(error, notifyPeer: true)
        } catch {
            return out + fail(SyncError(.database, "\(error)"), notifyPeer: true)
        }
        // Commits held back during a burst wait for its pause or `maxDelay`, not for this frame;
        // a quick commit held alone waits only while a batch is in flight.
        return out + (holdsLocalChanges && (coalescing.inBurst || !session.isQuiet) ? [] : pump(now: now))
    }

    /// Asks the peer for its manual changes (it may decline; either way a
    /// `manualRequestAnswered` event follows its answer). Nothing is sent
    /// before the session is established, and a protocol-1 peer, which does
    /// not know the request, is never asked: both are an `.error` event
    /// (`not-connected`, `unsupported-version`). Not retransmitted within
    /// the session (`awaitsManualReply` tells its driver to ask again in the next).
    package func requestManualChanges(now: Int64) -> [Frame] {
        guard failure == nil, session.isEstablished else {
            emit(.error(SyncError(.notConnected, "cannot ask the peer for its manual changes: no session is established")))
            return []
        }
        guard session.peerSpeaksProtocol2 else {
            emit(.error(SyncError(.unsupportedVersion, "the peer's app is too old to be asked for its manual changes (protocol 1); update it")))
            return []
        }
        let id = session.takeMessageID()
        manualRequestIDs.insert(id)
        return [SyncMessage.manualRequest(.init(id: id)).frame()]
    }

    /// Whether a manual request was sent in this session and not answered yet.
    package var awaitsManualReply: Bool { !manualRequestIDs.isEmpty }
    /// The ids of the manual requests sent in this session and not answered yet.
    var manualRequestIDs: Set<UInt64> = []

    /// Retransmits what timed out, then sends what is pending.
    package func tick(now: Int64) -> [Frame] {
        guard failure == nil else { return [] }
        if awaitsPeerReceipt, let timedOut = receiptTimedOut(now: now) { return timedOut }
        recordDeferredCursor(dueOnly: true)
        port.retryDeferredWork()
        let actions = session.tick(now: now).map { action -> ReplicationSession.Action in
            guard case .send(.batch(let batch)) = action else { return action }
            return .send(.batch(current(batch)))
        }
        return perform(actions, now: now) + pump(now: now)
    }

    /// `batch` as it is resent: without the entries this store has since
    /// superseded (a newer version of the key is further on in the stream,
    /// and goes in its own batch). A stale copy must not reach a peer that
    /// has since received the newer version, applied it and purged it (a
    /// tombstone): with nothing left to compare, the old value would come back.
    private func current(_ batch: SyncMessage.Batch) -> SyncMessage.Batch {
        var fresh = batch
        fresh.entries = batch.entries.filter { entry in
            do {
                return try port.localVersion(forKey: entry.key) == entry.version
            } catch {
                return true  // unreadable now: resent as it was
            }
        }
        return fresh
    }

    /// Sends what the peer has not acknowledged, as far as the window allows:
    /// first the changes of keys whose declarations agree again, then the
    /// stream after this session's read position (automatic changes, and
    /// manual ones released by `sync()`).
    package func pump(now: Int64) -> [Frame] {
        // Cleared first: a pump that sends nothing never asks to be called again.
        pumpStoppedEarly = false
        guard session.isEstablished, failure == nil, !awaitsPeerReceipt, let peer = session.knownPeer else { return [] }
        coalescing.heldSince = nil  // whatever was held is read now (or, below, once the pass ran)
        // A lane pass a full disk put off may hold stream changes for `sync()`: none go until it ran.
        if port.defersWork { return [] }
        var out: [Frame] = []
        do {
            if repairAwaitsLanes { try readRepairRows(for: peer.node) }
            while session.hasCapacity {
                if out.count >= framesPerPump {
                    pumpStoppedEarly = true
                    break
                }
                if var current = session.stream.transfer {
                    // A resumed transfer sends one chunk, then waits to learn where to go on.
                    if current.awaitsResumeAck { break }
                    if current.next < current.count {
                        out.append(sendChunk(&current, now: now))
                        session.stream.transfer = current.next < current.count || current.awaitsResumeAck ? current : nil
                        continue
                    }
                    session.stream.transfer = nil
                }
                if !session.stream.repairRows.isEmpty {
                    let rows = Array(session.stream.repairRows.prefix(configuration.maxBatchEntries))
                    if rows[0].isLarge {
                        if session.hasChunksInFlight(key: rows[0].key, version: rows[0].entry.version) { break }
                        session.stream.repairRows.removeFirst()
                        try startTransfer(rows[0], upper: nil)
                    } else {
                        let batch = Array(rows.prefix { !$0.isLarge })
                        try beginRoundIfNeeded(from: session.stream.scan, peer: peer)
                        session.stream.repairRows.removeFirst(batch.count)
                        let (id, frame) = sendBatch(batch, now: now)
                        session.stream.repairBatches.insert(id)
                        out.append(frame)
                    }
                    continue
                }
                var lookups = KeyRegistry.FamilyLookupMemo()
                let registry = port.registry, role = port.role, mismatched = session.knownPeer?.mismatchedKeys ?? []
                // Read only when the stream has moved past this session's read position.
                let (fetched, scanned) = try readsToStreamEnd ? ([], session.stream.scan)
                    : port.pendingRows(for: peer.node, after: session.stream.scan, maxEntries: configuration.maxBatchEntries,
                                       maxBytes: configuration.maxBatchBytes) { key, _ in
                        excluded(key, registry: registry, role: role, mismatched: mismatched, memo: &lookups)
                    }
                let before = session.stream.scan
                if fetched.count == 1, fetched[0].isLarge, session.hasChunksInFlight(key: fetched[0].key, version: fetched[0].entry.version) {
                    break  // another value of that version is on its way (a merge since): one at a time
                }
                guard scanned > before else {
                    endRound()
                    // Nothing more to read: once nothing is in flight either, tell the peer (protocol 2).
                    if session.isQuiet, session.stream.transfer == nil, let notice = session.announceCaughtUp(now: now) {
                        out.append(notice.frame())
                    }
                    break
                }
                session.stream.read(through: scanned)
                var rows = fetched
                if configuration.testingFaults.skipTombstones {
                    // Deliberate fault: pretend the deletes were delivered (their range completes without them).
                    rows.removeAll { $0.entry.deleted }
                }
                if rows.isEmpty {
                    // Only changes this peer does not get: passed over, nothing to wait for.
                    try complete(upper: scanned)
                    endRoundIfReached(scanned)
                    continue
                }
                if rows.count == 1, rows[0].isLarge {
                    try startTransfer(rows[0], upper: scanned)
                    endRoundIfReached(scanned)
                    continue
                }
                try beginRoundIfNeeded(from: before, peer: peer)
                let (id, frame) = sendBatch(rows, range: session.stream.messageRange(through: scanned, anchor: port.latestVersion()), now: now)
                session.stream.batchRanges[id] = scanned
                out.append(frame)
                endRoundIfReached(scanned)
                // With burst coalescing, a batch short of its limits took every change committed
                // when it was read: later commits are new local changes, which go as those rules say
                // (each wakes the loop), instead of at once in a batch of their own.
                if configuration.burstCoalescing != nil, rows.count < configuration.maxBatchEntries,
                   frame.payload.count < configuration.maxBatchBytes / 2 { break }
            }
        } catch let error as SyncError {
            return out + fail(error, notifyPeer: true)
        } catch {
            return out + fail(SyncError(.database, "\(error)"), notifyPeer: true)
        }
        return out
    }

    private func sendBatch(_ rows: [OutboundRow], range: SyncMessage.StreamRange? = nil, now: Int64) -> (id: UInt64, frame: Frame) {
        let message = session.sendBatch(entries: rows.map(\.entry), items: rows.map { .init(key: $0.key, seq: $0.seq) }, range: range, now: now)
        guard case .batch(let batch) = message else { preconditionFailure("sendBatch returns a batch") }
        let frame = encoded(message)
        session.stream.batchNumber += 1
        if session.stream.batchTotal > 0 { session.stream.batchTotal = max(session.stream.batchTotal, session.stream.batchNumber) }
        count {
            $0.batchesSent += 1
            $0.entriesSent += rows.count
            $0.bytesSent += frame.payload.count
        }
        emit(.batchSent(number: session.stream.batchNumber, total: session.stream.batchTotal, entries: rows.count))
        return (batch.id, frame)
    }

    /// A watch's cursor moved and waits for `syncCommitted()` (only with `defersAcknowledgementSync`).
    var cursorAwaitsSync = false

    /// A phone records its peer's cursor less often than it moves (`ReplicationEndpoint+CursorRecord`).
    package var defersCursorRecord = false
    /// The cursor this session holds and the store does not yet (`defersCursorRecord`).
    package internal(set) var unrecordedCursor: Int64?
    /// When the cursor was last recorded (the store's physical clock, milliseconds).
    var cursorRecordedAt = Int64.min / 2

    /// Whether this session has read the stream through the last position
    /// the store gave out (nothing after it to read; a commit of another
    /// process that shares the file counts once the store has caught up with it).
    var readsToStreamEnd: Bool {
        guard let position = try? port.streamPosition() else { return false }
        return session.stream.scan >= position
    }

    /// Entries from the peer that changed this store, in this session so far.
    package internal(set) var entriesApplied = 0
    /// The large value from the peer that is partly received (more chunks will come).
    var receiving: IncomingTransfer?
    /// Which value of each large value's version this session staged chunks of (`ChunkValueLog`).
    var chunkValues = ChunkValueLog()
    /// The version and value of each large value this session began to send, with a peer before protocol 5 (`checkOneValuePerVersion`).
    var chunkValuesSent: [String: (version: HLCTimestamp, value: SyncMessage.ChunkedValue)] = [:]

    /// Whether a large value from the peer is partly received and still
    /// wanted: not once this store holds that version or a newer one of its
    /// key (the peer stops a transfer its newer change overtook, and sends
    /// that change instead; the session would never be idle again).
    var receivingTransfer: Bool {
        guard let receiving else { return false }
        if let local = try? port.localVersion(forKey: receiving.key), local >= receiving.version { return false }
        return true
    }

    /// Publishes `event` as concerning this session's peer.
    func emit(_ event: SyncEvent) {
        reporter.report(event, peer: session.knownPeer?.node)
    }

    /// Reports counter increments (`update` applied to zeros).
    func count(_ update: (inout SyncCounters) -> Void) {
        var delta = SyncCounters()
        update(&delta)
        reporter.count(delta)
    }

    /// Ends the session locally (the connection went away).
    package func connectionLost() {
        session.close()
        endLiveSession()
    }

    /// The peer's cursor when this session was established (moved by the
    /// phone's receipt): a re-baseline notice concerns only what the peer
    /// had acknowledged, or received, by then.
    var cursorAtStart: Int64?
    /// The keys recorded as declared differently when this session was
    /// established: what the peer acknowledged of them by then, it passed
    /// over. A re-baseline notice that arrives once their repair finished
    /// (the notice lost and sent again) still leaves those entries alone.
    var mismatchedAtStart: Set<String> = []
    /// A phone's re-baseline notice waits for the watch to acknowledge a caught-up notice (`SyncStore.owesLiveCaughtUp`).
    var owesLiveCaughtUp = false
    /// The repair's changes are read once a lane pass a full disk put off ran (`readRepairRows`).
    var repairAwaitsLanes = false
    /// How far the peer's stream is received (protocol 3), and how far the store has it recorded.
    var receivedStream = ReceivedStream()
    /// When applying a batch last recorded `receivedStream`.
    var receivedRecordedAt = Int64.min / 2
    /// A watch in a protocol-3 session waits for the phone's receipt before reading its stream.
    var awaitsPeerReceipt = false { didSet { receiptAwaitedSince = nil } }
    var receiptAwaitedSince: Int64?  // the first tick that found the watch waiting (`receiptTimedOut`)
    /// The re-baseline notices (ids) this session acted on: a copy (retransmitted, or
    /// duplicated by the link) only is acknowledged again.
    var noticesActedOn: Set<UInt64> = []
    /// The peer whose receipt this endpoint (one connection) took.
    var receiptTakenFrom: UInt32?

    /// The peer this session told the port it is live with (once established).
    private(set) var livePeer: UInt32?

    /// Tells the port the session with its peer is over (once), and records
    /// how far its stream was received.
    private func endLiveSession() {
        guard let peer = livePeer else { return }
        recordDeferredCursor()
        livePeer = nil
        recordReceivedStream(from: peer)
        port.noteSession(with: peer, live: false)
    }

    deinit { endLiveSession() }

    // MARK: helpers

    /// `message` as a frame of the session's negotiated protocol (1 before the handshake).
    private func encoded(_ message: SyncMessage) -> Frame {
        message.frame(protocolVersion: session.knownPeer?.protocolVersion ?? 1)
    }

    private func perform(_ actions: [ReplicationSession.Action], now: Int64) -> [Frame] {
        var out: [Frame] = []
        for action in actions {
            switch action {
            case .send(let message):
                out.append(encoded(message))
            case .established(let peer):
                do {
                    if let conflict = try nodeIDConflict(with: peer) { return out + fail(conflict, notifyPeer: true) }
                    // Live before its row is recorded: `forgetPeer` then either runs first (the row
                    // comes back at cursor 0) or sees the session and refuses.
                    if livePeer == nil {
                        livePeer = peer.node
                        port.noteSession(with: peer.node, live: true)
                    }
                    // The established state starts its stream progress afresh: from the recorded cursor.
                    recordDeferredCursor()
                    let record = try port.recordPeer(node: peer.node, role: peer.role, epoch: configuration.pairingEpoch)
                    session.stream = StreamProgress(cursor: record.cursor)
                    cursorRecordedAt = port.nowMilliseconds()  // the store holds the session's cursor
                    cursorAtStart = record.cursor
                    mismatchedAtStart = record.mismatched
                    noticesActedOn = []
                    let received = try port.receivedThrough(from: peer.node)
                    receivedStream = ReceivedStream(through: received.through, anchor: received.anchor)
                    // Protocol 3: the receipt goes first (before a re-baseline notice, which the watch
                    // acts on only once it has the receipt), and a watch reads its stream only after the phone's.
                    awaitsPeerReceipt = false
                    if peer.protocolVersion >= SyncMessage.receiptProtocol {
                        // What the receipt vouches for is on stable storage first (an apply of the
                        // last session may still wait for its sync): the watch acts on it for good.
                        if receivedStream.through > 0 { try port.syncCommitted() }
                        out.append(encoded(session.sendReceipt(received: receivedStream, acknowledgedThrough: record.cursor,
                                                               anchor: port.latestVersion(), now: now)))
                        // A session established again on a late hello of this connection keeps the receipt it had.
                        awaitsPeerReceipt = port.role == .watch && receiptTakenFrom != peer.node
                    }
                    // A watch the phone has no cursor for, after tombstones were purged: re-baseline it first.
                    if let purged = try port.rebaselineNotice(for: peer.node, cursor: record.cursor, queuedIn: nil) {
                        out.append(encoded(session.sendRebaseline(purgedThrough: purged, generation: try port.rebaselineGeneration(for: peer.node),
                                                                  now: now)))
                    }
                    owesLiveCaughtUp = try port.role == .phone && port.owesLiveCaughtUp(to: peer.node)
                    // Keys declared differently are passed over; remember them (with those of earlier
                    // sessions) so that, once both sides agree, their changes are sent whatever the cursor.
                    session.stream.repairedNames = record.mismatched.subtracting(peer.mismatchedKeys)
                    let mismatchedHere = ReplicationSession.declared(peer.mismatchedKeys, in: port.registry.wireDeclarations(from: port.role))
                    if !mismatchedHere.isSubset(of: record.mismatched) {
                        try port.setMismatchedKeys(record.mismatched.union(mismatchedHere), for: peer.node)
                    }
                    // What the two registries were when they were compared: queued messages of the
                    // peer's registry are then applied key by key (`MailboxReplicator`).
                    let registries = port.registry.fingerprint(for: port.role) + peer.registryFingerprint
                    if record.registries != registries { try port.recordRegistries(registries, for: peer.node) }
                    try readRepairRows(for: peer.node)
                } catch let error as SyncError {
                    return out + fail(error, notifyPeer: true)
                } catch {
                    return out + fail(SyncError(.database, "\(error)"), notifyPeer: true)
                }
                count { $0.sessions += 1 }
                emit(.connected(peerNode: peer.node, peerRole: peer.role))
                if !peer.mismatchedKeys.isEmpty { reportMismatches(peer.mismatchedKeys) }
            case .fail(let error, let notify):
                out += fail(error, notifyPeer: notify)
            }
        }
        return out
    }

    /// Ends the session with `error` (the session may have failed itself, on
    /// a bad hello): reported once, and sent to the peer when `notifyPeer`.
    func fail(_ error: SyncError, notifyPeer: Bool) -> [Frame] {
        guard !failureReported else { return [] }
        failureReported = true
        session.fail(error)
        endLiveSession()
        emit(.error(error))
        reporter.logger.error("replication session failed", metadata: ["code": "\(error.code)"])
        return notifyPeer ? [SyncMessage.error(.init(code: error.code.rawValue, message: error.messageForPeer)).frame()] : []
    }
}
