import Foundation
import SyncEngine
import SyncTransport

/// A scenario file (format: `Fixtures/scenarios/README.md`), decoded and validated.
struct ScenarioDocument: Decodable {
    static let fileKey = CodingUserInfoKey(rawValue: "syncsim.scenarioFile")!
    static let fields = ["description", "seed", "keys", "keysFile", "faults", "settleLimitMs", "watches", "tombstoneRetentionMs", "peerHorizonMs", "mailbox", "mailboxMessages", "queuedBatchEntries", "olderApps", "olderProtocols", "timeline"]

    var scenario: Scenario

    init(from decoder: any Decoder) throws {
        let file = decoder.userInfo[ScenarioDocument.fileKey] as? String ?? "scenario"
        let root = try Fields(decoder)
        try root.checkKnown(ScenarioDocument.fields)
        guard let description = try root.string("description"), !description.isEmpty else {
            throw root.fail("description", "must say what the scenario demonstrates")
        }
        let seed = try root.integer("seed", range: 0...Int64.max)!
        let keysFile = try root.string("keysFile", required: false)
        let keys: [KeyDescriptor]
        if let list = try root.elements("keys", of: "keys") {
            guard keysFile == nil else { throw root.fail("keysFile", "give either 'keys' or 'keysFile', not both") }
            keys = try list.map(KeyCoding.descriptor(from:))
        } else if let keysFile {
            keys = try KeyCoding.load(keysFile, scenarioFile: file, root: root)
        } else {
            throw root.fail("keys", "is required (or 'keysFile')")
        }
        let registry: KeyRegistry
        do {
            registry = try KeyRegistry(descriptors: keys)
        } catch {
            throw root.fail(keysFile == nil ? "keys" : "keysFile", "not a valid registry: \(error.message)")
        }
        let faults = try root.object("faults").map(FaultsCoding.faults(from:)) ?? LinkFaults()
        let settle = try root.integer("settleLimitMs", required: false, range: 1_000...86_400_000) ?? 600_000
        let watches = Int(try root.integer("watches", required: false, range: 1...Int64(Scenario.maxWatches)) ?? 1)
        let retention = try root.integer("tombstoneRetentionMs", required: false, range: 0...Scenario.maxStoreDurationMs)
        let horizon = try root.integer("peerHorizonMs", required: false, range: 1_000...Scenario.maxStoreDurationMs)
        let mailbox = try root.bool("mailbox") ?? false
        let mailboxMessages = try root.integer("mailboxMessages", required: false, range: 3...1024).map { Int($0) }
        let queuedBatchEntries = try root.integer("queuedBatchEntries", required: false, range: 1...2048).map { Int($0) }
        for (name, value) in [("mailboxMessages", mailboxMessages), ("queuedBatchEntries", queuedBatchEntries)] where value != nil && !mailbox {
            throw root.fail(name, "needs \"mailbox\": true")
        }
        var olderApps: [ScenarioNode: [KeyDescriptor]] = [:]
        if let apps = try root.object("olderApps") {
            let declared = [ScenarioNode.phone] + ScenarioNode.watches.prefix(watches)
            for field in apps.container.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) {
                guard let node = ScenarioNode(rawValue: field.stringValue), declared.contains(node) else {
                    throw apps.fail(field.stringValue, "expected a node of the scenario: one of \(declared.map(\.rawValue).joined(separator: ", "))")
                }
                let older = try apps.elements(field.stringValue, of: "keys")!.map(KeyCoding.descriptor(from:))
                do {
                    _ = try KeyRegistry(descriptors: older)
                } catch {
                    throw apps.fail(field.stringValue, "not a valid registry: \(error.message)")
                }
                for key in older where !keys.contains(where: { $0.name == key.name && $0.isFamily == key.isFamily }) {
                    throw apps.fail(field.stringValue, "key '\(key.name)' is not in the scenario's keys (an update may change a declaration or add keys, not remove one)")
                }
                olderApps[node] = older
            }
        }
        var olderProtocols: [ScenarioNode: UInt16] = [:]
        if let protocols = try root.object("olderProtocols") {
            let declared = [ScenarioNode.phone] + ScenarioNode.watches.prefix(watches)
            for field in protocols.container.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) {
                guard let node = ScenarioNode(rawValue: field.stringValue), declared.contains(node) else {
                    throw protocols.fail(field.stringValue, "expected a node of the scenario: one of \(declared.map(\.rawValue).joined(separator: ", "))")
                }
                let highest = try protocols.integer(field.stringValue, range: 1...Int64(Scenario.currentProtocol))!
                olderProtocols[node] = UInt16(highest)
            }
        }
        guard let items = try root.elements("timeline", of: "steps") else { throw root.fail("timeline", "is required") }
        let steps = try items.map {
            try StepCoding.step(from: $0, registry: registry, watches: watches, olderApps: Set(olderApps.keys).union(olderProtocols.keys))
        }
        // Stable: steps at the same time keep file order.
        let ordered = steps.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }.map(\.element)
        scenario = Scenario(description: description, seed: UInt64(seed), keys: keys, keysFile: keysFile, faults: faults,
                            settleLimitMs: settle, watches: watches, tombstoneRetentionMs: retention, peerHorizonMs: horizon,
                            mailbox: mailbox, mailboxMessages: mailboxMessages, queuedBatchEntries: queuedBatchEntries,
                            olderApps: olderApps, olderProtocols: olderProtocols, timeline: ordered)
    }
}

