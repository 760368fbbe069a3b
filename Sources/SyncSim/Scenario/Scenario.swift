import SyncEngine
import SyncTransport

/// A node a scenario step names: the phone, or one of up to three watches
/// (`watch` is the first one). Each watch has its own link to the phone.
public enum ScenarioNode: String, Sendable, Hashable, CaseIterable, Comparable {
    case phone, watch, watch2, watch3

    /// The watches, in order.
    public static let watches: [ScenarioNode] = [.watch, .watch2, .watch3]

    /// The device role of the node.
    public var role: DeviceRole { self == .phone ? .phone : .watch }

    /// 1…3 for the watches, 0 for the phone.
    public var watchNumber: Int {
        switch self {
        case .phone: 0
        case .watch: 1
        case .watch2: 2
        case .watch3: 3
        }
    }

    public static func < (a: ScenarioNode, b: ScenarioNode) -> Bool { a.watchNumber < b.watchNumber }
}

/// A scripted run of a phone and one to three watches: keys, link faults and a timeline
/// of steps at virtual times. The file format is described in
/// `Fixtures/scenarios/README.md`.
public struct Scenario: Sendable, Equatable {
    /// What the scenario demonstrates.
    public var description: String
    /// Seeds the link's randomness and generated values.
    public var seed: UInt64
    /// The key registry of the apps (every node's, unless `olderApps` names it).
    public var keys: [KeyDescriptor]
    /// Nodes that start with an older app: its key registry (each name also in
    /// `keys`; declarations may differ, keys may be missing). An `updateApp`
    /// step gives the node `keys`.
    public var olderApps: [ScenarioNode: [KeyDescriptor]]
    /// Nodes whose older app speaks session protocols up to this one only
    /// (`ReplicationConfiguration.protocolRange = 1...n`, a build before the
    /// newer ones): live sessions with it use the highest both speak (its
    /// queued messages are this build's). An `updateApp` step gives the node
    /// this build's.
    public var olderProtocols: [ScenarioNode: UInt16]
    /// The highest session protocol of this build (every node's unless `olderProtocols` names it).
    public static let currentProtocol = ReplicationConfiguration().protocolRange.upperBound
    /// The registry file the keys came from, as written in the scenario (nil when inline).
    public var keysFile: String?
    /// Link faults at the start.
    public var faults: LinkFaults
    /// Virtual milliseconds after the last step by which the nodes must converge.
    public var settleLimitMs: Int64
    /// The steps, in the order they run (by `at`, then file order).
    public var timeline: [Step]
    /// How many watches the phone has (1…3).
    public var watches: Int
    /// Every node's `StoreOptions.tombstoneRetention` in milliseconds (nil: the engine's default).
    public var tombstoneRetentionMs: Int64?
    /// Every node's `StoreOptions.peerHorizon` in milliseconds (nil: the engine's default).
    public var peerHorizonMs: Int64?
    /// Queued delivery: each watch's pairing also has a mailbox directory. While
    /// a link is partitioned or a node is not running, the nodes that run go on
    /// posting and reading through it (live over the link otherwise).
    public var mailbox: Bool
    /// How many messages each direction of a mailbox holds (`MailboxLimits.maxMessages`; nil: the default).
    public var mailboxMessages: Int?
    /// At most this many entries per queued batch (`ReplicationConfiguration.maxBatchEntries`; nil: the default).
    /// With a small `mailboxMessages`, a baseline then takes several mailbox reads.
    public var queuedBatchEntries: Int?

    public init(description: String, seed: UInt64, keys: [KeyDescriptor], keysFile: String? = nil, faults: LinkFaults = .init(),
                settleLimitMs: Int64 = 600_000, watches: Int = 1, tombstoneRetentionMs: Int64? = nil, peerHorizonMs: Int64? = nil,
                mailbox: Bool = false, mailboxMessages: Int? = nil, queuedBatchEntries: Int? = nil,
                olderApps: [ScenarioNode: [KeyDescriptor]] = [:], olderProtocols: [ScenarioNode: UInt16] = [:], timeline: [Step]) {
        self.olderProtocols = olderProtocols
        self.mailbox = mailbox
        self.mailboxMessages = mailboxMessages
        self.queuedBatchEntries = queuedBatchEntries
        self.olderApps = olderApps
        self.watches = watches
        self.tombstoneRetentionMs = tombstoneRetentionMs
        self.peerHorizonMs = peerHorizonMs
        self.description = description
        self.seed = seed
        self.keys = keys
        self.keysFile = keysFile
        self.faults = faults
        self.settleLimitMs = settleLimitMs
        self.timeline = timeline
    }

    /// One timeline step.
    public struct Step: Sendable, Equatable {
        /// Virtual time in milliseconds.
        public var at: Int64
        public var action: Action

        public init(at: Int64, _ action: Action) {
            self.at = at
            self.action = action
        }
    }

    /// Whether a step sets a watch up from a backup (`replaceWatch` with `restoredFrom`).
    public var restoresBackups: Bool {
        timeline.contains { step in
            if case .replaceWatch(_, .some, _) = step.action { true } else { false }
        }
    }

