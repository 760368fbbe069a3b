import Logging
import SyncTransport

/// The `ReplicationPort` contract kept in dictionaries: a stream of changes
/// numbered by a change sequence, per-peer cursors, staged chunks, a conflict
/// log. For driving sessions fast through many histories; it passes the same
/// conformance suite as `SQLiteReplicationPort`. Nothing is persisted beyond
/// the object (restarting a session keeps the port: its "disk").
///
/// Local writes go through `write(_:_:)`; manual changes wait for `requestManualSync()`.
package final class InMemoryReplicationPort: ReplicationPort {
    /// One key's newest version and where it stands in the stream.
    package struct Row: Sendable, Equatable {
        package var key: String
        package var value: [UInt8]?
        package var encoding: String
        package var version: HLCTimestamp
        package var base: HLCTimestamp
        package var deleted: Bool
        package var seq: Int64
        package var lane: SyncLane
        /// The peer this version came from (never sent back to it); 0 for a local change.
        package var originPeer: UInt32

        package var state: EntryState { EntryState(version: version, base: base, deleted: deleted, value: value) }
        var size: Int { deleted ? 0 : (value?.count ?? 0) }
    }

    private struct Peer {
        var record: PeerRecord
        var role: DeviceRole
        var epoch: String
    }

    private struct ConflictID: Hashable {
        var key: String
        var local: HLCTimestamp
        var remote: HLCTimestamp
    }

    package var nodeID: UInt32 { hlc.node }
    package let role: DeviceRole
    package let registry: KeyRegistry
    package var maxValueSize: Int
    package var maxRemoteClockAhead: Duration
    package let clock: ManualClock
    private let hlc: HybridLogicalClock
    package private(set) var rows: [String: Row] = [:]
    private var nextSeq: Int64 = 1
    /// How many times the stream was read (`pendingRows`), for tests of what a session reads.
    package private(set) var streamReads = 0
    private var peers: [UInt32: Peer] = [:]
    /// Pairings whose watch takes a new node id when refused for it (`noteQueuedPeerRenewsNodeID`).
    private var queuedRenewals: Set<String> = []
    private var chunks: [ChunkedVersion: [Int: [UInt8]]] = [:]
    /// The value the staged chunks of each version belong to.
    private var chunkValues: [ChunkedVersion: ChunkedValue] = [:]
    private struct ChunkedValue: Equatable {
        var size: Int
        var checksum: UInt32
    }
    private var loggedConflicts: Set<ConflictID> = []
    /// Resolved conflicts, oldest first.
    package private(set) var conflictLog: [ConflictRecord] = []

    package init(node: UInt32, role: DeviceRole, registry: KeyRegistry, clock: ManualClock = ManualClock(),
                 maxValueSize: Int = StoreOptions().maxValueSize, maxRemoteClockAhead: Duration = StoreOptions().maxRemoteClockAhead) {
        self.role = role
        self.registry = registry
        self.clock = clock
        self.maxValueSize = maxValueSize
        self.maxRemoteClockAhead = maxRemoteClockAhead
        hlc = HybridLogicalClock(node: node, physical: clock, maxAhead: maxRemoteClockAhead)
    }

    // MARK: local changes

    /// Writes `bytes` (nil removes) to `key` here, as an app would: a new
    /// version after the one stored, in the lane its policy gives. Writing
    /// the stored value again changes nothing.
    package func write(_ key: String, _ bytes: [UInt8]?) throws {
        guard let descriptor = registry.descriptor(forEntry: key) else {
            throw SyncError(.unknownKey, "no declaration for key '\(key)'")
        }
        let current = rows[key]
        if let current, current.deleted ? bytes == nil : current.value == bytes { return }
        if current == nil && bytes == nil { return }
        let size = bytes?.count ?? 0
        // After the version it replaces, as the store's writes (`HybridLogicalClock.reserve`).
        let version = HLCTimestamp(packed: try hlc.reserve(1, replacing: current?.version.packed ?? 0), node: hlc.node)
        rows[key] = Row(key: key, value: bytes, encoding: descriptor.encoding, version: version,
                        base: HLCTimestamp.base(current?.version ?? .zero, of: version),
                        deleted: bytes == nil, seq: takeSeq(),
                        lane: SyncStore.lane(for: descriptor, on: role, size: size, deleted: bytes == nil), originPeer: 0)
    }

    /// Releases the manual lane for sending (new sequence numbers, after every cursor).
    package func requestManualSync() {
        _ = releaseManualChanges()
    }

    package func releaseManualChanges() -> Int {
        let keys = rows.values.filter({ $0.lane == .manual }).sorted(by: { $0.seq < $1.seq }).map(\.key)
        for key in keys {
            rows[key]!.lane = .released
            rows[key]!.seq = takeSeq()
        }
        return keys.count
    }

    /// The stored state of `key`.
    package func state(_ key: String) -> EntryState? { rows[key]?.state }

    private func takeSeq() -> Int64 {
        defer { nextSeq += 1 }
        return nextSeq
    }

    // MARK: ReplicationPort

    package func nowMilliseconds() -> Int64 { clock.nowMilliseconds() }
    package func versionBound() -> Int64 { SyncStore.versionBound(now: clock.nowMilliseconds(), ahead: maxRemoteClockAhead) }

    private var stream: [Row] { rows.values.filter { $0.lane.isSent }.sorted { $0.seq < $1.seq } }

    private func outbound(_ row: Row) -> OutboundRow {
        let isLarge = !row.deleted && row.size > SyncStore.inlineValueLimit
        return OutboundRow(key: row.key, seq: row.seq,
                           entry: WireEntry(key: row.key, version: row.version, base: row.base, deleted: row.deleted,
                                            encoding: row.encoding, value: row.deleted || isLarge ? nil : row.value),
                           size: row.size, isLarge: isLarge)
    }

    package func pendingRows(for peer: UInt32, after cursor: Int64, maxEntries: Int, maxBytes: Int,
                             skip: (String, Int64) -> Bool) throws -> (rows: [OutboundRow], scannedThrough: Int64) {
        streamReads += 1
        var out: [OutboundRow] = []
        var bytes = 0
        var scanned = cursor
        for row in stream where row.seq > cursor {
            if row.originPeer == peer || skip(row.key, row.seq) {
                scanned = row.seq
                continue
            }
            let next = outbound(row)
            if next.isLarge && !out.isEmpty { break }
            out.append(next)
            scanned = row.seq
            bytes += row.size + row.key.utf8.count + 32
            if next.isLarge || out.count >= maxEntries || bytes >= maxBytes { break }
        }
        return (out, scanned)
    }

    package func rows(declaredBy names: Set<String>, for peer: UInt32, maxEntries: Int) throws -> [OutboundRow] {
        guard !names.isEmpty else { return [] }
        return Array(stream.lazy.filter { row in
            row.originPeer != peer && (self.registry.descriptor(forEntry: row.key).map { names.contains($0.name) } ?? false)
        }.prefix(maxEntries).map(outbound))
    }

    package func pendingCount(for peer: UInt32) throws -> Int {
        let cursor = peers[peer]?.record.cursor ?? 0
        return stream.count { $0.seq > cursor && $0.originPeer != peer }
    }

    package func largeValue(key: String, seq: Int64) throws -> [UInt8]? {
        guard let row = rows[key], row.seq == seq, !row.deleted else { return nil }
        return row.value
    }

    package func localVersion(forKey key: String) throws -> HLCTimestamp? { rows[key]?.version }

    package func holdsValue(forKey key: String, size: Int, checksum: UInt32) throws -> Bool {
        guard let row = rows[key], !row.deleted, let value = row.value else { return false }
        return value.count == size && Checksum.crc32(value) == checksum
    }

    /// Received-through positions and anchors by peer (`receivedThrough(from:)`).
    private var received: [UInt32: (through: Int64, anchor: Int64)] = [:]

    package func receivedThrough(from peer: UInt32) throws -> (through: Int64, anchor: Int64) { received[peer] ?? (0, 0) }
    package func recordReceived(from peer: UInt32, through: Int64, anchor: Int64) throws {
        if through > (received[peer]?.through ?? 0) { received[peer] = (through, anchor) }
    }
    package func streamPosition() throws -> Int64 { nextSeq - 1 }
    package func latestVersion() -> Int64 { hlc.latest }
    package func firstChangeNewer(than anchor: Int64, for peer: UInt32, after cursor: Int64, through position: Int64) throws -> Int64? {
        stream.first { $0.seq > cursor && $0.seq <= position && $0.originPeer != peer && $0.version.packed > anchor }?.seq
    }

    package func apply(_ entries: [WireEntry], from peer: UInt32, completing: ChunkedVersion?, durable: Bool,
                       receivedThrough: (through: Int64, anchor: Int64)?, passingOver: Int64?,
                       plan decide: ([String: EntryState]) -> ApplyPlan) throws -> ApplyOutcome {
        if let receivedThrough { try recordReceived(from: peer, through: receivedThrough.through, anchor: receivedThrough.anchor) }
        let positionBefore = nextSeq - 1
        var taken: Int64 = 0
        var local: [String: EntryState] = [:]
        for entry in entries { if let row = rows[entry.key] { local[entry.key] = row.state } }
        let plan = decide(local)
        var outcome = ApplyOutcome()
        var written: [Row] = []
        for step in plan.steps {
            let incoming = step.entry
            if case .refuse = step.verdict { continue }
            guard let descriptor = (step.registered ?? registry.registered(forEntry: incoming.key))?.descriptor else { continue }
            hlc.observe(incoming.version)
            if let conflict = step.verdict.conflict,
               loggedConflicts.insert(ConflictID(key: incoming.key, local: conflict.local, remote: incoming.version)).inserted {
                conflictLog.append(ConflictRecord(key: incoming.key, localVersion: conflict.local, remoteVersion: incoming.version,
                                                  winner: conflict.winner, rule: conflict.rule))
                outcome.conflicts.append(conflictLog.last!)
            }
            let row: Row
            switch step.verdict {
            case .refuse:
                continue
            case .ignore:
                // `peer` had ours (it sent it, or acknowledged it) and now sends an older version: it
                // lost ours, which goes back.
                if var local = rows[incoming.key], peer != 0, incoming.version < local.version, local.lane.isSent, descriptor.replicates(from: role),
                   local.originPeer == peer || local.seq <= (peers[peer]?.record.cursor ?? 0),
                   !written.contains(where: { $0.key == incoming.key }) {
                    local.originPeer = 0
                    local.seq = takeSeq()
                    rows[local.key] = local
                }
                continue
            case .take:
                row = Row(key: incoming.key, value: incoming.deleted ? nil : (incoming.value ?? []), encoding: incoming.encoding,
                          version: incoming.version, base: incoming.base, deleted: incoming.deleted, seq: takeSeq(),
                          lane: descriptor.replicates(from: role) ? .automatic : .none, originPeer: peer)
                taken += 1
            case .merge(let value, let version, let base, _):
                let lane = SyncStore.mergedLane(for: descriptor, on: role, size: value.count, replacing: rows[incoming.key]?.lane)
                if SyncStore.defers(descriptor, in: lane) { outcome.deferred.append((incoming.key, value.count)) }
                row = Row(key: incoming.key, value: value, encoding: incoming.encoding, version: version, base: base, deleted: false,
                          seq: takeSeq(), lane: lane, originPeer: 0)
            }
            rows[row.key] = row
            written.append(row)
            outcome.changes.append(StoreChange(key: row.key, kind: row.deleted ? .removed : .set, origin: .remote, version: row.version,
                                               peer: peer == 0 ? nil : peer))
        }
        if let completing { chunks[completing] = nil }
        // Chunks of the very version written stay: they may carry another value of it (a merge).
        for row in written { try discardStagedChunks(key: row.key, before: row.version) }
        // Every position given out here is a change taken from `peer`: its cursor moves past them.
        let positionAfter = nextSeq - 1
        if let passingOver, passingOver == positionBefore, positionAfter > positionBefore, positionAfter - positionBefore == taken,
           let known = peers[peer], known.record.cursor == passingOver {
            peers[peer]!.record.cursor = positionAfter
            outcome.passedOverThrough = positionAfter
        }
        return outcome
    }

    package func syncCommitted() throws {}

    /// The in-memory port keeps every tombstone (it never purges), so it never
    /// sends a re-baseline notice.
    package func rebaselineNotice(for peer: UInt32, cursor: Int64, queuedIn pairingEpoch: String?) throws -> Int64? { nil }
    package func adoptRebaselineGeneration(for peer: UInt32) throws {}
    package func purgedThrough() throws -> Int64 { 0 }
    package func owesQueuedCaughtUp(in pairingEpoch: String) throws -> Bool { false }
    package func settleQueuedCaughtUp(in pairingEpoch: String) throws {}
    package func owesLiveCaughtUp(to peer: UInt32) throws -> Bool { false }
    package func settleLiveCaughtUp(for peer: UInt32) throws {}
    package func queueLiveCaughtUp(for peer: UInt32, in pairingEpoch: String) throws {}
    package func rebaselineGeneration(for peer: UInt32) throws -> Int64 { 0 }
    package var liveRebaselineCount: Int { 0 }
    package func registerQueuedSpool(_ mailbox: Mailbox) {}
    package func whileQueuedPosting(_ body: () throws -> Void) throws { try body() }
    package func rebaselineMark(forKey key: String) throws -> HLCTimestamp? { nil }

    /// Refused: only a store that purges tombstones sends notices, and this
    /// port speaks only with its own kind.
    package func applyRebaseline(purgedThrough: Int64, from peer: UInt32, mismatched: Set<String>, acknowledgedBefore: Int64?,
                                 generation: Int64?, removal: SyncStore.RebaselineRemoval) throws -> Int {
        throw SyncError(.protocolViolation, "the in-memory port does not take re-baseline notices")
    }

    /// None: no notices are taken.
    package func liveRebaselineGeneration(from peer: UInt32) throws -> Int64? { nil }

    /// Refused, as notices are.
    package func expectQueuedCaughtUp() throws {
        throw SyncError(.protocolViolation, "the in-memory port does not take caught-up markers")
    }

    /// Nothing is ever marked (no notices are taken).
    package func sweepRebaselineMarks(after sweep: SyncStore.RebaselineSweep) throws -> Int { 0 }

    package func noteAppliedOutsideSessions() {}

    /// The in-memory port never forgets a peer.
    package func forgottenRegistries(of node: UInt32) throws -> [UInt8]? { nil }

    package func queuedPeer(role: DeviceRole, epoch: String) throws -> PeerRecord? {
        peers.values.filter { $0.role == role && $0.epoch == epoch }.map(\.record).max { $0.node < $1.node }
    }

    package func queuedPeers(role: DeviceRole, epoch: String) throws -> [PeerRecord] {
        peers.values.filter { $0.role == role && $0.epoch == epoch }.map(\.record).sorted { $0.node < $1.node }
    }

    package func recordPeer(node: UInt32, role: DeviceRole, epoch: String) throws -> PeerRecord {
        if let known = peers[node], known.epoch == epoch {
            peers[node]!.role = role
            return known.record
        }
        // A phone meeting a node through another pairing: what came from it may be another
        // device's, and how far its stream was received tells nothing of this one's.
        if self.role == .phone, peers[node] != nil {
            for (key, row) in rows where row.originPeer == node { rows[key]!.originPeer = 0 }
            received[node] = nil
        }
        // A watch meeting its phone through a new pairing keeps its cursor (the phone holds what it acknowledged).
        let record = self.role == .watch ? peers[node]?.record ?? PeerRecord(node: node, cursor: 0, mismatched: [])
            : PeerRecord(node: node, cursor: 0, mismatched: [])
        peers[node] = Peer(record: record, role: role, epoch: epoch)
        return record
    }

    package func pairingEpoch(ofPeer node: UInt32) throws -> String? { peers[node]?.epoch }
    package func refusesNewPeer(_ node: UInt32) throws -> Bool { false }  // keeps every peer
    package func retryDeferredWork() {}  // puts nothing off
    package var defersWork: Bool { false }
    package func queuedPeerRenewsNodeID(in epoch: String) throws -> Bool { queuedRenewals.contains(epoch) }
    package func noteQueuedPeerRenewsNodeID(in epoch: String) throws { queuedRenewals.insert(epoch) }

    package func renewNodeID(replacing node: UInt32) throws -> UInt32 {
        guard nodeID == node else { return nodeID }
        var renewed: UInt32 = 0
        while renewed == 0 || renewed == node || renewed == MailboxReplicator.unknownPeer || peers[renewed] != nil {
            renewed = .random(in: 1...UInt32.max)
        }
        hlc.adopt(node: renewed)
        return renewed
    }

    package func acknowledge(peer: UInt32, through sequence: Int64) throws {
        guard let known = peers[peer] else { return }
        peers[peer]!.record.cursor = max(known.record.cursor, sequence)
    }

    /// Nothing to do: this port never forgets a peer (it never purges).
    package func noteSession(with peer: UInt32, live: Bool) {}

    package func setMismatchedKeys(_ names: Set<String>, for peer: UInt32) throws {
        peers[peer]?.record.mismatched = names
    }

    package func recordRegistries(_ registries: [UInt8], for peer: UInt32) throws {
        peers[peer]?.record.registries = registries
    }

    package func stageChunk(_ chunk: SyncMessage.Chunk) throws -> StagedChunks {
        let id = ChunkedVersion(key: chunk.entry.key, version: chunk.entry.version)
        for other in chunks.keys where other.key == id.key && other.version < id.version { chunks[other] = nil }
        let value = ChunkedValue(size: chunk.totalSize, checksum: chunk.totalChecksum)
        let replaced = chunks[id] != nil && chunkValues[id] != value
        if replaced { chunks[id] = nil }
        chunkValues[id] = value
        let others = (chunks[id] ?? [:]).filter { $0.key != chunk.index }.values.reduce(0) { $0 + $1.count }
        guard others + chunk.bytes.count <= chunk.totalSize else {
            throw SyncError(.malformedMessage, "the chunks of \(id.key) add up to more than the \(chunk.totalSize) bytes announced for the value")
        }
        chunks[id, default: [:]][chunk.index] = chunk.bytes
        return StagedChunks(contiguous: contiguous(id), replacedAnotherValue: replaced)
    }

    private func contiguous(_ id: ChunkedVersion) -> Int {
        var expected = 0
        while chunks[id]?[expected] != nil { expected += 1 }
        return expected
    }

    package func assembleChunks(key: String, version: HLCTimestamp) throws -> [UInt8] {
        let staged = chunks[ChunkedVersion(key: key, version: version)] ?? [:]
        return staged.keys.sorted().flatMap { staged[$0]! }
    }

    package func discardStagedChunks(key: String, through version: HLCTimestamp) throws {
        for id in chunks.keys where id.key == key && id.version <= version { chunks[id] = nil }
    }

    package func discardStagedChunks(key: String, before version: HLCTimestamp) throws {
        for id in chunks.keys where id.key == key && id.version < version { chunks[id] = nil }
    }

    package func partialTransfers() throws -> [PartialTransfer] {
        for id in chunks.keys {
            if let row = rows[id.key], row.version > id.version { chunks[id] = nil }
        }
        return chunks.keys.map { PartialTransfer(key: $0.key, version: $0.version, received: contiguous($0)) }
    }

    /// The cursor and mismatched keys recorded for `peer`.
    package func peerRecord(_ peer: UInt32) -> PeerRecord? { peers[peer]?.record }
}

/// A reporter that keeps what a session reports: for tests and drivers without a store.
package final class RecordingReporter: ReplicationReporter {
    package private(set) var events: [PeerEvent] = []
    package private(set) var counters = SyncCounters()
    package var keepsEvents: Bool
    package let logger: Logger

    package init(keepsEvents: Bool = true, logger: Logger = SyncStore.disabledLogger) {
        self.keepsEvents = keepsEvents
        self.logger = logger
    }

    package func report(_ event: SyncEvent, peer: UInt32?) {
        if keepsEvents { events.append(PeerEvent(peer: peer, event: event)) }
    }

    package func count(_ delta: SyncCounters) { counters.add(delta) }
    package var wantsProgress: Bool { keepsEvents }
}
