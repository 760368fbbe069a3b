import SyncTransport

/// The replication shell for one session: feeds frames to the pure
/// `SessionStateMachine`, performs its actions against the store, and returns
/// the frames to send. Synchronous and step-driven, so the same code runs
/// under the deterministic simulator and under the async `SyncPeer` over TCP.
///
/// Not thread-safe: one task owns an endpoint.
public final class ReplicationEndpoint {
    public let store: SyncStore
    public let configuration: ReplicationConfiguration
    private var machine: SessionStateMachine
    private var cursor: Int64 = 0
    private var lastFlush: Int64 = -1
    private var inFlightKeys = Set<FlightKey>()
    private var transfer: Transfer?
    private var batchNumber = 0
    private var batchTotal = 0
    /// Why the session ended, once it has failed.
    public private(set) var failure: SyncError?
    /// When true, acknowledgements of commits are not synced here: they wait in
    /// `takeFramesAwaitingSync()` for the shell to put the commits on stable
    /// storage (`SyncStore.syncCommittedAsync()`) and then send them, so the
    /// session goes on applying while the disk syncs. When false (the
    /// default, for step-driven use) every such acknowledgement is returned
    /// only after its commit was synced.
    public var defersAcknowledgementSync = false
    private var awaitingSync: [Frame] = []

    private struct Transfer {
        var key: String
        var seq: Int64
        var entry: WireEntry
        var bytes: [UInt8]
        var count: Int
        var next: Int
        var checksum: UInt32
    }

    /// `retransmits: false` for a transport that delivers every frame while
    /// connected (see `FrameConnection.deliversEveryFrame`).
    public init(store: SyncStore, configuration: ReplicationConfiguration, retransmits: Bool = true) {
        self.store = store
        self.configuration = configuration
        let identity = SessionStateMachine.Identity(
            node: store.nodeID, role: store.role, pairingEpoch: configuration.pairingEpoch,
            protocolRange: configuration.protocolRange, declarations: store.registry.wireDeclarations(from: store.role),
            fingerprint: store.registry.fingerprint(for: store.role))
        machine = SessionStateMachine(identity: identity, helloRetryInterval: configuration.helloRetryMilliseconds,
                                      retransmitInterval: configuration.retransmitMilliseconds, window: configuration.window)
        machine.retransmits = retransmits
    }

    public var isEstablished: Bool { machine.isEstablished && failure == nil }
    /// The peer's node id once established.
    public var peerNode: UInt32? { machine.peer?.node }
    /// Keys declared differently by the peer.
    public var mismatchedKeys: Set<String> { machine.peer?.mismatchedKeys ?? [] }

    /// Starts the session: the hello.
    public func start(now: Int64) -> [Frame] {
        machine.partialTransfers = (try? store.partialTransfers()) ?? []
        return perform(machine.start(now: now), now: now)
    }

