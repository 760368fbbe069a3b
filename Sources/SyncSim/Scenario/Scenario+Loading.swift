import Foundation
import SyncEngine
import SyncTransport

/// A scenario file that cannot be run: names the field and its line.
public struct ScenarioError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file, as given.
    public var file: String
    /// The offending field, e.g. `timeline[3].node` (empty for a syntax error).
    public var field: String
    /// 1-based line in the file (0 when unknown).
    public var line: Int
    public var message: String

    public init(file: String, field: String, line: Int, message: String) {
        self.file = file
        self.field = field
        self.line = line
        self.message = message
    }

    public var description: String {
        let place = line > 0 ? "\(file):\(line)" : file
        return field.isEmpty ? "\(place): \(message)" : "\(place): field '\(field)': \(message)"
    }
}

extension Scenario {
    /// Loads and validates a scenario file; a `keysFile` is resolved relative to it.
    public static func load(path: String) throws(ScenarioError) -> Scenario {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ScenarioError(file: path, field: "", line: 0, message: "cannot read the file")
        }
        return try parse(String(decoding: data, as: UTF8.self), file: path)
    }

    /// Parses scenario text; `file` names it in errors and anchors `keysFile`.
    public static func parse(_ text: String, file: String = "scenario") throws(ScenarioError) -> Scenario {
        let root: JSONValue
        do {
            root = try JSONParser.parse(text)
        } catch {
            throw ScenarioError(file: file, field: "", line: error.line, message: "not valid JSON: \(error.message)")
        }
        var reader = FieldReader(file: file, rootLine: 1)
        return try reader.scenario(root)
    }
}

/// Reads typed fields out of a `JSONValue`, failing with the field's path and line.
struct FieldReader {
    let file: String
    var rootLine: Int

    func fail(_ field: String, _ line: Int, _ message: String) -> ScenarioError {
        ScenarioError(file: file, field: field, line: line, message: message)
    }

    func object(_ value: JSONValue, _ path: String, line: Int) throws(ScenarioError) -> JSONValue {
        guard case .object = value else { throw fail(path, line, "expected an object, found \(value.typeName)") }
        return value
    }

    func string(_ obj: JSONValue, _ name: String, _ path: String, line: Int, required: Bool = true) throws(ScenarioError) -> String? {
        guard let m = obj.member(name) else {
            if required { throw fail(join(path, name), line, "is required") }
            return nil
        }
        guard case .string(let s) = m.value else { throw fail(join(path, name), m.line, "expected a string, found \(m.value.typeName)") }
        return s
    }

    func integer(_ obj: JSONValue, _ name: String, _ path: String, line: Int, required: Bool = true, range: ClosedRange<Int64>? = nil) throws(ScenarioError) -> Int64? {
        guard let m = obj.member(name) else {
            if required { throw fail(join(path, name), line, "is required") }
            return nil
        }
        guard case .number(let text) = m.value, let v = Int64(text) else {
            throw fail(join(path, name), m.line, "expected a whole number, found \(m.value.typeName == "a number" ? "a fraction" : m.value.typeName)")
        }
        if let range, !range.contains(v) { throw fail(join(path, name), m.line, "must be in \(range.lowerBound)...\(range.upperBound)") }
        return v
    }

    func double(_ obj: JSONValue, _ name: String, _ path: String, range: ClosedRange<Double>) throws(ScenarioError) -> Double? {
        guard let m = obj.member(name) else { return nil }
        guard case .number(let text) = m.value, let v = Double(text) else { throw fail(join(path, name), m.line, "expected a number, found \(m.value.typeName)") }
        guard range.contains(v) else { throw fail(join(path, name), m.line, "must be in \(range.lowerBound)...\(range.upperBound)") }
        return v
    }

    func join(_ path: String, _ name: String) -> String { path.isEmpty ? name : "\(path).\(name)" }

    func checkKnown(_ obj: JSONValue, _ allowed: Set<String>, _ path: String) throws(ScenarioError) {
        guard case .object(let members) = obj else { return }
        for m in members where !allowed.contains(m.name) {
            throw fail(join(path, m.name), m.line, "unknown field; expected one of \(allowed.sorted().joined(separator: ", "))")
        }
    }

