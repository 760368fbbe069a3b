import Crypto
import Foundation
import Logging
import Synchronization

/// A typed key-value store on one device: a SQLite file in WAL mode, a cache,
/// observation, encryption at rest, and the replication metadata (versions,
/// change sequence, checkpoints) written in the same transaction as the data.
///
/// ```swift
/// let store = try SyncStore(path: "phone.sqlite", role: .phone, registry: try KeyRegistry([steps]))
/// try await store.set(1_234, for: steps)
/// let now = try await store.get(steps)
/// ```
public final class SyncStore: KeyValueBackend {
    public let role: DeviceRole
    public let registry: KeyRegistry
    /// This store's node id, made once and kept in the file (a watch whose
    /// phone finds it taken by another watch takes a new one: `renewNodeID()`).
    public var nodeID: UInt32 { clock.node }
    public let path: String

    let database: Database
    let clock: HybridLogicalClock
    let physicalClock: any PhysicalClock
    @usableFromInline let cache: StoreCache
    let cipher: AtRestCipher?
    /// Where values live when the store keeps them in files (`FileValueStore`).
    /// Where the values' bytes live: the rows, or a file per value (`FileValueStore`).
    let valueStorage: any ValueStorage
    let shared = Mutex(SharedFileState())
    let options: StoreOptions
    let logger: Logger
    /// The default logger: a no-op (the library logs only to a logger it is given).
    static let disabledLogger = Logger(label: "SyncEngine", factory: { _ in SwiftLogNoOpLogHandler() })
    let changeHub = Broadcaster<StoreChange>()
    let eventHub = Broadcaster<SyncEvent>()
    let peerEventHub = Broadcaster<PeerEvent>()
    /// Commits that may have something to send, by the peer they came from
    /// (`thisDevice` for this device's own writes): sessions with other peers wake.
    let localWrites = Broadcaster<UInt32>()
    /// Each wait the engine's timers schedule for this store (tests follow them).
    let timedWaits = Broadcaster<TimedWait>()
    /// Each node id this store takes in this process (`renewNodeID()`): sessions
    /// whose hello named the one before end, and start again under it.
    let nodeRenewals = Broadcaster<UInt32>()
    /// Publishes nothing: it ends when the store closes (`whenClosed`).
    private let closing = Broadcaster<Void>()
    /// The origin of a local commit in `localWrites` (no peer has node 0).
    static let thisDevice: UInt32 = 0
    let counters = Mutex(SyncCounters())
    /// The mailboxes queued batches are posted through in this process (`QueuedSpools`).
    let queuedSpools = QueuedSpools()
    /// Live re-baseline notices acted on in this process; changed only inside their write transaction.
    let liveRebaselines = Atomic<Int>(0)
    let hooks = Mutex(CommitHooks())
    /// The next change sequence number; only touched inside write transactions.
    let nextSeq: Mutex<Int64>
    /// Set by `close()`; read inline by the cached typed read (`value(for:)`).
    @usableFromInline let closed = Atomic<Bool>(false)
    /// Bumped by every local commit, manual-sync request and change applied
    /// from the mailbox, so a replication loop can tell whether its idea of "idle" is current.
    let localGeneration = Atomic<Int>(0)
    /// Chunks of large batches saved while their body still ran (`BulkWritePipeline`), for tests.
    let bulkChunksSaved = Atomic<Int>(0)
    /// When the last two local commits were made and the latest one's write began (burst coalescing tells a burst by them).
    private let commitInstants = Mutex(LocalCommitInstants())
    /// When tombstones were last purged (physical milliseconds), to purge after
    /// acknowledgements at most once a minute.
    let purgeState = Mutex<Int64>(0)
    /// When the lane pass a full disk put off at open was last tried (physical
    /// milliseconds), and `commitsSeen` then; nil when none waits (`assignDeferredLanes`).
    let deferredLanes = Mutex<(triedAt: Int64, commits: Int)?>(nil)
    /// Whether changes held for a value that could not be read may be noted
    /// (`SyncStore+HeldChanges`): true at open, until a retry finds none to
    /// try; and how many times notes were written (a retry that read none
    /// before a new one clears nothing).
    let heldRetry = Mutex<(due: Bool, notes: Int)>((due: true, notes: 0))
    /// Peers (node ids) with an established session right now, with how many
    /// sessions each: they are being seen, and are never forgotten.
    let livePeers = Mutex<[UInt32: Int]>([:])
    /// Where the `async` API commits and reads (`performBlocking`): off the cooperative pool, one at a time.
    let blockingWork = DispatchQueue(label: "SyncEngine.SyncStore.blocking")

