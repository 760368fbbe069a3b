import Foundation
import Synchronization
import Logging
@_spi(Testing) import SyncEngine
import SyncTransport

/// One simulated device: its store file, clock, and (while up) its open
/// store.
final class SimNode {
    /// The node's name in the scenario (`watch2`, …).
    let name: ScenarioNode
    let role: DeviceRole
    let clock: ManualClock
    private(set) var nodeID: UInt32
    private(set) var path: String
    let keyPath: String
    /// The key registry of the node's app (an older one until `updateApp`).
    var registry: KeyRegistry
    /// Whether `registry` is an older app's (`olderApps`).
    var runsOlderApp = false
    /// The highest session protocol the node's app speaks, when an older app's (`olderProtocols`).
    var highestProtocol: UInt16?
    var store: SyncStore?
    /// Counters of store objects dropped by crashes (they live in memory).
    private(set) var pastCounters = SyncCounters()
    var refusedWrites = 0
    var skewMs: Int64 = 0
    /// The scenario's `tombstoneRetentionMs` and `peerHorizonMs` (nil: the engine's defaults).
    var tombstoneRetentionMs: Int64?
    var peerHorizonMs: Int64?
    /// Tombstones purged by `purge` steps on this node.
    var purgedByStep = 0
    /// The peers this node's store listed as forgotten at a check (a returning watch leaves the list).
    var forgottenSeen: Set<UInt32> = []

    /// What the app saw go from this watch's stores and come back (`no-flicker`), across restarts.
    let removals = SeenRemovals()
    private var observation: ChangeObservation?

    /// Set when a `powerCut` or `fillDisk` step names the node: its files go through this crash VFS.
    var crashVFS: CrashVFS?
    /// Whether the node's storage is full (`fillDisk` until `freeDisk`).
    var diskFull: Bool { disk.isFull }
    /// Whether the node's store holds its stream until a lane pass a full disk
    /// put off runs (an app update's, tried again at a tick or round after a
    /// commit, else at most every 5 s).
    var holdsStreamForLanes: Bool { store?.lanePassWaits ?? false }
    /// What the node's store is told of its free space: none while full,
    /// plenty otherwise (never the machine's own, so runs repeat).
    private let disk = SimDisk()
    /// The VFS's cut count when the current cut was armed (nil: none armed).
    var cutsBeforeArming: Int?
    /// Whether this device was set up from a backup of a watch's store
    /// (`replaceWatch` with `restoredFrom`): it must find itself restored
    /// when its store first opens, and take `nodeID` (unless `unmarkedCopyOf`).
    var restoredCopy = false
    /// For a copy whose app keeps no device marker: the node id it was copied
    /// with, which it keeps until its phone refuses it (`node-id-conflict`)
    /// and it takes `nodeID`.
    var unmarkedCopyOf: UInt32?
    /// The node id this device's store named when it first opened (nil before then).
    private var openedWith: UInt32?
    /// Whether the store is opened with `renewsNodeIDWhenRestored` (a
    /// scenario that restores backups: a copy is caught by the marker its
    /// source kept).
    var marksDevice = false

    init(name: ScenarioNode, nodeID: UInt32, folder: String, wallStart: Int64, registry: KeyRegistry) {
        self.name = name
        self.registry = registry
        self.role = name.role
        self.nodeID = nodeID
        self.path = "\(folder)/\(role.rawValue)-\(String(nodeID, radix: 16)).sqlite"
        self.keyPath = "\(folder)/\(name.rawValue).key"
        self.clock = ManualClock(now: wallStart)
    }

    var isUp: Bool { store != nil }

    /// The nodes' engine log: silent, or on standard error at the level
    /// `SYNCSIM_LOG` names (`trace` … `critical`), to follow a scenario's run.
    static func logger(label: String) -> Logger {
        let (level, warning) = logLevel(named: ProcessInfo.processInfo.environment["SYNCSIM_LOG"])
        if let warning, unknownLevelWarned.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
            try? FileHandle.standardError.write(contentsOf: Data((warning + "\n").utf8))
        }
        guard let level else {
            return Logger(label: label, factory: { _ in SwiftLogNoOpLogHandler() })
        }
        var logger = Logger(label: label, factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = level
        return logger
    }

    /// Whether an unknown `SYNCSIM_LOG` was reported (once a process).
    private static let unknownLevelWarned = Atomic(false)