    /// Handles one frame from the peer; returns the frames to send.
    public func receive(_ frame: Frame, now: Int64) -> [Frame] {
        guard failure == nil else { return [] }
        let message: SyncMessage
        do {
            message = try SyncMessage(frame: frame)
        } catch let error as SyncError {
            return fail(error, notifyPeer: true)
        } catch {
            return fail(SyncError(.malformedMessage, "\(error)"), notifyPeer: true)
        }
        var out: [Frame] = []
        do {
            switch message {
            case .hello(let hello):
                out += perform(machine.receiveHello(hello, now: now), now: now)
            case .batch(let batch):
                guard machine.isEstablished, let peer = machine.peer else {
                    return perform(machine.receivedDataBeforeHandshake(now: now), now: now)
                }
                let result = try store.applyRemote(batch.entries, peerRole: peer.role, mismatched: peer.mismatchedKeys,
                                                   lastArrivalWins: configuration.testingFaults.lastArrivalWins,
                                                   durableBeforeReturn: !defersAcknowledgementSync)
                store.counters.withLock {
                    $0.batchesReceived += 1
                    $0.bytesReceived += frame.payload.count
                }
                store.emit(.received(entries: batch.entries.count, applied: result.applied))
                for conflict in result.conflicts {
                    store.emit(.conflictResolved(key: conflict.key, winner: conflict.winner, rule: conflict.rule))
                }
                try acknowledgeDurably(SyncMessage.ack(.init(batchID: batch.id, applied: result.applied, rejected: result.rejected)).frame(), into: &out)
            case .ack(let ack):
                if case .batch(let items)? = machine.acknowledgeBatch(ack.batchID) {
                    try store.acknowledge(items.map { ($0.key, $0.seq) }, peerNode: machine.peer?.node ?? 0)
                    for item in items { inFlightKeys.remove(flightKey(item.key, item.seq)) }
                    if !ack.rejected.isEmpty {
                        store.emit(.error(SyncError(.protocolViolation, "the peer refused \(ack.rejected.count) entries: \(ack.rejected.map { "\($0.key) (\($0.code))" }.joined(separator: ", "))")))
                    }
                }
            case .chunk(let chunk):
                guard machine.isEstablished, let peer = machine.peer else {
                    return perform(machine.receivedDataBeforeHandshake(now: now), now: now)
                }
                store.counters.withLock { $0.bytesReceived += frame.payload.count }
                for reply in try receiveChunk(chunk, peer: peer) {
                    if reply.restsOnCommit { try acknowledgeDurably(reply.frame, into: &out) } else { out.append(reply.frame) }
                }
            case .chunkAck(let ack):
                if case .chunk(let key, let seq, _, _, _)? = machine.acknowledgeChunk(key: ack.key, version: ack.version, index: ack.index),
                   ack.complete {
                    try store.acknowledge([(key, seq)], peerNode: machine.peer?.node ?? 0)
                    inFlightKeys.remove(flightKey(key, seq))
                    store.counters.withLock { $0.entriesSent += 1 }
                }
            case .error(let error):
                // The peer's words, escaped and bounded: they end up in logs and events.
                let reported = SyncError(SyncError.Code(PeerText.escaped(error.code, maxLength: 64)),
                                         "the peer ended the session: \(PeerText.escaped(error.message))")
                failure = reported
                machine.fail()
                store.emit(.error(reported))
                return []
            }
        } catch let error as SyncError {
            return out + fail(error, notifyPeer: true)
        } catch {
            return out + fail(SyncError(.database, "\(error)"), notifyPeer: true)
        }
        return out + pump(now: now)
    }

    /// Retransmits what timed out, then sends what is pending.
    public func tick(now: Int64) -> [Frame] {
        guard failure == nil else { return [] }
        return perform(machine.tick(now: now), now: now) + pump(now: now)
    }