/// A key declaration (`{"name": ..., "availability": ..., ...}`) of a scenario or registry file.
struct KeyCoding: Encodable {
    static let fields = ["name", "availability", "policy", "security", "encoding", "family", "resolver", "legacyName", "type"]

    var descriptor: KeyDescriptor

    static func descriptor(from decoder: any Decoder) throws -> KeyDescriptor {
        let item = try Fields(decoder)
        try item.checkKnown(fields)
        var d = KeyDescriptor(name: try item.string("name")!)
        if let text = try item.string("availability", required: false) {
            guard let value = Availability(rawValue: text) else {
                throw item.fail("availability", "expected one of \(Availability.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            d.availability = value
        }
        if let text = try item.string("policy", required: false) {
            guard let value = SyncPolicy(rawValue: text) else {
                throw item.fail("policy", "expected one of \(SyncPolicy.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            d.policy = value
        }
        if let text = try item.string("security", required: false) {
            guard let value = KeySecurity(rawValue: text) else { throw item.fail("security", "expected none or encrypted") }
            d.security = value
        }
        if let text = try item.string("encoding", required: false) {
            guard KeyRegistry.fileEncodings.contains(text) else { throw item.fail("encoding", "expected json, string or data") }
            d.encoding = text
        }
        if let family = try item.bool("family") { d.isFamily = family }
        d.resolver = try item.string("resolver", required: false)
        if let resolver = d.resolver, ErasedResolver.builtin(named: resolver) == nil {
            throw item.fail("resolver", "unknown resolver '\(resolver)'; use max or union")
        }
        d.legacyName = try item.string("legacyName", required: false)
        d.valueType = try item.string("type", required: false)
        return d
    }

    /// The keys of the registry file `relative` (`{"keys": [...]}`, resolved
    /// relative to the scenario file). Its declarations' errors name that file.
    static func load(_ relative: String, scenarioFile: String, root: Fields) throws -> [KeyDescriptor] {
        let base = (scenarioFile as NSString).deletingLastPathComponent
        let path = relative.hasPrefix("/") ? relative : (base.isEmpty ? relative : base + "/" + relative)
        let data: Data
        do {
            data = try InputFile.read(path, limit: InputFile.registryLimit, what: "the key registry '\(relative)'")
        } catch {
            throw root.fail("keysFile", "\(error.message) (resolved relative to the scenario file)")
        }
        if let syntax = JSONSyntaxError(validating: data) {
            throw root.fail("keysFile", "'\(relative)' line \(syntax.line) is not valid JSON: \(syntax.message)")
        }
        guard let keys = try ScenarioError.decoding(data, file: path, { try JSONDecoder().decode(KeyFile.self, from: data).keys }) else {
            throw root.fail("keysFile", "'\(relative)' has no 'keys' array")
        }
        return keys
    }

    /// A registry file: its `keys` (other members, such as a description, are ignored).
    private struct KeyFile: Decodable {
        var keys: [KeyDescriptor]?

        init(from decoder: any Decoder) throws {
            guard let root = try? decoder.container(keyedBy: FieldKey.self) else { return }
            keys = try Fields(root).elements("keys", of: "keys")?.map(KeyCoding.descriptor(from:))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: FieldKey.self)
        try c.encode(descriptor.name, forKey: FieldKey("name"))
        try c.encode(descriptor.availability.rawValue, forKey: FieldKey("availability"))
        try c.encode(descriptor.policy.rawValue, forKey: FieldKey("policy"))
        try c.encode(descriptor.security.rawValue, forKey: FieldKey("security"))
        if descriptor.encoding != "json" { try c.encode(descriptor.encoding, forKey: FieldKey("encoding")) }
        if descriptor.isFamily { try c.encode(true, forKey: FieldKey("family")) }
        try c.encodeIfPresent(descriptor.resolver, forKey: FieldKey("resolver"))
        try c.encodeIfPresent(descriptor.legacyName, forKey: FieldKey("legacyName"))
        try c.encodeIfPresent(descriptor.valueType, forKey: FieldKey("type"))
    }
}

/// Link faults (`{"latencyMs": ..., "lossRate": ..., ...}`), every field optional.
struct FaultsCoding: Encodable {
    static let fields = ["latencyMs", "jitterMs", "lossRate", "duplicateRate", "reorderRate", "bandwidthBytesPerSecond"]

    var faults: LinkFaults

    static func faults(from object: Fields) throws -> LinkFaults {
        try object.checkKnown(fields)
        var f = LinkFaults()
        if let v = try object.integer("latencyMs", required: false, range: 0...600_000) { f.latencyMs = Int(v) }
        if let v = try object.integer("jitterMs", required: false, range: 0...600_000) { f.jitterMs = Int(v) }
        if let v = try object.double("lossRate", range: 0...0.95) { f.lossRate = v }
        if let v = try object.double("duplicateRate", range: 0...1) { f.duplicateRate = v }
        if let v = try object.double("reorderRate", range: 0...1) { f.reorderRate = v }
        if let v = try object.integer("bandwidthBytesPerSecond", required: false, range: 0...Int64(Int32.max)) {
            f.bandwidthBytesPerSecond = v == 0 ? nil : Int(v)
        }
        return f
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: FieldKey.self)
        try c.encode(faults.latencyMs, forKey: FieldKey("latencyMs"))
        if faults.jitterMs != 0 { try c.encode(faults.jitterMs, forKey: FieldKey("jitterMs")) }
        if faults.lossRate != 0 { try c.encode(faults.lossRate, forKey: FieldKey("lossRate")) }
        if faults.duplicateRate != 0 { try c.encode(faults.duplicateRate, forKey: FieldKey("duplicateRate")) }
        if faults.reorderRate != 0 { try c.encode(faults.reorderRate, forKey: FieldKey("reorderRate")) }
        try c.encodeIfPresent(faults.bandwidthBytesPerSecond, forKey: FieldKey("bandwidthBytesPerSecond"))
    }
}

/// A timeline step (`{"at": ..., "op": ..., ...}`).
enum StepCoding {
    static let ops = "put, delete, sync, requestManual, faults, partition, heal, crash, restart, skew, checkpoint, replaceWatch, powerCut, fillDisk, freeDisk, purge or updateApp"

    static func step(from decoder: any Decoder, registry: KeyRegistry, watches: Int, olderApps: Set<ScenarioNode> = []) throws -> Scenario.Step {
        let item = try Fields(decoder)
        let at = try item.integer("at", range: 0...86_400_000)!
        let op = try item.string("op")!
        let declared = [ScenarioNode.phone] + ScenarioNode.watches.prefix(watches)
        func node(required: Bool = true, watchOnly: Bool = false) throws -> ScenarioNode? {
            guard let name = try item.string("node", required: required) else { return nil }
            let allowed = watchOnly ? Array(declared.dropFirst()) : declared
            let expected = allowed.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
            guard let node = ScenarioNode(rawValue: name) else { throw item.fail("node", "expected one of \(expected)") }
            guard node.watchNumber <= watches else {
                throw item.fail("node", "the scenario declares \(watches) watch\(watches == 1 ? "" : "es"); \(name) needs \"watches\": \(node.watchNumber)")
            }
            guard allowed.contains(node) else { throw item.fail("node", "expected a watch: one of \(expected)") }
            return node
        }
        func key() throws -> String {
            let key = try item.string("key")!
            guard registry.descriptor(forEntry: key) != nil else {
                throw item.fail("key", "key '\(key)' is not declared in the scenario's keys")
            }
            return key
        }
        let action: Scenario.Action
        switch op {
        case "put":
            try item.checkKnown(["at", "op", "node", "key", "value", "size"])
            let n = try node()!
            let k = try key()
            let size = try item.integer("size", required: false, range: 0...16_000_000)
            // The exact serialized size: a JSON key's value is at least `""`, a union key's `[""]`.
            if let size, let descriptor = registry.descriptor(forEntry: k), descriptor.encoding == "json" {
                let least: Int64 = descriptor.resolver == "union" ? 4 : 2
                if size < least {
                    throw item.fail("size", "must be at least \(least) for this key (a JSON \(least == 4 ? "array of one string, [\"\"]" : "string, \"\"")), the value's exact serialized size")
                }
            }
            let value = try item.value("value")
            guard (value == nil) != (size == nil) else {
                throw item.fail("value", "give exactly one of 'value' or 'size'")
            }
            // As `syncsim node`'s put: a string or data key takes a JSON string, whose bytes are stored as they are.
            if let value, let descriptor = registry.descriptor(forEntry: k), descriptor.encoding != "json" {
                guard case .string = value else {
                    throw item.fail("value", "key '\(k)' has the encoding \(descriptor.encoding): give a JSON string (\"text\"), whose bytes are stored as they are; found \(value.typeName)")
                }
            }
            action = .put(node: n, key: k, value: value, size: size.map(Int.init))
        case "delete":
            try item.checkKnown(["at", "op", "node", "key"])
            action = .delete(node: try node()!, key: try key())
        case "sync", "requestManual", "crash", "restart", "purge", "fillDisk", "freeDisk":
            try item.checkKnown(["at", "op", "node"])
            let n = try node()!
            action = switch op {
            case "sync": .sync(node: n)
            case "requestManual": .requestManual(node: n)
            case "crash": .crash(node: n)
            case "restart": .restart(node: n)
            case "fillDisk": .fillDisk(node: n)
            case "freeDisk": .freeDisk(node: n)
            default: .purge(node: n)
            }
        case "skew":
            try item.checkKnown(["at", "op", "node", "ms"])
            action = .skew(node: try node()!, ms: try item.integer("ms", range: -Scenario.maxSkewMs...Scenario.maxSkewMs)!)
        case "faults":
            try item.checkKnown(["at", "op", "faults", "node"])
            guard let faults = try item.object("faults") else { throw item.fail("faults", "is required") }
            action = .faults(try FaultsCoding.faults(from: faults), node: try node(required: false, watchOnly: true))
        case "partition", "heal":
            try item.checkKnown(["at", "op", "node"])
            let n = try node(required: false, watchOnly: true)
            action = op == "partition" ? .partition(node: n) : .heal(node: n)
        case "replaceWatch":
            try item.checkKnown(["at", "op", "node", "restoredFrom", "marker"])
            let n = try node(required: false, watchOnly: true)
            var source: ScenarioNode?
            if let name = try item.string("restoredFrom", required: false) {
                let watches = declared.dropFirst()
                guard let watch = ScenarioNode(rawValue: name), watches.contains(watch) else {
                    throw item.fail("restoredFrom", "expected a watch the scenario declares: one of \(watches.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))")
                }
                source = watch
            }
            let marker = try item.bool("marker") ?? true
            if !marker, source == nil { throw item.fail("marker", "false needs 'restoredFrom' (only a copied store can lack its marker)") }
            action = .replaceWatch(node: n, restoredFrom: source, marker: marker)
        case "updateApp":
            try item.checkKnown(["at", "op", "node"])
            let n = try node()!
            guard olderApps.contains(n) else {
                throw item.fail("node", "\(n.rawValue) has no older app to update: name it in 'olderApps' or 'olderProtocols'")
            }
            action = .updateApp(node: n)
        case "checkpoint":
            try item.checkKnown(["at", "op"])
            action = .checkpoint
        case "powerCut":
            try item.checkKnown(["at", "op", "node", "afterOperations"])
            action = .powerCut(node: try node()!, afterOperations: Int(try item.integer("afterOperations", range: 1...1_000_000)!))
        default:
            throw item.fail("op", "unknown op '\(op)'; expected \(ops)")
        }
        return Scenario.Step(at: at, action)
    }
}

extension Scenario: Encodable {
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: FieldKey.self)
        try c.encode(description, forKey: FieldKey("description"))
        try c.encode(seed, forKey: FieldKey("seed"))
        if let keysFile {
            try c.encode(keysFile, forKey: FieldKey("keysFile"))
        } else {
            try c.encode(keys.map(KeyCoding.init(descriptor:)), forKey: FieldKey("keys"))
        }
        if faults != LinkFaults() { try c.encode(FaultsCoding(faults: faults), forKey: FieldKey("faults")) }
        if settleLimitMs != 600_000 { try c.encode(settleLimitMs, forKey: FieldKey("settleLimitMs")) }
        if watches != 1 { try c.encode(watches, forKey: FieldKey("watches")) }
        try c.encodeIfPresent(tombstoneRetentionMs, forKey: FieldKey("tombstoneRetentionMs"))
        try c.encodeIfPresent(peerHorizonMs, forKey: FieldKey("peerHorizonMs"))
        if mailbox { try c.encode(true, forKey: FieldKey("mailbox")) }
        try c.encodeIfPresent(mailboxMessages, forKey: FieldKey("mailboxMessages"))
        try c.encodeIfPresent(queuedBatchEntries, forKey: FieldKey("queuedBatchEntries"))
        if !olderApps.isEmpty {
            var apps = c.nestedContainer(keyedBy: FieldKey.self, forKey: FieldKey("olderApps"))
            for (node, keys) in olderApps.sorted(by: { $0.key < $1.key }) {
                try apps.encode(keys.map(KeyCoding.init(descriptor:)), forKey: FieldKey(node.rawValue))
            }
        }
        if !olderProtocols.isEmpty {
            var protocols = c.nestedContainer(keyedBy: FieldKey.self, forKey: FieldKey("olderProtocols"))
            for (node, highest) in olderProtocols.sorted(by: { $0.key < $1.key }) { try protocols.encode(highest, forKey: FieldKey(node.rawValue)) }
        }
        try c.encode(timeline, forKey: FieldKey("timeline"))
    }
}

extension Scenario.Step: Encodable {
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: FieldKey.self)
        try c.encode(at, forKey: FieldKey("at"))
        try c.encode(action.op, forKey: FieldKey("op"))
        switch action {
        case .put(let node, let key, let value, let size):
            try c.encode(node.rawValue, forKey: FieldKey("node"))
            try c.encode(key, forKey: FieldKey("key"))
            try c.encodeIfPresent(value, forKey: FieldKey("value"))
            try c.encodeIfPresent(size, forKey: FieldKey("size"))
        case .delete(let node, let key):
            try c.encode(node.rawValue, forKey: FieldKey("node"))
            try c.encode(key, forKey: FieldKey("key"))
        case .sync(let node), .requestManual(let node), .crash(let node), .restart(let node), .purge(let node), .updateApp(let node),
             .fillDisk(let node), .freeDisk(let node):
            try c.encode(node.rawValue, forKey: FieldKey("node"))
        case .skew(let node, let ms):
            try c.encode(node.rawValue, forKey: FieldKey("node"))
            try c.encode(ms, forKey: FieldKey("ms"))
        case .faults(let faults, let node):
            try c.encode(FaultsCoding(faults: faults), forKey: FieldKey("faults"))
            try c.encodeIfPresent(node?.rawValue, forKey: FieldKey("node"))
        case .partition(let node), .heal(let node):
            try c.encodeIfPresent(node?.rawValue, forKey: FieldKey("node"))
        case .replaceWatch(let node, let source, let marker):
            try c.encodeIfPresent(node?.rawValue, forKey: FieldKey("node"))
            try c.encodeIfPresent(source?.rawValue, forKey: FieldKey("restoredFrom"))
            if !marker { try c.encode(false, forKey: FieldKey("marker")) }
        case .checkpoint:
            break
        case .powerCut(let node, let operations):
            try c.encode(node.rawValue, forKey: FieldKey("node"))
            try c.encode(operations, forKey: FieldKey("afterOperations"))
        }
    }
}