    /// The level `SYNCSIM_LOG` names, in any case; for a name that is no
    /// level, nil and a warning naming the levels. Unset or empty: neither.
    static func logLevel(named name: String?) -> (level: Logger.Level?, warning: String?) {
        guard let name = name?.trimmingCharacters(in: .whitespaces), !name.isEmpty else { return (nil, nil) }
        if let level = Logger.Level(rawValue: name.lowercased()) { return (level, nil) }
        let levels = Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")
        return (nil, "syncsim: SYNCSIM_LOG=\(name) is not a log level (\(levels)); the nodes' engine log stays off")
    }

    /// Opens (or reopens) the store file with the same options every time, for the node's app's registry.
    func open(durableAcknowledgements: Bool = true) throws {
        var options = StoreOptions(clock: clock)
        options.nodeID = nodeID
        if let tombstoneRetentionMs { options.tombstoneRetention = .milliseconds(tombstoneRetentionMs) }
        if let peerHorizonMs { options.peerHorizon = .milliseconds(peerHorizonMs) }
        options.externalChangePollInterval = nil   // one process per file here; no timer in a deterministic run
        options.renewsNodeIDWhenRestored = (marksDevice || restoredCopy) && unmarkedCopyOf == nil
        let disk = self.disk
        options.freeSpace = { _ in disk.isFull ? 0 : 1 << 40 }
        options.logger = SimNode.logger(label: "syncsim.\(name.rawValue)")
        if let crashVFS {
            // A node that may lose power: its files go through the crash VFS, and a
            // local write returns once it is on disk (so an acknowledged write survives).
            options.vfsName = crashVFS.name
            options.durability = durableAcknowledgements ? .full : .normal
            options.syncsBeforeAcknowledging = durableAcknowledgements
        }
        if registry.descriptors.contains(where: { $0.security == .encrypted }) {
            options.encryption = .keyFile(path: keyPath)
        }
        StoreTemplate.install(at: path)
        let store = try SyncStore(path: path, role: role, registry: registry, options: options)
        // A restored copy must find itself copied at its first open (a later
        // one may name an id its phone had it take: the runner follows it).
        guard !restoredCopy || openedWith != nil || store.nodeID == nodeID || store.nodeID == unmarkedCopyOf else {
            store.close()
            throw SyncError(.invalidConfiguration, "\(name.rawValue)'s store opened with node id \(String(store.nodeID, radix: 16)), not \(String(nodeID, radix: 16))")
        }
        self.store = store
        if openedWith == nil { openedWith = store.nodeID }
        observation?.cancel()
        if role == .watch { observation = removals.observe(store) }
    }

    /// An armed power cut has fired: the node's files are dead until `powerOn`.
    var powerFailed: Bool {
        guard let crashVFS, let before = cutsBeforeArming else { return false }
        return crashVFS.statistics.cuts > before
    }

    /// Arms a cut at the node's `operations`-th file write, truncate or sync
    /// from now; not when the cut armed before has fired already (on a
    /// background thread, say an fsync): the node is down, and arming again
    /// would hide it.
    func armPowerCut(afterOperations operations: Int) {
        guard let crashVFS, !powerFailed else { return }
        cutsBeforeArming = crashVFS.statistics.cuts
        crashVFS.armPowerCut(afterOperations: operations)
    }

    /// Calls off an armed cut that has not fired.
    func disarmPowerCut() {
        guard let crashVFS, !powerFailed else { return }
        crashVFS.disarm()
        cutsBeforeArming = nil
    }

    /// Before reopening: the power is back (the dropped store's files stay dead).
    func powerOn() {
        guard let crashVFS else { return }
        crashVFS.disarm()
        crashVFS.powerOn()
        cutsBeforeArming = nil
    }

    /// Fills the node's storage (true) or frees it: while full, every write
    /// that would make one of its files longer fails with `storage-full`.
    func setDiskFull(_ full: Bool) {
        guard let crashVFS else { return }
        disk.isFull = full
        crashVFS.setDiskFull(full)
    }

    /// Up, with room to store what it receives: a node that can settle with its peers.
    var canSettle: Bool { isUp && !diskFull }

    /// The newest tombstone version the store purged, as of the last time it was up.
    private var purgedThroughWhenDown: Int64 = 0
    /// The newest tombstone version the node's store purged (as of its last time up, while it is down).
    var purgedThrough: Int64 { store.flatMap { try? $0.purgedThrough() } ?? purgedThroughWhenDown }

    /// Stops without closing: the objects are dropped, the file stays.
    func crash() {
        if let store {
            add(store.syncCounters)
            if let purged = try? store.purgedThrough() { purgedThroughWhenDown = purged }
        }
        store = nil
        observation?.cancel()
        observation = nil
    }

