import SyncEngine
import SyncTransport

/// A scripted run of a phone and a watch: keys, link faults and a timeline
/// of steps at virtual times. The file format is described in
/// `Fixtures/scenarios/README.md`.
public struct Scenario: Sendable, Equatable {
    /// What the scenario demonstrates.
    public var description: String
    /// Seeds the link's randomness and generated values.
    public var seed: UInt64
    /// The key registry both nodes use.
    public var keys: [KeyDescriptor]
    /// The registry file the keys came from, as written in the scenario (nil when inline).
    public var keysFile: String?
    /// Link faults at the start.
    public var faults: LinkFaults
    /// Virtual milliseconds after the last step by which the nodes must converge.
    public var settleLimitMs: Int64
    /// The steps, in the order they run (by `at`, then file order).
    public var timeline: [Step]

    public init(description: String, seed: UInt64, keys: [KeyDescriptor], keysFile: String? = nil, faults: LinkFaults = .init(),
                settleLimitMs: Int64 = 600_000, timeline: [Step]) {
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

    /// What a step does.
    public enum Action: Sendable, Equatable {
        /// Writes `value` (JSON), or a generated value of `size` serialized bytes.
        case put(node: DeviceRole, key: String, value: JSONValue?, size: Int?)
        case delete(node: DeviceRole, key: String)
        /// `store.requestManualSync()` on the node.
        case sync(node: DeviceRole)
        case faults(LinkFaults)
        case partition
        case heal
        /// The node stops without closing; its file stays.
        case crash(node: DeviceRole)
        /// The node reopens its file; both sides start a new session.
        case restart(node: DeviceRole)
        /// Offsets the node's wall clock by `ms` (at most ±10 minutes).
        case skew(node: DeviceRole, ms: Int64)
        /// Runs until both nodes are idle, then checks the invariants.
        case checkpoint
        /// A new watch (new file, node id and pairing epoch) replaces the old one.
        case replaceWatch

        /// The `op` name in scenario files.
        public var op: String {
            switch self {
            case .put: "put"
            case .delete: "delete"
            case .sync: "sync"
            case .faults: "faults"
            case .partition: "partition"
            case .heal: "heal"
            case .crash: "crash"
            case .restart: "restart"
            case .skew: "skew"
            case .checkpoint: "checkpoint"
            case .replaceWatch: "replaceWatch"
            }
        }
    }

    /// The largest clock skew a step may set: ten minutes.
    public static let maxSkewMs: Int64 = 600_000
}