    /// Sends pending changes as far as the window allows: automatic ones, and
    /// manual ones released by `sync()`.
    public func pump(now: Int64) -> [Frame] {
        guard machine.isEstablished, failure == nil else { return [] }
        var out: [Frame] = []
        do {
            let flush = store.manualFlushThrough
            if flush != lastFlush {
                lastFlush = flush
                cursor = 0
            }
            while machine.hasCapacity {
                if var current = transfer {
                    if current.next < current.count {
                        out.append(sendChunk(&current, now: now))
                        transfer = current.next < current.count ? current : nil
                        continue
                    }
                    transfer = nil
                }
                let (fetched, scanned) = try store.pendingRows(after: cursor, flushThrough: flush, maxEntries: configuration.maxBatchEntries,
                                                               maxBytes: configuration.maxBatchBytes) { key, seq in
                    inFlightKeys.contains(flightKey(key, seq)) || excluded(key)
                }
                cursor = scanned
                guard !fetched.isEmpty else { break }
                var rows = fetched
                if configuration.testingFaults.skipTombstones {
                    // Deliberate fault: pretend the deletes were delivered.
                    let tombstones = rows.filter { $0.entry.deleted }
                    try store.acknowledge(tombstones.map { ($0.key, $0.seq) }, peerNode: machine.peer?.node ?? 0)
                    rows.removeAll { $0.entry.deleted }
                    if rows.isEmpty { continue }
                }
                if rows.count == 1, rows[0].isLarge {
                    try startTransfer(rows[0])
                    continue
                }
                let message = machine.sendBatch(entries: rows.map(\.entry), items: rows.map { .init(key: $0.key, seq: $0.seq) }, now: now)
                for row in rows { inFlightKeys.insert(flightKey(row.key, row.seq)) }
                let frame = message.frame()
                batchNumber += 1
                batchTotal = max(batchTotal, batchNumber)
                store.counters.withLock {
                    $0.batchesSent += 1
                    $0.entriesSent += rows.count
                    $0.bytesSent += frame.payload.count
                }
                store.emit(.batchSent(number: batchNumber, total: batchTotal, entries: rows.count))
                out.append(frame)
            }
        } catch let error as SyncError {
            return out + fail(error, notifyPeer: true)
        } catch {
            return out + fail(SyncError(.database, "\(error)"), notifyPeer: true)
        }
        return out
    }

    /// True when established and nothing is in flight or waiting to be sent.
    public var isIdle: Bool {
        guard machine.isEstablished, failure == nil, machine.isQuiet, transfer == nil else { return false }
        let flush = store.manualFlushThrough
        let rows = try? store.pendingRows(after: 0, flushThrough: flush, maxEntries: 1, maxBytes: 1) { key, _ in excluded(key) }
        return rows?.rows.isEmpty ?? false
    }

    /// Acknowledgements whose commits must be on stable storage before they
    /// are sent (only with `defersAcknowledgementSync`); taking them empties the list.
    public func takeFramesAwaitingSync() -> [Frame] {
        defer { awaitingSync.removeAll() }
        return awaitingSync
    }

    /// Sends `frame`, an acknowledgement of commits, once they are on stable
    /// storage: now (after a sync, free when they already are), or through
    /// `takeFramesAwaitingSync()`.
    private func acknowledgeDurably(_ frame: Frame, into out: inout [Frame]) throws {
        if defersAcknowledgementSync {
            awaitingSync.append(frame)
        } else {
            try store.syncCommitted()
            out.append(frame)
        }
    }

    /// Ends the session locally (the connection went away).
    public func connectionLost() {
        machine.fail()
    }

    // MARK: helpers

    /// One change in flight: a key at a change sequence.
    private struct FlightKey: Hashable {
        var seq: Int64
        var key: String
    }

    private func flightKey(_ key: String, _ seq: Int64) -> FlightKey { FlightKey(seq: seq, key: key) }

    private func excluded(_ key: String) -> Bool {
        guard let descriptor = store.registry.descriptor(forEntry: key) else { return true }
        return !descriptor.replicates(from: store.role) || (machine.peer?.mismatchedKeys.contains(descriptor.name) ?? false)
    }

    private func perform(_ actions: [SessionStateMachine.Action], now: Int64) -> [Frame] {
        var out: [Frame] = []
        for action in actions {
            switch action {
            case .send(let message):
                out.append(message.frame())
            case .established(let peer):
                cursor = 0
                lastFlush = store.manualFlushThrough
                inFlightKeys.removeAll()
                transfer = nil
                batchNumber = 0
                do {
                    try store.recordPeer(node: peer.node, role: peer.role, epoch: configuration.pairingEpoch)
                    // The total is only for `batchSent` progress events, and counting reads every
                    // pending row (4 % of a 100,000-entry initial sync): only when someone listens.
                    if store.eventHub.hasSubscribers {
                        let pending = try store.pendingSummary()
                        batchTotal = max(1, (pending.automatic + pending.manualReleased + configuration.maxBatchEntries - 1) / configuration.maxBatchEntries)
                    } else {
                        batchTotal = 0
                    }
                } catch let error as SyncError {
                    return out + fail(error, notifyPeer: true)
                } catch {
                    return out + fail(SyncError(.database, "\(error)"), notifyPeer: true)
                }
                store.counters.withLock { $0.sessions += 1 }
                store.emit(.connected(peerNode: peer.node, peerRole: peer.role))
                if !peer.mismatchedKeys.isEmpty {
                    store.emit(.keyMismatch(keys: peer.mismatchedKeys.sorted()))
                    store.logger.warning("keys declared differently on the peer do not sync", metadata: ["keys": "\(peer.mismatchedKeys.sorted())"])
                }
            case .fail(let error, let notify):
                out += fail(error, notifyPeer: notify)
            }
        }
        return out
    }