    /// Replaces this node with a new device: a new file and node id; with
    /// `backup`, the file (and its key file, if any) of a store backup to
    /// set the new device up from.
    func replace(nodeID: UInt32, folder: String, restoring backup: (store: String, key: String?)? = nil,
                 unmarkedCopyOf copied: UInt32? = nil) throws {
        crash()
        setDiskFull(false)  // a new device
        removals.forget()
        self.nodeID = nodeID
        path = "\(folder)/\(role.rawValue)-\(String(nodeID, radix: 16)).sqlite"
        restoredCopy = backup != nil
        unmarkedCopyOf = backup == nil ? nil : copied
        openedWith = nil
        guard let backup else { return }
        let files = FileManager.default
        try files.moveItem(atPath: backup.store, toPath: path)
        // The restored device has the key that came with the backup, or none yet.
        try? files.removeItem(atPath: keyPath)
        if let key = backup.key { try files.moveItem(atPath: key, toPath: keyPath) }
    }

    /// The node's store took `id` (its phone refused the one it had): the run knows it by `id` from now on.
    func follow(renewedTo id: UInt32) {
        nodeID = id
    }

    /// A backup of this node's store as it is now, at `destination` (with a copy of its
    /// key file beside it, if it has one): nil when the node is not running, or
    /// its armed power cut fires while the copy is taken (over TCP the node's
    /// sessions write beside the runner): its files are dead then, as when down.
    func backUp(to destination: String) throws -> (store: String, key: String?)? {
        guard isUp, !powerFailed else { return nil }
        do {
            try StoreFileBackup.copy(path, vfs: crashVFS?.name, to: destination)
        } catch where powerFailed {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: destination + suffix) }
            return nil
        }
        guard FileManager.default.fileExists(atPath: keyPath) else { return (destination, nil) }
        let key = destination + ".key"
        try? FileManager.default.removeItem(atPath: key)
        try FileManager.default.copyItem(atPath: keyPath, toPath: key)
        return (destination, key)
    }

    /// Counters since the run started, across restarts.
    var counters: SyncCounters {
        var total = pastCounters
        if let store { SimNode.add(store.syncCounters, to: &total) }
        return total
    }

    private func add(_ c: SyncCounters) { SimNode.add(c, to: &pastCounters) }

    private static func add(_ c: SyncCounters, to t: inout SyncCounters) {
        t.entriesSent += c.entriesSent
        t.entriesReceived += c.entriesReceived
        t.entriesIgnored += c.entriesIgnored
        t.entriesRejected += c.entriesRejected
        t.bytesSent += c.bytesSent
        t.bytesReceived += c.bytesReceived
        t.batchesSent += c.batchesSent
        t.batchesReceived += c.batchesReceived
        t.chunksSent += c.chunksSent
        t.chunksReceived += c.chunksReceived
        t.conflicts += c.conflicts
        t.deferred += c.deferred
        t.sessions += c.sessions
    }
}

/// Whether a node's disk is full, for its store's free-space probe (on the
/// checkpointer's thread).
final class SimDisk: Sendable {
    private let full = Atomic<Bool>(false)

    var isFull: Bool {
        get { full.load(ordering: .relaxed) }
        set { full.store(newValue, ordering: .relaxed) }
    }
}

/// The remote removals a watch's app saw (key and version), and the values
/// it then saw set again at a version it saw go: a value removed and set
/// again (`no-flicker`).
final class SeenRemovals: Sendable {
    private struct State {
        var removed: [String: Set<HLCTimestamp>] = [:]
        var setAgain: [(key: String, version: HLCTimestamp)] = []
        var removesAtOnce = false
    }

    private let state = Mutex(State())

    func observe(_ store: SyncStore) -> ChangeObservation {
        store.observeChanges(matching: .all) { [self] change in
            state.withLock { state in
                switch change.kind {
                case .removed:
                    if change.origin == .remote, !state.removesAtOnce { state.removed[change.key, default: []].insert(change.version) }
                case .set:
                    if state.removed[change.key]?.contains(change.version) == true { state.setAgain.append((change.key, change.version)) }
                }
            }
        }
    }

    /// The values set again since the last call.
    func takeSetAgain() -> [(key: String, version: HLCTimestamp)] {
        state.withLock { state in
            defer { state.setAgain = [] }
            return state.setAgain
        }
    }

    /// A new device: nothing seen.
    func forget() { state.withLock { $0.removed = [:]; $0.setAgain = [] } }

    /// Whether the watch syncs in session protocol 1 (its app or the phone's
    /// a build before protocol 2): with no caught-up notices, a re-baseline
    /// notice removes at once what its baseline then brings back (README), so
    /// the removals seen meanwhile are not held against the baseline.
    var removesAtOnce: Bool {
        get { state.withLock { $0.removesAtOnce } }
        set { state.withLock { $0.removesAtOnce = newValue } }
    }
}