    /// What a step does.
    public enum Action: Sendable, Equatable {
        /// Writes `value` (JSON), or a generated value of `size` serialized bytes.
        case put(node: ScenarioNode, key: String, value: JSONValue?, size: Int?)
        case delete(node: ScenarioNode, key: String)
        /// `store.requestManualSync()` on the node.
        case sync(node: ScenarioNode)
        /// `peer.requestManualChanges()` on the node: each peer it has a
        /// session with releases its manual changes, as its own sync would.
        case requestManual(node: ScenarioNode)
        /// Replaces the faults of the named watch's link (nil: every link).
        case faults(LinkFaults, node: ScenarioNode? = nil)
        /// Nothing crosses the named watch's link (nil: every link).
        case partition(node: ScenarioNode? = nil)
        case heal(node: ScenarioNode? = nil)
        /// The node stops without closing; its file stays.
        case crash(node: ScenarioNode)
        /// The node reopens its file; its sessions start again.
        case restart(node: ScenarioNode)
        /// Offsets the node's wall clock by `ms` (at most ±10 minutes).
        case skew(node: ScenarioNode, ms: Int64)
        /// Runs until the connected nodes are idle, then checks the invariants.
        case checkpoint
        /// A new watch (new file, node id and pairing epoch) replaces the named one (nil: `watch`).
        /// With `restoredFrom`, the new watch is set up from a backup of that
        /// watch's store taken now (itself, or another that stays paired): a
        /// copy of its file and key, opened with `renewsNodeIDWhenRestored`
        /// (`marker` false: without it, so the copy keeps the node id it was
        /// copied with until its phone refuses it with `node-id-conflict`).
        case replaceWatch(node: ScenarioNode? = nil, restoredFrom: ScenarioNode? = nil, marker: Bool = true)
        /// Arms a power cut on the node: its `afterOperations`-th SQLite file
        /// write, truncate or sync from now fails (inside a transaction), and
        /// the node is down until `restart`, with what was synced to disk.
        case powerCut(node: ScenarioNode, afterOperations: Int)
        /// The node's storage is full: every write that would make one of its
        /// files longer fails (`storage-full`), until `freeDisk` (or the end).
        case fillDisk(node: ScenarioNode)
        /// The node's storage has room again.
        case freeDisk(node: ScenarioNode)
        /// `store.purgeTombstones()` on the node: forgets watches unseen past the
        /// peer horizon (phone), purges the tombstones every known peer has.
        case purge(node: ScenarioNode)
        /// The node's app is updated to the scenario's `keys`: it stops as in
        /// `crash` (the system ends an app to update it) and, if it was running,
        /// starts again with the new registry.
        case updateApp(node: ScenarioNode)

        /// The `op` name in scenario files.
        public var op: String {
            switch self {
            case .put: "put"
            case .delete: "delete"
            case .sync: "sync"
            case .requestManual: "requestManual"
            case .faults: "faults"
            case .partition: "partition"
            case .heal: "heal"
            case .crash: "crash"
            case .restart: "restart"
            case .skew: "skew"
            case .checkpoint: "checkpoint"
            case .replaceWatch: "replaceWatch"
            case .powerCut: "powerCut"
            case .fillDisk: "fillDisk"
            case .freeDisk: "freeDisk"
            case .purge: "purge"
            case .updateApp: "updateApp"
            }
        }
    }

    /// The largest clock skew a step may set: ten minutes.
    public static let maxSkewMs: Int64 = 600_000
    /// The longest `tombstoneRetentionMs` or `peerHorizonMs`: 365 days.
    public static let maxStoreDurationMs: Int64 = 365 * 86_400_000
    /// The most watches a scenario may have.
    public static let maxWatches = 3

    /// Whether the scenario is about tombstone purging (its own retention or
    /// horizon, or a `purge` step): its report shows what each node purged and forgot.
    public var showsTombstonePurge: Bool {
        tombstoneRetentionMs != nil || peerHorizonMs != nil || timeline.contains { if case .purge = $0.action { true } else { false } }
    }

    /// Names of the keys some older app declares otherwise than `keys` (or not at all).
    public var keysDeclaredDifferently: Set<String> {
        var names = Set<String>()
        for older in olderApps.values {
            for key in keys where !older.contains(where: { Scenario.declaredAlike($0, key) }) { names.insert(key.name) }
        }
        return names
    }

    /// Whether two apps declare a key alike, as the engine compares declarations
    /// (name, family, availability, policy, encoding, resolver, value type, security).
    public static func declaredAlike(_ a: KeyDescriptor?, _ b: KeyDescriptor?) -> Bool {
        guard let a, let b else { return false }
        return a.name == b.name && a.isFamily == b.isFamily && a.availability == b.availability && a.policy == b.policy
            && a.encoding == b.encoding && a.resolver == b.resolver && a.valueType == b.valueType && a.security == b.security
    }

    /// The nodes of the scenario: the phone, then its watches.
    public var nodes: [ScenarioNode] { [.phone] + ScenarioNode.watches.prefix(watches) }
}