    private func fail(_ error: SyncError, notifyPeer: Bool) -> [Frame] {
        guard failure == nil else { return [] }
        failure = error
        machine.fail()
        store.emit(.error(error))
        store.logger.error("replication session failed", metadata: ["code": "\(error.code)"])
        return notifyPeer ? [SyncMessage.error(.init(code: error.code.rawValue, message: error.message)).frame()] : []
    }

    private func startTransfer(_ row: OutboundRow) throws {
        guard let bytes = try store.largeValue(key: row.key, seq: row.seq) else { return }
        let count = (bytes.count + configuration.chunkSize - 1) / configuration.chunkSize
        var start = 0
        if let partial = machine.peer?.partialTransfers.first(where: { $0.key == row.key && $0.version == row.entry.version }) {
            start = min(partial.received, count - 1)
        }
        inFlightKeys.insert(flightKey(row.key, row.seq))
        transfer = Transfer(key: row.key, seq: row.seq, entry: row.entry, bytes: bytes, count: count, next: start, checksum: Checksum.crc32(bytes))
    }

    private func sendChunk(_ t: inout Transfer, now: Int64) -> Frame {
        let low = t.next * configuration.chunkSize
        let slice = Array(t.bytes[low..<min(t.bytes.count, low + configuration.chunkSize)])
        var entry = t.entry
        entry.value = nil
        entry.deleted = false
        let chunk = SyncMessage.Chunk(entry: WireEntry(key: entry.key, version: entry.version, base: entry.base, deleted: false, encoding: entry.encoding, value: []),
                                      totalSize: t.bytes.count, totalChecksum: t.checksum, index: t.next, count: t.count,
                                      checksum: Checksum.crc32(slice), bytes: slice)
        let frame = machine.sendChunk(chunk, seq: t.seq, now: now).frame()
        store.counters.withLock {
            $0.chunksSent += 1
            $0.bytesSent += frame.payload.count
        }
        store.emit(.chunk(key: t.key, index: t.next, count: t.count, outgoing: true))
        t.next += 1
        return frame
    }

    /// What is inconsistent in a chunk's fields, if anything. The sender cuts
    /// a value of `totalSize` bytes into `count` chunks of one size `c` (the
    /// last one shorter), so `c * (count - 1) < totalSize <= c * count`.
    static func chunkProblem(_ chunk: SyncMessage.Chunk) -> String? {
        let total = chunk.totalSize, count = chunk.count, size = chunk.bytes.count
        if chunk.entry.deleted { return "a chunk cannot carry a delete" }
        if !(chunk.entry.value ?? []).isEmpty { return "a chunk's entry must not carry an inline value" }
        guard total >= 1 else { return "the announced total size is 0" }
        guard count >= 1, count <= total else { return "\(count) chunks cannot hold \(total) bytes" }
        guard chunk.index >= 0, chunk.index < count else { return "index out of range" }
        guard size >= 1, size <= total else { return "a chunk of \(size) bytes for a value of \(total) bytes" }
        if chunk.index < count - 1 {
            let (all, overflowAll) = size.multipliedReportingOverflow(by: count)
            let (before, overflowBefore) = size.multipliedReportingOverflow(by: count - 1)
            guard !overflowAll, !overflowBefore, before < total, total <= all else {
                return "\(count) chunks of \(size) bytes do not make a value of \(total) bytes"
            }
        } else if size > total - (count - 1) {
            return "the last chunk (\(size) bytes) leaves no room for the \(count - 1) before it in \(total) bytes"
        }
        return nil
    }