    /// Opens (creating if needed) the store at `path` for `role`.
    ///
    /// Throws `.notADatabase` for a file that is not a store (not SQLite, or
    /// another program's SQLite file), `.databaseCorrupt` for a damaged one
    /// (both left untouched), and `.encryptionKeyMissing` /
    /// `.encryptionKeyWrong` / `.keyFile` / `.masterKeyUnavailable` for key
    /// problems (nothing destroyed, and a new master key is only ever made for
    /// a store that has no encrypted values yet).
    public init(path: String, role: DeviceRole, registry: KeyRegistry, options: StoreOptions = StoreOptions()) throws {
        self.path = path
        self.role = role
        self.registry = registry
        self.options = options
        self.logger = options.logger
        self.physicalClock = options.clock
        let database = try Database(path: path, options: options)
        self.database = database
        self.cache = StoreCache(maxCachedValueSize: options.maxCachedValueSize, legacyDependents: registry.keysByLegacyName)

        let requestedDirectory = options.valueDirectory.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        let setup = try database.write { conn -> (node: UInt32, salt: [UInt8], verifier: String?, storedRole: String?, floor: Int64, seq: Int64,
                                                  valueDirectory: String?, wroteAhead: Bool) in
            var meta = try SyncStore.readMeta(conn)
            // A damaged node id (not a number, 0 or the mailbox's unknown peer: no node's) is replaced as a lost one.
            let reserved: Set<UInt32> = [0, MailboxReplicator.unknownPeer]
            if UInt32(meta["node_id"] ?? "").map(reserved.contains) ?? true {
                var node: UInt32 = options.nodeID ?? 0
                while reserved.contains(node) { node = UInt32.random(in: 1...UInt32.max) }
                try SyncStore.writeMeta(conn, "node_id", String(node))
                // A store that lost only its node id keeps its role and its salt (its encrypted values are sealed under it).
                if meta["role"] == nil { try SyncStore.writeMeta(conn, "role", role.rawValue) }
                if meta["salt"] == nil {
                    try SyncStore.writeMeta(conn, "salt", Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString())
                }
                meta = try SyncStore.readMeta(conn)
            }
            // A commit log row numbered past what any log reaches (a damaged file) made SQLite number the
            // next rows at random, below where other processes look: they missed those commits.
            try conn.execute("DELETE FROM sync_commit_log WHERE id > \(SyncStore.maxLogID)")
            let floorStmt = try conn.statement(SyncStore.sequenceFloorSQL)
            floorStmt.bind(1, SyncStore.versionBound(now: options.clock.nowMilliseconds(), ahead: options.maxRemoteClockAhead))
            floorStmt.bind(2, Int64(UInt32(meta["node_id"] ?? "") ?? 0))
            _ = try floorStmt.step()
            let floor = floorStmt.int64(0)
            var seq = floorStmt.int64(1)
            let wroteAhead = floorStmt.int64(2) != 0
            try floorStmt.run()
            let lowestCursor = try conn.integer("SELECT coalesce(min(acked_through), 0) FROM sync_peers")
            if seq > SyncStore.maxSequence || lowestCursor < 0 {
                seq = try SyncStore.repairSequences(conn)
            }
            let salt = [UInt8](Data(base64Encoded: meta["salt"] ?? "") ?? Data())
            var valueDirectory = meta["value_directory"]
            if let requestedDirectory {
                if let valueDirectory, valueDirectory != requestedDirectory {
                    throw SyncError(.invalidConfiguration, "the store at \(path) keeps its values in \(valueDirectory), not \(requestedDirectory); open it with that value directory")
                }
                if valueDirectory == nil {
                    // Values already inline stay inline and readable; new writes go to files.
                    try SyncStore.writeMeta(conn, "value_directory", requestedDirectory)
                    valueDirectory = requestedDirectory
                }
            }
            return (UInt32(meta["node_id"] ?? "") ?? 0, salt, meta["at_rest_verifier"], meta["role"], floor, seq, valueDirectory, wroteAhead)
        }
        if let storedRole = setup.storedRole, storedRole != role.rawValue {
            throw SyncError(.invalidConfiguration, "the store at \(path) belongs to a \(storedRole), not a \(role); open it with role \(storedRole) or use another file")
        }
        valueStorage = try setup.valueDirectory.map { [database] in
            try ValueFiles(directory: $0, syncCommits: { try database.syncCommittedBeforeFileChanges() })
        } ?? RowValueStorage()
        nextSeq = Mutex(setup.seq + 1)
        let clockSetRight = ClockSetRight()
        clock = HybridLogicalClock(node: setup.node, physical: options.clock, floor: setup.floor, maxAhead: options.maxRemoteClockAhead,
                                   dropped: SyncStore.clockDropped(options.logger, then: clockSetRight))

        // A master key is needed only for encrypted keys this device can hold: a shared registry
        // may declare an encrypted phoneOnly key that a watch never sees.
        let needsKey = registry.descriptors.contains { $0.security == .encrypted && $0.availability.isHeld(on: role) }
        if let source = options.encryption {
            // The key is derived over the salt: without it no key opens the values sealed so far.
            if setup.verifier != nil && setup.salt.count != 16 {
                throw SyncError(.databaseCorrupt, "the store at \(path) is damaged: its salt is missing or unreadable, so no master key can decrypt its encrypted values; nothing was changed — restore a backup of the file")
            }
            // A store that has a verifier, or sealed values, holds values sealed with its key: never make a new one for it.
            let sealedSamples = setup.verifier == nil ? try SyncStore.sealedSamples(database, valueStorage) : []
            let cipher = try AtRestCipher(source: source, salt: setup.salt, mayCreateKeyFile: setup.verifier == nil && sealedSamples.isEmpty)
            if setup.verifier == nil, !sealedSamples.isEmpty,
               !sealedSamples.contains(where: { (try? cipher.open($0.sealed, keyName: $0.key)) != nil }) {
                throw SyncError(.encryptionKeyWrong, "the master key opens none of the encrypted values of the store at \(path) (its key check record is missing); nothing was changed — supply the original key (key file, provider or passphrase)")
            }
            if let verifier = setup.verifier {
                guard let sealed = Data(base64Encoded: verifier),
                      (try? cipher.open([UInt8](sealed), keyName: "")) == AtRestCipher.verifierPlaintext else {
                    throw SyncError(.encryptionKeyWrong, "the master key does not match the one this store was created with; nothing was changed — supply the original key (key file, provider or passphrase)")
                }
            } else {
                let sealed = try cipher.seal(AtRestCipher.verifierPlaintext, keyName: "")
                try database.write { conn in try SyncStore.writeMeta(conn, "at_rest_verifier", Data(sealed).base64EncodedString()) }
            }
            self.cipher = cipher
        } else {
            if needsKey {
                throw SyncError(.encryptionKeyMissing, "the registry declares encrypted keys but no master key was given; pass StoreOptions(encryption: .keyFile(path:)), .provider(_:) or .passphrase")
            }
            self.cipher = nil
        }
        if !valueStorage.keepsValuesInRows {
            try database.write { conn in try valueStorage.recover(in: conn) }
            try valueStorage.recovered()
        }
        if options.renewsNodeIDWhenRestored { try checkDeviceMarker() }
        try assignLanesAfterMigration()
        try startSharedFileTracking()
        do {
            // After the tracking starts: its commit is observed as any other (value files, other processes).
            try normalizeKeyNamesAfterMigration()
        } catch let error as SyncError where error.code == .storageFull {
            logger.warning("moving key names to NFC at open waits for room", metadata: ["error": "\(error)"])
        }
        do {
            // After the names are NFC, with the tracking started (a value file rewritten is renamed at the commit).
            try sealPlaintextOfEncryptedKeys()
        } catch let error as SyncError where error.code == .storageFull {
            logger.warning("sealing the values of keys now declared encrypted waits for room", metadata: ["error": "\(error)"])
        }
        do {
            // With the key names in NFC: what an app update now syncs goes.
            try assignLanesForCurrentDeclarations()
        } catch let error as SyncError where error.code == .storageFull {
            let commits = commitsSeen
            deferredLanes.withLock { $0 = (triedAt: 0, commits: commits) }
            logger.warning("moving the entries of keys the registry now syncs to their lanes waits for room", metadata: ["error": "\(error)"])
        }
        do {
            // After the lanes: a delete an update made sync waits in its lane, not purged as a local one.
            try purgeTombstones()
        } catch let error as SyncError where error.code == .storageFull {
            // Housekeeping: a full device still opens its store and reads it (the purge runs again later).
            logger.warning("purging tombstones at open waits for room", metadata: ["error": "\(error)"])
        }
        // Writes made while the wall clock ran far ahead go out again once it is right: at open, and
        // whenever the clock stops following a far-future time it issued (on the store's queue).
        if setup.wroteAhead { reissueWritesFromAClockAheadLogged() }
        // Changes held for a value that could not be read go once it reads (a file put back while the store was
        // closed; a store opened with its key again sends its sealed values).
        retryHeldChanges()
        clockSetRight.target.withLock {
            $0 = { [weak self] in
                guard let store = self else { return }
                store.blockingWork.async { [weak store] in store?.reissueWritesFromAClockAheadLogged() }
            }
        }
    }

