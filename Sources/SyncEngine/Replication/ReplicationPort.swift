import Logging
import SyncTransport

/// Everything a replication session needs of a store, and nothing more: the
/// stream of changes read after a peer's cursor, a plan applied in one
/// transaction, cursors and peer records, staged chunks of large values.
/// The store behind it knows nothing of sessions, events or counters.
///
/// `SQLiteReplicationPort` serves a `SyncStore`; `InMemoryReplicationPort`
/// keeps the same contract in dictionaries (for fast session tests). Both pass
/// one conformance suite (`ReplicationPortConformanceTests`).
package protocol ReplicationPort: AnyObject {
    /// This store's node id.
    var nodeID: UInt32 { get }
    var role: DeviceRole { get }
    var registry: KeyRegistry { get }
    /// The largest value accepted from a peer, in bytes.
    var maxValueSize: Int { get }
    /// This device's wall clock, in milliseconds.
    func nowMilliseconds() -> Int64
    /// The largest packed version accepted from a peer right now.
    func versionBound() -> Int64

    // MARK: reading the stream

    /// Changes for `peer` after `cursor` in sequence order, until `maxEntries`
    /// or `maxBytes`; stops before a second large value (whose value is not
    /// loaded). Never a change that came from `peer`. `scannedThrough` is the
    /// sequence the scan reached (past the rows `skip` passed over).
    func pendingRows(for peer: UInt32, after cursor: Int64, maxEntries: Int, maxBytes: Int,
                     skip: (String, Int64) -> Bool) throws -> (rows: [OutboundRow], scannedThrough: Int64)
    /// How many batches the pending changes make, as `pendingRows` would
    /// read them, and the position that reaches (`PendingBatchCount.swift`).
    func pendingBatches(for peer: UInt32, after cursor: Int64, maxEntries: Int, maxBytes: Int, dropsDeletes: Bool,
                        skip: (String, Int64) -> Bool) throws -> (batches: Int, through: Int64)
    /// Every change in the stream of the keys `names` declares, whatever the
    /// cursor (never one that came from `peer`).
    func rows(declaredBy names: Set<String>, for peer: UInt32, maxEntries: Int) throws -> [OutboundRow]
    /// How many changes wait for `peer` after its cursor (for progress events).
    func pendingCount(for peer: UInt32) throws -> Int
    /// Releases the manual lane (and deferred values) for sending, as `sync()`
    /// does, for a peer that asked; returns how many entries that released.
    func releaseManualChanges() throws -> Int
    /// The full value of a large entry, if the key is still at change `seq`.
    func largeValue(key: String, seq: Int64) throws -> [UInt8]?
    /// The version stored for `key`, if any.
    func localVersion(forKey key: String) throws -> HLCTimestamp?
    /// Whether the value held for `key` is of `size` bytes with the CRC-32 `checksum`.
    func holdsValue(forKey key: String, size: Int, checksum: UInt32) throws -> Bool

    // MARK: applying

    /// Reads the stored state of `entries`' keys, asks `plan` what to do with
    /// them, and executes that plan in one transaction: taken and merged
    /// entries stored (a taken one remembers `peer` and is never sent back to
    /// it), conflicts logged, the staged chunks of `completing` dropped.
    /// Durable before it returns when `durable` (else `syncCommitted()` must run before acknowledging).
    /// `receivedThrough`: in the same transaction, `peer`'s stream is
    /// received through that position, with that anchor (`receivedThrough(from:)`, never back).
    /// `passingOver`: when the stream ends at that position and `peer`'s
    /// cursor stands there as the transaction begins, and every change it
    /// adds to the stream was taken from `peer` (none is for it), the cursor
    /// moves past them in the same transaction (`ApplyOutcome.passedOverThrough`).
    func apply(_ entries: [WireEntry], from peer: UInt32, completing: ChunkedVersion?, durable: Bool,
               receivedThrough: (through: Int64, anchor: Int64)?, passingOver: Int64?,
               plan: (_ local: [String: EntryState]) -> ApplyPlan) throws -> ApplyOutcome
    /// How far this store has received and applied `peer`'s stream of
    /// changes without a gap (protocol 3 stream ranges), and the newest
    /// anchor of what it received there; zeros when unknown. Kept when the peer is forgotten.
    func receivedThrough(from peer: UInt32) throws -> (through: Int64, anchor: Int64)
    /// Records, in a transaction of its own, that `peer`'s stream is received
    /// through `through` with `anchor` (never back): for what the last
    /// batches of a session brought.
    func recordReceived(from peer: UInt32, through: Int64, anchor: Int64) throws
    /// The newest change sequence number this store has given out.
    func streamPosition() throws -> Int64
    /// The newest packed version this store's clock has given out or seen.
    func latestVersion() -> Int64
    /// The first change for `peer` after `cursor` and through `position`
    /// whose version is newer than `anchor` (packed): a change written after
    /// the peer saw the stream there, at a position given out again.
    func firstChangeNewer(than anchor: Int64, for peer: UInt32, after cursor: Int64, through position: Int64) throws -> Int64?
    /// Puts every commit so far on stable storage.
    func syncCommitted() throws

    // MARK: peers

    /// Records the peer of a new session and returns what is known of it; a
    /// new peer (or one under another pairing epoch) starts at cursor 0.
    func recordPeer(node: UInt32, role: DeviceRole, epoch: String) throws -> PeerRecord
    /// The pairing epoch the peer `node` was last recorded under, if this store keeps it.
    func pairingEpoch(ofPeer node: UInt32) throws -> String?
    /// Whether `recordPeer` would refuse `node` now (`.tooManyPeers`): not known, and the store full.
    func refusesNewPeer(_ node: UInt32) throws -> Bool
    /// Takes a new node id, unless this store's is no longer `node` (another
    /// process sharing the file took one: that one is kept); returns the node id now.
    func renewNodeID(replacing node: UInt32) throws -> UInt32
    /// On a phone: the watch of pairing `epoch` said through its mailbox that
    /// it takes a new node id when refused for its node id (`QueuedMessage.renewsNodeID`).
    func queuedPeerRenewsNodeID(in epoch: String) throws -> Bool
    /// Remembers (on stable storage) that the watch of pairing `epoch` takes a new node id when refused for it.
    func noteQueuedPeerRenewsNodeID(in epoch: String) throws
    /// The peer of `role` under pairing `epoch` this store saw last (its node
    /// and cursor), if any: whom queued delivery through a mailbox writes to.
    func queuedPeer(role: DeviceRole, epoch: String) throws -> PeerRecord?
    /// Every peer of `role` this store keeps under pairing `epoch`, by node id
    /// (more than one watch: one pairing given to several, each with its own mailbox).
    func queuedPeers(role: DeviceRole, epoch: String) throws -> [PeerRecord]
    /// The registries compared with `node` before this store forgot it (nil: none, or not forgotten).
    func forgottenRegistries(of node: UInt32) throws -> [UInt8]?
    /// Changes were applied outside any live session (queued delivery): every
    /// live session looks for what to send (the one with that peer too: a
    /// resolver's merge is new to it), and idle states computed before are stale.
    func noteAppliedOutsideSessions()
    /// `peer` durably applied every change up to `sequence`: its cursor moves there (never back).
    func acknowledge(peer: UInt32, through sequence: Int64) throws
    /// A session with `peer` is established (`live`) or has ended: a peer with
    /// a live session is being seen, and is never forgotten for being unseen.
    func noteSession(with peer: UInt32, live: Bool)
    /// Remembers the keys `peer` declares differently.
    func setMismatchedKeys(_ names: Set<String>, for peer: UInt32) throws
    /// Remembers the registries a live session with `peer` compared: this
    /// device's fingerprint, then the peer's (`PeerRecord.registries`).
    func recordRegistries(_ registries: [UInt8], for peer: UInt32) throws

    // MARK: tombstones (SyncStore+Tombstones)

    /// For a peer starting at `cursor` 0 after tombstones were purged: the
    /// purged-through version to send it in a re-baseline notice before the
    /// baseline (nil: no notice). `queuedIn`: posted through that pairing's
    /// mailbox, whose baseline then owes a caught-up marker.
    func rebaselineNotice(for peer: UInt32, cursor: Int64, queuedIn pairingEpoch: String?) throws -> Int64?
    /// The newest tombstone version (packed) this store purged, 0 when none (`SyncStore.purgedThrough()`).
    func purgedThrough() throws -> Int64
    /// A watch just met through the mailbox takes the generation of what was
    /// posted before its node was known (`MailboxReplicator.unknownPeer`), when newer than its own.
    func adoptRebaselineGeneration(for peer: UInt32) throws
    /// A queued notice went through the mailbox of `pairingEpoch` and its caught-up marker was not posted yet.
    func owesQueuedCaughtUp(in pairingEpoch: String) throws -> Bool
    /// The caught-up marker owed for the mailbox of `pairingEpoch` is posted.
    func settleQueuedCaughtUp(in pairingEpoch: String) throws
    /// On a phone: `peer` has not acknowledged a live caught-up notice since its last live re-baseline notice.
    func owesLiveCaughtUp(to peer: UInt32) throws -> Bool
    /// On a phone: `peer` acknowledged a live caught-up notice.
    func settleLiveCaughtUp(for peer: UInt32) throws
    /// On a phone: the caught-up marker owed to `peer` goes through the mailbox of `pairingEpoch` (announced there).
    func queueLiveCaughtUp(for peer: UInt32, in pairingEpoch: String) throws
    /// The phone announced a caught-up marker at the end of its next queued
    /// baseline: marks wait for it (durable before it returns).
    func expectQueuedCaughtUp() throws
    /// Acts on a re-baseline notice from `peer`: removes, without sending, the
    /// entries up to `purgedThrough` that `peer` already had, or marks them to
    /// go once its baseline came (`removal`). Returns how many.
    func applyRebaseline(purgedThrough: Int64, from peer: UInt32, mismatched: Set<String>, acknowledgedBefore: Int64?,
                         generation: Int64?, removal: SyncStore.RebaselineRemoval) throws -> Int
    /// On a watch: the generation of the last live re-baseline notice from
    /// `peer` that named one (protocol 4), or nil: queued batches it posted
    /// in an older generation are passed over.
    func liveRebaselineGeneration(from peer: UInt32) throws -> Int64?
    /// The peer's baseline came (`after`): removes the entries a re-baseline
    /// notice marked that it did not send again. Returns how many.
    func sweepRebaselineMarks(after sweep: SyncStore.RebaselineSweep) throws -> Int
    /// The version a re-baseline notice marked `key` at, while its row holds it (nil: not marked).
    func rebaselineMark(forKey key: String) throws -> HLCTimestamp?
    /// The generation of the last re-baseline notice this end sent `peer`
    /// (0 before any): queued batches for it name their stream positions in it.
    func rebaselineGeneration(for peer: UInt32) throws -> Int64
    /// How many live re-baseline notices this store acted on in this process
    /// (a queued batch read before one is not applied after it).
    var liveRebaselineCount: Int { get }
    /// A mailbox this store posts queued batches through: a live re-baseline
    /// notice takes back the batches it supersedes there before it goes.
    func registerQueuedSpool(_ mailbox: Mailbox)
    /// Runs `body` (a queued round's posting) while no live notice takes batches back.
    func whileQueuedPosting(_ body: () throws -> Void) throws

    // MARK: large values

    /// Stages one chunk (replacing those staged for another value of its version).
    func stageChunk(_ chunk: SyncMessage.Chunk) throws -> StagedChunks
    /// The staged chunks of one transfer, joined.
    func assembleChunks(key: String, version: HLCTimestamp) throws -> [UInt8]
    /// Drops staged chunks of `key` at or before `version`.
    func discardStagedChunks(key: String, through version: HLCTimestamp) throws
    /// Drops staged chunks of `key` before `version` (those of `version` may carry another value of it).
    func discardStagedChunks(key: String, before version: HLCTimestamp) throws
    /// Transfers staged and not complete (for the hello).
    func partialTransfers() throws -> [PartialTransfer]
    /// Housekeeping put off for room (a full disk), tried again at most every
    /// few seconds; and changes held for a value that could not be read, sent once it reads.
    func retryDeferredWork()
    /// Whether such housekeeping waits: changes may join the stream once it runs.
    var defersWork: Bool { get }
}