    mutating func scenario(_ root: JSONValue) throws(ScenarioError) -> Scenario {
        _ = try object(root, "", line: 1)
        try checkKnown(root, ["description", "seed", "keys", "keysFile", "faults", "settleLimitMs", "timeline"], "")
        guard let description = try string(root, "description", "", line: 1), !description.isEmpty else {
            throw fail("description", root.member("description")?.line ?? 1, "must say what the scenario demonstrates")
        }
        let seed = try integer(root, "seed", "", line: 1, range: 0...Int64.max)!
        var keys: [KeyDescriptor]
        let keysFile = try string(root, "keysFile", "", line: 1, required: false)
        if let keysMember = root.member("keys") {
            guard keysFile == nil else { throw fail("keysFile", root.member("keysFile")!.line, "give either 'keys' or 'keysFile', not both") }
            keys = try keyList(keysMember.value, "keys", line: keysMember.line)
        } else if let keysFile {
            keys = try loadKeys(keysFile, line: root.member("keysFile")!.line)
        } else {
            throw fail("keys", 1, "is required (or 'keysFile')")
        }
        do {
            _ = try KeyRegistry(descriptors: keys)
        } catch {
            throw fail(keysFile == nil ? "keys" : "keysFile", (root.member("keys") ?? root.member("keysFile"))?.line ?? 1, "not a valid registry: \(error.message)")
        }
        var faults = LinkFaults()
        if let m = root.member("faults") { faults = try linkFaults(m.value, "faults", line: m.line, base: LinkFaults()) }
        let settle = try integer(root, "settleLimitMs", "", line: 1, required: false, range: 1_000...86_400_000) ?? 600_000
        guard let timelineMember = root.member("timeline") else { throw fail("timeline", 1, "is required") }
        guard case .array(let items) = timelineMember.value else {
            throw fail("timeline", timelineMember.line, "expected an array of steps, found \(timelineMember.value.typeName)")
        }
        let registry = try? KeyRegistry(descriptors: keys)
        var steps: [Scenario.Step] = []
        var previousLine = timelineMember.line
        for (i, item) in items.enumerated() {
            let path = "timeline[\(i)]"
            let line = item.firstLine ?? previousLine
            previousLine = line
            steps.append(try step(item, path, line: line, registry: registry))
        }
        // Stable: steps at the same time keep file order.
        let ordered = steps.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }.map(\.element)
        return Scenario(description: description, seed: UInt64(seed), keys: keys, keysFile: keysFile, faults: faults,
                        settleLimitMs: settle, timeline: ordered)
    }

    func loadKeys(_ relative: String, line: Int) throws(ScenarioError) -> [KeyDescriptor] {
        let base = (file as NSString).deletingLastPathComponent
        let path = relative.hasPrefix("/") ? relative : (base.isEmpty ? relative : base + "/" + relative)
        guard let data = FileManager.default.contents(atPath: path) else {
            throw fail("keysFile", line, "cannot read the key registry '\(relative)' (resolved relative to the scenario file)")
        }
        let root: JSONValue
        do {
            root = try JSONParser.parse(String(decoding: data, as: UTF8.self))
        } catch {
            throw fail("keysFile", line, "'\(relative)' line \(error.line) is not valid JSON: \(error.message)")
        }
        guard let keys = root.member("keys") else { throw fail("keysFile", line, "'\(relative)' has no 'keys' array") }
        let inner = FieldReader(file: path, rootLine: 1)
        return try inner.keyList(keys.value, "keys", line: keys.line)
    }

    func keyList(_ value: JSONValue, _ path: String, line: Int) throws(ScenarioError) -> [KeyDescriptor] {
        guard case .array(let items) = value else { throw fail(path, line, "expected an array of keys, found \(value.typeName)") }
        var result: [KeyDescriptor] = []
        var previous = line
        for (i, item) in items.enumerated() {
            let p = "\(path)[\(i)]"
            let l = item.firstLine ?? previous
            previous = l
            _ = try object(item, p, line: l)
            try checkKnown(item, ["name", "availability", "policy", "security", "encoding", "family", "resolver", "legacyName", "type"], p)
            let name = try string(item, "name", p, line: l)!
            var d = KeyDescriptor(name: name)
            if let a = try string(item, "availability", p, line: l, required: false) {
                guard let v = Availability(rawValue: a) else { throw fail("\(p).availability", item.member("availability")!.line, "expected one of \(Availability.allCases.map(\.rawValue).joined(separator: ", "))") }
                d.availability = v
            }
            if let s = try string(item, "policy", p, line: l, required: false) {
                guard let v = SyncPolicy(rawValue: s) else { throw fail("\(p).policy", item.member("policy")!.line, "expected one of \(SyncPolicy.allCases.map(\.rawValue).joined(separator: ", "))") }
                d.policy = v
            }
            if let s = try string(item, "security", p, line: l, required: false) {
                guard let v = KeySecurity(rawValue: s) else { throw fail("\(p).security", item.member("security")!.line, "expected none or encrypted") }
                d.security = v
            }
            if let s = try string(item, "encoding", p, line: l, required: false) {
                guard ["json", "string", "data"].contains(s) else { throw fail("\(p).encoding", item.member("encoding")!.line, "expected json, string or data") }
                d.encoding = s
            }
            if let m = item.member("family") {
                guard case .bool(let b) = m.value else { throw fail("\(p).family", m.line, "expected true or false") }
                d.isFamily = b
            }
            d.resolver = try string(item, "resolver", p, line: l, required: false)
            if let r = d.resolver, ErasedResolver.builtin(named: r) == nil {
                throw fail("\(p).resolver", item.member("resolver")!.line, "unknown resolver '\(r)'; use max or union")
            }
            d.legacyName = try string(item, "legacyName", p, line: l, required: false)
            d.valueType = try string(item, "type", p, line: l, required: false)
            result.append(d)
        }
        return result
    }

    func linkFaults(_ value: JSONValue, _ path: String, line: Int, base: LinkFaults) throws(ScenarioError) -> LinkFaults {
        _ = try object(value, path, line: line)
        try checkKnown(value, ["latencyMs", "jitterMs", "lossRate", "duplicateRate", "reorderRate", "bandwidthBytesPerSecond"], path)
        var f = base
        if let v = try integer(value, "latencyMs", path, line: line, required: false, range: 0...600_000) { f.latencyMs = Int(v) }
        if let v = try integer(value, "jitterMs", path, line: line, required: false, range: 0...600_000) { f.jitterMs = Int(v) }
        if let v = try double(value, "lossRate", path, range: 0...0.95) { f.lossRate = v }
        if let v = try double(value, "duplicateRate", path, range: 0...1) { f.duplicateRate = v }
        if let v = try double(value, "reorderRate", path, range: 0...1) { f.reorderRate = v }
        if let v = try integer(value, "bandwidthBytesPerSecond", path, line: line, required: false, range: 0...Int64(Int32.max)) {
            f.bandwidthBytesPerSecond = v == 0 ? nil : Int(v)
        }
        return f
    }

    func step(_ item: JSONValue, _ path: String, line: Int, registry: KeyRegistry?) throws(ScenarioError) -> Scenario.Step {
        _ = try object(item, path, line: line)
        let at = try integer(item, "at", path, line: line, range: 0...86_400_000)!
        guard let op = try string(item, "op", path, line: line) else { throw fail("\(path).op", line, "is required") }
        let opLine = item.member("op")!.line
        func node() throws(ScenarioError) -> DeviceRole {
            let s = try string(item, "node", path, line: line)!
            guard let role = DeviceRole(rawValue: s) else { throw fail("\(path).node", item.member("node")!.line, "expected \"phone\" or \"watch\"") }
            return role
        }
        func key() throws(ScenarioError) -> String {
            let k = try string(item, "key", path, line: line)!
            if let registry, registry.descriptor(forEntry: k) == nil {
                throw fail("\(path).key", item.member("key")!.line, "key '\(k)' is not declared in the scenario's keys")
            }
            return k
        }
        let action: Scenario.Action
        switch op {
        case "put":
            try checkKnown(item, ["at", "op", "node", "key", "value", "size"], path)
            let n = try node()
            let k = try key()
            let size = try integer(item, "size", path, line: line, required: false, range: 0...16_000_000)
            let value = item["value"]
            guard (value == nil) != (size == nil) else { throw fail("\(path).value", line, "give exactly one of 'value' or 'size'") }
            action = .put(node: n, key: k, value: value, size: size.map(Int.init))
        case "delete":
            try checkKnown(item, ["at", "op", "node", "key"], path)
            action = .delete(node: try node(), key: try key())
        case "sync", "crash", "restart":
            try checkKnown(item, ["at", "op", "node"], path)
            let n = try node()
            action = op == "sync" ? .sync(node: n) : op == "crash" ? .crash(node: n) : .restart(node: n)
        case "skew":
            try checkKnown(item, ["at", "op", "node", "ms"], path)
            action = .skew(node: try node(), ms: try integer(item, "ms", path, line: line, range: -Scenario.maxSkewMs...Scenario.maxSkewMs)!)
        case "faults":
            try checkKnown(item, ["at", "op", "faults"], path)
            guard let m = item.member("faults") else { throw fail("\(path).faults", line, "is required") }
            action = .faults(try linkFaults(m.value, "\(path).faults", line: m.line, base: LinkFaults()))
        case "partition", "heal", "checkpoint", "replaceWatch":
            try checkKnown(item, ["at", "op"], path)
            action = op == "partition" ? .partition : op == "heal" ? .heal : op == "checkpoint" ? .checkpoint : .replaceWatch
        default:
            throw fail("\(path).op", opLine, "unknown op '\(op)'; expected put, delete, sync, faults, partition, heal, crash, restart, skew, checkpoint or replaceWatch")
        }
        return Scenario.Step(at: at, action, line: line)
    }
}

extension JSONValue {
    /// The line of an object's first member.
    var firstLine: Int? {
        if case .object(let members) = self { return members.first?.line }
        return nil
    }
}

extension Error {
    /// The message of a `SyncError`, or a description.
    var message: String { (self as? SyncError)?.message ?? "\(self)" }
}