    /// Stops observers and closes the file's connections; further use throws `.closed`.
    /// Waits for reads and writes running on other threads; called from a commit
    /// hook, the file closes as that write returns. Once closed, with no other
    /// connection to the file open (in this process or another), the `.sqlite`
    /// file alone holds every commit: SQLite copies the WAL into it and removes it.
    /// End the store's sessions first (cancel the tasks running its `SyncPeer` and
    /// await them): a session records how far it received its peer's changes as it ends.
    public func close() {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        changeHub.finishAll()
        eventHub.finishAll()
        peerEventHub.finishAll()
        localWrites.finishAll()
        timedWaits.finishAll()
        nodeRenewals.finishAll()
        closing.finishAll()
        database.close()
    }

    /// A store dropped without `close()` closes as it goes: every stream of
    /// its changes and events ends, instead of waiting for ever.
    deinit { close() }

    var isClosed: Bool { closed.load(ordering: .relaxed) }

    /// Calls `handler` once when the store closes (at once if it is closed),
    /// unless the observation is cancelled or released first.
    func whenClosed(_ handler: @escaping @Sendable () -> Void) -> ChangeObservation {
        closing.observe(where: { _ in false }, finished: handler) { _ in }
    }

    /// When the last two local commits were made, and when the latest one's write began.
    struct LocalCommitInstants: Sendable {
        var previous: ContinuousClock.Instant?
        var latest: ContinuousClock.Instant?
        var latestStarted: ContinuousClock.Instant?
    }