extension ReplicationPort {
    /// `pairingEpoch(ofPeer:)`, live and through the mailbox alike, but a
    /// damaged row of `node` (one this engine never writes: `.databaseCorrupt`)
    /// gives nil, its damage logged and reported to `reporter` as concerning
    /// `peer`. Such a row tells of no node of another pairing (it is no
    /// `node-id-conflict`): the peer is recorded again under this pairing.
    func pairingEpoch(ofPeer node: UInt32, reportingDamageTo reporter: any ReplicationReporter, as peer: UInt32?) throws -> String? {
        do {
            return try pairingEpoch(ofPeer: node)
        } catch let error as SyncError where error.code == .databaseCorrupt {
            reporter.logger.error("a damaged sync_peers row was taken for a peer not known yet", metadata: ["error": "\(error)"])
            reporter.report(.error(error), peer: peer)
            return nil
        }
    }

    /// `apply` without passing over the changes it adds for `peer`'s cursor.
    func apply(_ entries: [WireEntry], from peer: UInt32, completing: ChunkedVersion?, durable: Bool,
               receivedThrough: (through: Int64, anchor: Int64)?,
               plan: (_ local: [String: EntryState]) -> ApplyPlan) throws -> ApplyOutcome {
        try apply(entries, from: peer, completing: completing, durable: durable, receivedThrough: receivedThrough,
                  passingOver: nil, plan: plan)
    }
}

