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
        /// The line of the step in its file (0 when generated).
        public var line: Int

        public init(at: Int64, _ action: Action, line: Int = 0) {
            self.at = at
            self.action = action
            self.line = line
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

extension Scenario {
    /// The scenario as a JSON document (keys inline), for writing files.
    public var json: JSONValue {
        var members: [(String, JSONValue)] = [
            ("description", .string(description)),
            ("seed", .number(String(seed))),
        ]
        if let keysFile {
            members.append(("keysFile", .string(keysFile)))
        } else {
            members.append(("keys", .array(keys.map(Scenario.json(of:)))))
        }
        if faults != LinkFaults() { members.append(("faults", Scenario.json(of: faults))) }
        if settleLimitMs != 600_000 { members.append(("settleLimitMs", .number(String(settleLimitMs)))) }
        members.append(("timeline", .array(timeline.map(\.json))))
        return .object(members)
    }

    static func json(of key: KeyDescriptor) -> JSONValue {
        var m: [(String, JSONValue)] = [("name", .string(key.name)), ("availability", .string(key.availability.rawValue)),
                                        ("policy", .string(key.policy.rawValue)), ("security", .string(key.security.rawValue))]
        if key.encoding != "json" { m.append(("encoding", .string(key.encoding))) }
        if key.isFamily { m.append(("family", .bool(true))) }
        if let resolver = key.resolver { m.append(("resolver", .string(resolver))) }
        return .object(m)
    }

    static func json(of f: LinkFaults) -> JSONValue {
        var m: [(String, JSONValue)] = [("latencyMs", .int(f.latencyMs))]
        if f.jitterMs != 0 { m.append(("jitterMs", .int(f.jitterMs))) }
        if f.lossRate != 0 { m.append(("lossRate", .double(f.lossRate))) }
        if f.duplicateRate != 0 { m.append(("duplicateRate", .double(f.duplicateRate))) }
        if f.reorderRate != 0 { m.append(("reorderRate", .double(f.reorderRate))) }
        if let b = f.bandwidthBytesPerSecond { m.append(("bandwidthBytesPerSecond", .int(b))) }
        return .object(m)
    }
}

extension Scenario.Step {
    /// The step as a JSON object.
    public var json: JSONValue {
        var m: [(String, JSONValue)] = [("at", .number(String(at))), ("op", .string(action.op))]
        switch action {
        case .put(let node, let key, let value, let size):
            m += [("node", .string(node.rawValue)), ("key", .string(key))]
            if let value { m.append(("value", value)) }
            if let size { m.append(("size", .int(size))) }
        case .delete(let node, let key):
            m += [("node", .string(node.rawValue)), ("key", .string(key))]
        case .sync(let node), .crash(let node), .restart(let node):
            m.append(("node", .string(node.rawValue)))
        case .skew(let node, let ms):
            m += [("node", .string(node.rawValue)), ("ms", .number(String(ms)))]
        case .faults(let f):
            m.append(("faults", Scenario.json(of: f)))
        case .partition, .heal, .checkpoint, .replaceWatch:
            break
        }
        return .object(m)
    }
}