    /// The store's latest `LocalCommitInstants`.
    var localCommitInstants: LocalCommitInstants { commitInstants.withLock { $0 } }

    /// Records a local commit's time and when its write began, for burst coalescing.
    func noteLocalCommit(startedAt: ContinuousClock.Instant) {
        let now = ContinuousClock.now
        commitInstants.withLock { $0 = LocalCommitInstants(previous: $0.latest, latest: now, latestStarted: startedAt) }
    }

    /// Puts every commit so far on stable storage, before acknowledging what
    /// the peer sent (`applyRemote` does it itself; a chunk of a value this
    /// store already has needs it too).
    func syncCommitted() throws {
        try database.syncCommitted()
    }

    /// The fsyncs of the WAL run so far to put acknowledged commits on stable
    /// storage (callers that share one count once).
    @_spi(Testing)
    public var walSyncCount: Int { database.walSyncsPerformed }

    /// The reads run to open the WAL on the connection that syncs it: one
    /// for the store's lifetime, not one per sync.
    @_spi(Testing)
    public var walOpeningReadCount: Int { database.walOpeningReads }

    /// `syncCommitted()` without blocking the caller or the writer (group
    /// commit: concurrent callers share one fsync).
    func syncCommittedAsync() async throws {
        try await database.syncCommittedAsync()
    }

    /// Returns once every background checkpoint scheduled so far has copied
    /// the WAL into the file (tests wait for it instead of polling).
    @_spi(Testing)
    public func waitForBackgroundCheckpoints() { database.drainCheckpoints() }

    /// Takes the idle WAL trim's look now, as its timer would (tests and
    /// `syncsim bench store`): true when it cut a grown WAL file back.
    @_spi(Testing)
    public func trimWALIfIdleNow() -> Bool { database.trimWALIfIdleNow() }

    func checkOpen() throws(SyncError) {
        if isClosed { throw SyncError.storeClosed(path) }
    }

    // MARK: metadata

    static func readMeta(_ conn: SQLiteConnection) throws -> [String: String] {
        let stmt = try conn.statement("SELECT name, value FROM sync_meta")
        var result: [String: String] = [:]
        while try stmt.step() { result[stmt.string(0)] = stmt.string(1) }
        return result
    }

    static func writeMeta(_ conn: SQLiteConnection, _ name: String, _ value: String) throws {
        let stmt = try conn.statement("INSERT INTO sync_meta(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value")
        stmt.bind(1, name)
        stmt.bind(2, value)
        try stmt.run()
    }

    static func deleteMeta(_ conn: SQLiteConnection, _ name: String) throws {
        let stmt = try conn.statement("DELETE FROM sync_meta WHERE name = ?1")
        stmt.bind(1, name)
        try stmt.run()
    }