/// A large value's transfer: a key at a version.
package struct ChunkedVersion: Sendable, Hashable {
    package var key: String
    package var version: HLCTimestamp

    package init(key: String, version: HLCTimestamp) {
        self.key = key
        self.version = version
    }
}

/// Where a session's events, counters and log lines go: the driver's
/// business (SyncPeer, the simulator, a test), never the store port's.
package protocol ReplicationReporter: AnyObject {
    /// Publishes `event` as concerning `peer`.
    func report(_ event: SyncEvent, peer: UInt32?)
    /// Adds `delta` to the counters.
    func count(_ delta: SyncCounters)
    /// Whether anyone listens for progress (counting the batches of a session costs a read of every pending row).
    var wantsProgress: Bool { get }
    var logger: Logger { get }
}

/// Reports to a store's public `events()`, `peerEvents()` and `syncCounters`,
/// the way apps observe replication.
package final class StoreReporter: ReplicationReporter {
    private let store: SyncStore
    private let beforeConnected: ((UInt32) -> Void)?

    /// `beforeConnected`: called with the peer's node before a `.connected` event is published.
    package init(_ store: SyncStore, beforeConnected: ((UInt32) -> Void)? = nil) {
        self.store = store
        self.beforeConnected = beforeConnected
    }

    package func report(_ event: SyncEvent, peer: UInt32?) {
        if case .connected(let node, _) = event { beforeConnected?(node) }
        store.emit(event, peer: peer)
    }
    package func count(_ delta: SyncCounters) { store.counters.withLock { $0.add(delta) } }
    package var wantsProgress: Bool { store.eventHub.hasSubscribers || store.peerEventHub.hasSubscribers }
    package var logger: Logger { store.logger }
}