    /// A chunk acknowledgement, and whether it acknowledges a commit (then it
    /// goes out only once that commit is on stable storage).
    private struct ChunkReply {
        var frame: Frame
        var restsOnCommit: Bool
    }

    private func receiveChunk(_ chunk: SyncMessage.Chunk, peer: SessionStateMachine.Peer) throws -> [ChunkReply] {
        let entry = chunk.entry
        func ack(complete: Bool, restsOnCommit: Bool = false) -> ChunkReply {
            ChunkReply(frame: SyncMessage.chunkAck(.init(key: entry.key, version: entry.version, index: chunk.index, complete: complete)).frame(),
                       restsOnCommit: restsOnCommit)
        }
        guard let descriptor = store.registry.descriptor(forEntry: entry.key), descriptor.replicates(from: peer.role),
              !peer.mismatchedKeys.contains(descriptor.name), descriptor.encoding == entry.encoding,
              chunk.totalSize <= store.options.maxValueSize else {
            store.counters.withLock { $0.entriesRejected += 1 }
            return [ack(complete: true)]
        }
        if let problem = ReplicationEndpoint.chunkProblem(chunk) {
            throw SyncError(.malformedMessage, "chunk \(chunk.index) of \(entry.key): \(problem)")
        }
        let now = store.physicalClock.nowMilliseconds()
        if let refusal = SyncStore.versionRefusal(entry, bound: store.versionBound(), now: now) {
            store.counters.withLock {
                $0.entriesRejected += 1
                $0.versionsRefused += 1
            }
            store.emit(.versionRefused(key: refusal.key, aheadMilliseconds: refusal.aheadMilliseconds))
            return [ack(complete: true)]
        }
        if let local = try store.entryInfo(forKey: entry.key), local.version >= entry.version {
            try store.discardStagedChunks(key: entry.key, through: local.version)
            return [ack(complete: true, restsOnCommit: true)]  // the acknowledgement rests on that commit
        }
        guard Checksum.crc32(chunk.bytes) == chunk.checksum else {
            store.emit(.error(SyncError(.malformedMessage, "chunk \(chunk.index) of \(entry.key) failed its checksum; waiting for a resend")))
            return []
        }
        store.counters.withLock { $0.chunksReceived += 1 }
        store.emit(.chunk(key: entry.key, index: chunk.index, count: chunk.count, outgoing: false))
        let encrypted = descriptor.security == .encrypted
        let staged = try store.stageChunk(chunk, encrypted: encrypted)
        guard staged >= chunk.count else { return [ack(complete: false)] }
        let bytes = try store.assembleChunks(key: entry.key, version: entry.version, encrypted: encrypted)
        guard bytes.count == chunk.totalSize, Checksum.crc32(bytes) == chunk.totalChecksum else {
            _ = try store.applyRemote([], peerRole: peer.role, mismatched: [], completingChunksOf: (entry.key, entry.version))
            store.emit(.error(SyncError(.malformedMessage, "the chunks of \(entry.key) did not add up to the announced value; it will be sent again")))
            return []
        }
        var complete = entry
        complete.value = bytes
        let result = try store.applyRemote([complete], peerRole: peer.role, mismatched: peer.mismatchedKeys,
                                           completingChunksOf: (entry.key, entry.version), durableBeforeReturn: !defersAcknowledgementSync)
        store.emit(.received(entries: 1, applied: result.applied))
        return [ack(complete: true, restsOnCommit: true)]
    }
}