    func meta(_ name: String) throws -> String? {
        try database.read { conn in
            let stmt = try conn.statement("SELECT value FROM sync_meta WHERE name = ?")
            stmt.bind(1, name)
            defer { stmt.reset() }
            return try stmt.step() ? stmt.string(0) : nil
        }
    }

    func setMeta(_ name: String, _ value: String) throws {
        try database.write { conn in try SyncStore.writeMeta(conn, name, value) }
    }

    // MARK: observation

    /// Changes matching `filter`, local and remote, after they commit. The
    /// stream keeps the newest 10,000 changes its consumer has not read; the
    /// first one read after it dropped older ones says how many (`missedBefore`).
    public func changes(matching filter: ChangeFilter) -> AsyncStream<StoreChange> {
        changeHub.subscribe(where: { filter.matches($0.key) }, marking: StoreChange.marking)
    }

    public func observeChanges(matching filter: ChangeFilter, _ handler: @escaping @Sendable (StoreChange) -> Void) -> ChangeObservation {
        changeHub.observe(where: { filter.matches($0.key) }, handler)
    }

    /// Sync status events: connected, batches, conflicts, deferred values, errors.
    /// The stream keeps the newest 10,000 events its consumer has not read; when
    /// it dropped older ones, `.eventsMissed(count:)` comes first, saying how many.
    public func events() -> AsyncStream<SyncEvent> {
        eventHub.subscribe(marking: { [.eventsMissed(count: $1), $0] })
    }

    /// The same events, each with the peer it concerns (nil for events about
    /// this store alone): what a phone serving several watches logs. Bounded
    /// as `events()`; `.eventsMissed(count:)` comes with a nil peer.
    public func peerEvents() -> AsyncStream<PeerEvent> {
        peerEventHub.subscribe(marking: { [PeerEvent(peer: nil, event: .eventsMissed(count: $1)), $0] })
    }

    /// Registers a hook that runs inside the write transaction, before commit;
    /// throwing aborts the write. The hook must not write this store (that,
    /// and any call that needs the writer's connection, throws
    /// `invalid-configuration`); do that after the write returns. A value it
    /// reads is the one from before this write.
    public func addWillCommitHook(_ hook: @escaping @Sendable ([StoreChange]) throws -> Void) {
        hooks.withLock { $0.willCommit.append(hook) }
    }

    /// Registers a hook that runs after a write committed.
    public func addDidCommitHook(_ hook: @escaping @Sendable ([StoreChange]) -> Void) {
        hooks.withLock { $0.didCommit.append(hook) }
    }

    // MARK: statistics

    public var cacheStatistics: CacheStatistics { cache.statistics }
    public func resetCacheStatistics() { cache.resetStatistics() }
    /// Counters of replication traffic and outcomes.
    public var syncCounters: SyncCounters { counters.withLock { $0 } }

    func emit(_ event: SyncEvent, peer: UInt32? = nil, address: String? = nil) {
        eventHub.publish(event)
        if peerEventHub.hasSubscribers { peerEventHub.publish(PeerEvent(peer: peer, event: event, address: address)) }
    }

    func publishCommitted(_ changes: [StoreChange]) {
        guard !changes.isEmpty else { return }
        let didCommit = hooks.withLock { $0.didCommit }
        for hook in didCommit { hook(changes) }
        if changeHub.hasSubscribers {
            for change in changes { changeHub.publish(change) }
        }
    }
}

struct CommitHooks {
    var willCommit: [@Sendable ([StoreChange]) throws -> Void] = []
    var didCommit: [@Sendable ([StoreChange]) -> Void] = []
}

/// Counters of one store's replication, for people and tests.
public struct SyncCounters: Sendable, Equatable, Codable {
    public var entriesSent = 0
    public var entriesReceived = 0
    /// Entries received that changed nothing (duplicates, older versions).
    public var entriesIgnored = 0
    public var entriesRejected = 0
    public var bytesSent = 0
    public var bytesReceived = 0
    public var batchesSent = 0
    public var batchesReceived = 0
    public var chunksSent = 0
    public var chunksReceived = 0
    public var conflicts = 0
    /// automaticSmall writes over the limit, waiting for a manual sync.
    public var deferred = 0
    public var sessions = 0
    /// Remote entries refused because their version was too far ahead of this
    /// device's clock (`StoreOptions.maxRemoteClockAhead`) or malformed.
    public var versionsRefused = 0

    public init() {}
}