extension SyncCounters {
    /// Adds every counter of `delta`.
    mutating func add(_ delta: SyncCounters) {
        entriesSent += delta.entriesSent
        entriesReceived += delta.entriesReceived
        entriesIgnored += delta.entriesIgnored
        entriesRejected += delta.entriesRejected
        bytesSent += delta.bytesSent
        bytesReceived += delta.bytesReceived
        batchesSent += delta.batchesSent
        batchesReceived += delta.batchesReceived
        chunksSent += delta.chunksSent
        chunksReceived += delta.chunksReceived
        conflicts += delta.conflicts
        deferred += delta.deferred
        sessions += delta.sessions
        versionsRefused += delta.versionsRefused
    }
}

/// A `SyncStore` behind the port: SQLite, values in the file or in value
/// files (`FileValueStore`), encryption at rest.
package final class SQLiteReplicationPort: ReplicationPort {
    package let store: SyncStore

    /// Runs after each read of the stream (tests: a commit landing right after a read).
    package var afterStreamRead: (() throws -> Void)?

    package init(_ store: SyncStore) { self.store = store }

    package var nodeID: UInt32 { store.nodeID }
    package var role: DeviceRole { store.role }
    package var registry: KeyRegistry { store.registry }
    package var maxValueSize: Int { store.options.maxValueSize }
    package func nowMilliseconds() -> Int64 { store.physicalClock.nowMilliseconds() }
    package func versionBound() -> Int64 { store.versionBound() }

    package func pendingRows(for peer: UInt32, after cursor: Int64, maxEntries: Int, maxBytes: Int,
                             skip: (String, Int64) -> Bool) throws -> (rows: [OutboundRow], scannedThrough: Int64) {
        let read = try store.pendingRows(for: peer, after: cursor, maxEntries: maxEntries, maxBytes: maxBytes, skip: skip)
        try afterStreamRead?()
        return read
    }

    package func pendingBatches(for peer: UInt32, after cursor: Int64, maxEntries: Int, maxBytes: Int, dropsDeletes: Bool,
                                skip: (String, Int64) -> Bool) throws -> (batches: Int, through: Int64) {
        try store.pendingBatchCount(for: peer, after: cursor, maxEntries: maxEntries, maxBytes: maxBytes, dropsDeletes: dropsDeletes, skip: skip)
    }

    package func rows(declaredBy names: Set<String>, for peer: UInt32, maxEntries: Int) throws -> [OutboundRow] {
        try store.rows(declaredBy: names, for: peer, maxEntries: maxEntries)
    }

    package func pendingCount(for peer: UInt32) throws -> Int {
        let pending = try store.pendingSummary(for: peer)
        return pending.automatic + pending.manualReleased
    }

    package func releaseManualChanges() throws -> Int { try store.requestManualSync() }

    package func largeValue(key: String, seq: Int64) throws -> [UInt8]? { try store.largeValue(key: key, seq: seq) }
    package func localVersion(forKey key: String) throws -> HLCTimestamp? { try store.storedVersion(forKey: key) }

    package func holdsValue(forKey key: String, size: Int, checksum: UInt32) throws -> Bool {
        guard let bytes = try store.rawValue(forKey: key) else { return false }
        return bytes.count == size && Checksum.crc32(bytes) == checksum
    }

    package func apply(_ entries: [WireEntry], from peer: UInt32, completing: ChunkedVersion?, durable: Bool,
                       receivedThrough: (through: Int64, anchor: Int64)?, passingOver: Int64?,
                       plan: ([String: EntryState]) -> ApplyPlan) throws -> ApplyOutcome {
        try store.execute(entries, from: peer, completing: completing, durable: durable, receivedThrough: receivedThrough,
                          passingOver: passingOver, plan: plan)
    }

    package func receivedThrough(from peer: UInt32) throws -> (through: Int64, anchor: Int64) { try store.receivedThrough(from: peer) }
    package func recordReceived(from peer: UInt32, through: Int64, anchor: Int64) throws {
        try store.recordReceived(from: peer, through: through, anchor: anchor)
    }
    package func streamPosition() throws -> Int64 { store.nextSeq.withLock { $0 } - 1 }
    package func latestVersion() -> Int64 { store.clock.latest }
    package func firstChangeNewer(than anchor: Int64, for peer: UInt32, after cursor: Int64, through position: Int64) throws -> Int64? {
        try store.firstChangeNewer(than: anchor, for: peer, after: cursor, through: position)
    }

    package func syncCommitted() throws { try store.syncCommitted() }
    package func retryDeferredWork() {
        store.assignDeferredLanes()
        store.retryHeldChanges()
    }
    package var defersWork: Bool { store.lanePassWaits }

    package func recordPeer(node: UInt32, role: DeviceRole, epoch: String) throws -> PeerRecord {
        try store.recordPeer(node: node, role: role, epoch: epoch)
    }

    package func queuedPeer(role: DeviceRole, epoch: String) throws -> PeerRecord? {
        try store.queuedPeer(role: role, epoch: epoch)
    }

    package func queuedPeers(role: DeviceRole, epoch: String) throws -> [PeerRecord] {
        try store.queuedPeers(role: role, epoch: epoch)
    }

    package func pairingEpoch(ofPeer node: UInt32) throws -> String? { try store.pairingEpoch(ofPeer: node) }
    package func refusesNewPeer(_ node: UInt32) throws -> Bool { try store.refusesNewPeer(node) }
    package func renewNodeID(replacing node: UInt32) throws -> UInt32 { try store.renewNodeID(replacing: node) }
    package func queuedPeerRenewsNodeID(in epoch: String) throws -> Bool { try store.queuedPeerRenewsNodeID(in: epoch) }
    package func noteQueuedPeerRenewsNodeID(in epoch: String) throws { try store.noteQueuedPeerRenewsNodeID(in: epoch) }

    package func forgottenRegistries(of node: UInt32) throws -> [UInt8]? { try store.forgottenRegistries(of: node) }
    package func noteAppliedOutsideSessions() { store.noteAppliedOutsideSessions() }

    package func acknowledge(peer: UInt32, through sequence: Int64) throws { try store.acknowledge(peer: peer, through: sequence) }
    package func noteSession(with peer: UInt32, live: Bool) { store.noteSession(with: peer, live: live) }
    package func setMismatchedKeys(_ names: Set<String>, for peer: UInt32) throws { try store.setMismatchedKeys(names, for: peer) }
    package func recordRegistries(_ registries: [UInt8], for peer: UInt32) throws { try store.recordRegistries(registries, for: peer) }

    package func rebaselineNotice(for peer: UInt32, cursor: Int64, queuedIn pairingEpoch: String?) throws -> Int64? {
        let purged = try store.rebaselineNotice(for: peer, cursor: cursor, queuedIn: pairingEpoch)
        // A live notice: the queued batches it supersedes are taken back before it goes. A mailbox
        // that cannot be read does not hold the live session up (its own rounds report it).
        if purged != nil, pairingEpoch == nil {
            do {
                try store.queuedSpools.withdrawSuperseded(for: peer, of: store)
            } catch {
                store.emit(.error(SyncError(.mailboxIO, "queued batches a live re-baseline superseded could not be taken back: \(error)")), peer: peer)
            }
        }
        return purged
    }

    package func adoptRebaselineGeneration(for peer: UInt32) throws { try store.adoptRebaselineGeneration(for: peer) }

    package func purgedThrough() throws -> Int64 { try store.purgedThrough() }

    package func owesQueuedCaughtUp(in pairingEpoch: String) throws -> Bool { try store.owesQueuedCaughtUp(in: pairingEpoch) }

    package func settleQueuedCaughtUp(in pairingEpoch: String) throws { try store.settleQueuedCaughtUp(in: pairingEpoch) }
    package func owesLiveCaughtUp(to peer: UInt32) throws -> Bool { try store.owesLiveCaughtUp(to: peer) }
    package func settleLiveCaughtUp(for peer: UInt32) throws { try store.settleLiveCaughtUp(for: peer) }
    package func queueLiveCaughtUp(for peer: UInt32, in pairingEpoch: String) throws { try store.queueLiveCaughtUp(for: peer, in: pairingEpoch) }

    package func expectQueuedCaughtUp() throws { try store.expectQueuedCaughtUp() }

    package func applyRebaseline(purgedThrough: Int64, from peer: UInt32, mismatched: Set<String>, acknowledgedBefore: Int64?,
                                 generation: Int64?, removal: SyncStore.RebaselineRemoval) throws -> Int {
        try store.applyRebaseline(purgedThrough: purgedThrough, from: peer, mismatched: mismatched, acknowledgedBefore: acknowledgedBefore,
                                  generation: generation, removal: removal)
    }

    package func liveRebaselineGeneration(from peer: UInt32) throws -> Int64? { try store.liveRebaselineGeneration(from: peer) }

    package func sweepRebaselineMarks(after sweep: SyncStore.RebaselineSweep) throws -> Int { try store.sweepRebaselineMarks(after: sweep) }

    package func rebaselineGeneration(for peer: UInt32) throws -> Int64 { try store.rebaselineGeneration(for: peer) }
    package var liveRebaselineCount: Int { store.liveRebaselines.load(ordering: .sequentiallyConsistent) }
    package func registerQueuedSpool(_ mailbox: Mailbox) { store.queuedSpools.register(mailbox) }
    package func whileQueuedPosting(_ body: () throws -> Void) throws { try store.queuedSpools.whilePosting(body) }

    package func rebaselineMark(forKey key: String) throws -> HLCTimestamp? { try store.rebaselineMark(forKey: key) }

    package func stageChunk(_ chunk: SyncMessage.Chunk) throws -> StagedChunks {
        try store.stageChunk(chunk, encrypted: isEncrypted(chunk.entry.key))
    }

    package func assembleChunks(key: String, version: HLCTimestamp) throws -> [UInt8] {
        try store.assembleChunks(key: key, version: version, encrypted: isEncrypted(key))
    }

    package func discardStagedChunks(key: String, through version: HLCTimestamp) throws {
        try store.discardStagedChunks(key: key, through: version)
    }

    package func discardStagedChunks(key: String, before version: HLCTimestamp) throws {
        try store.discardStagedChunks(key: key, before: version)
    }

    package func partialTransfers() throws -> [PartialTransfer] { try store.partialTransfers() }

    private func isEncrypted(_ key: String) -> Bool { store.registry.descriptor(forEntry: key)?.security == .encrypted }
}

/// What staging a chunk left: how many chunks from index 0 are staged without
/// a gap, and whether chunks staged for another value of its version (another
/// total size or CRC-32: a resolver's merge) were dropped for it.
package struct StagedChunks: Sendable, Equatable {
    package var contiguous: Int
    package var replacedAnotherValue: Bool

    package init(contiguous: Int, replacedAnotherValue: Bool = false) {
        self.contiguous = contiguous
        self.replacedAnotherValue = replacedAnotherValue
    }
}
