import Foundation
import PropertyBased
@_spi(Testing) @_spi(Benchmarks) @testable import SyncEngine
import SyncTransport

/// One step of a generated history. Histories come from the property
/// library's generators (`Step.histories`), so a failing one shrinks: steps
/// are dropped, and each field moves toward its simplest value.
enum Step: Equatable, CustomStringConvertible {
    case set(DeviceRole, key: Int, value: Int)
    case remove(DeviceRole, key: Int)
    case manualSync(DeviceRole)
    case deliverAll
    case deliverOne
    case dropOne
    case duplicateLast
    case reorder
    case disconnect
    case restart(DeviceRole)
    case skew(DeviceRole, minutes: Int)
    case tick

    static let kinds = 14

    /// A step of kind `kind` (0..<14, weighted as below; 0 is the simplest: a
    /// phone write), by `role` (0 phone, 1 watch), on key `key`, with `value`
    /// (0...49; also the skew's minutes and disconnect-or-tick).
    init(kind: Int, role: Int, key: Int, value: Int) {
        let role: DeviceRole = role == 0 ? .phone : .watch
        switch kind {
        case 0, 1, 2: self = .set(role, key: key, value: value)
        case 3: self = .remove(role, key: key)
        case 4: self = .manualSync(role)
        case 5, 6: self = .deliverAll
        case 7: self = .deliverOne
        case 8: self = .dropOne
        case 9: self = .duplicateLast
        case 10: self = .reorder
        case 11: self = value % 3 == 0 ? .disconnect : .tick
        case 12: self = .restart(role)
        default: self = .skew(role, minutes: value % 21 - 10)
        }
    }

    /// One random step, from the library's shrinking integer generators.
    static let generator = zip(Gen.int(in: 0...(kinds - 1)), Gen.int(in: 0...1), Gen.int(in: 0...(PropertyHarness.keys.count - 1)),
                               Gen.int(in: 0...49))
        .map { Step(kind: $0.0, role: $0.1, key: $0.2, value: $0.3) }

    /// Histories of up to 24 steps.
    static let histories = generator.array(of: 0...24)

    var description: String {
        switch self {
        case .set(let role, let key, let value): "\(role).set(\(PropertyHarness.keys[key].name), \(value))"
        case .remove(let role, let key): "\(role).remove(\(PropertyHarness.keys[key].name))"
        case .manualSync(let role): "\(role).sync()"
        case .deliverAll: "deliverAll"
        case .deliverOne: "deliverOne"
        case .dropOne: "dropOne"
        case .duplicateLast: "duplicateLast"
        case .reorder: "reorder"
        case .disconnect: "disconnect"
        case .restart(let role): "\(role).restart"
        case .skew(let role, let minutes): "\(role).skew(\(minutes) min)"
        case .tick: "tick"
        }
    }
}

/// Runs a history on two real stores over a hand-driven link and checks it
/// against the reference model. Returns nil when every property holds,
/// otherwise what failed.
final class PropertyHarness {
    /// A small key space mixing every availability and policy, plus a resolver
    /// key and a value family near the 100 KB boundary.
    static let keys: [KeyDescriptor] = [
        KeyDescriptor(name: "a.auto", availability: .all, policy: .automaticSmall),
        KeyDescriptor(name: "a.manual", availability: .all, policy: .manual),
        KeyDescriptor(name: "a.never", availability: .all, policy: .never),
        KeyDescriptor(name: "p.only", availability: .phoneOnly, policy: .automaticSmall),
        KeyDescriptor(name: "w.only", availability: .watchOnly, policy: .automaticSmall),
        KeyDescriptor(name: "p.watchsync", availability: .phoneWithWatchSync, policy: .automaticSmall),
        KeyDescriptor(name: "a.big", availability: .all, policy: .automaticSmall),
        KeyDescriptor(name: "a.max", availability: .all, policy: .automaticSmall, resolver: "max"),
    ]

    let folder = TempFolder()
    let registry: KeyRegistry
    let faults: TestingFaults
    let clocks: [DeviceRole: ManualClock] = [.phone: ManualClock(now: 1_000_000), .watch: ManualClock(now: 1_000_000)]
    var stores: [DeviceRole: SyncStore] = [:]
    var endpoints: [DeviceRole: ReplicationEndpoint] = [:]
    var queues: [DeviceRole: [Frame]] = [.phone: [], .watch: []]  // frames in flight *to* that role
    var delivered: [(to: DeviceRole, frame: Frame)] = []
    var now: Int64 = 0
    /// Every write that returned: role, key, version, deleted.
    var writes: [(role: DeviceRole, key: String, version: HLCTimestamp, deleted: Bool, value: [UInt8]?)] = []
    var lastIssued: [DeviceRole: HLCTimestamp] = [:]

    init(faults: TestingFaults = TestingFaults()) throws {
        registry = try KeyRegistry(descriptors: PropertyHarness.keys)
        self.faults = faults
        for role in DeviceRole.allCases { try open(role) }
        connect()
    }

    func open(_ role: DeviceRole) throws {
        var options = StoreOptions(clock: clocks[role]!)
        options.nodeID = role == .phone ? 0x1001 : 0x2002
        stores[role] = try SyncStore(path: folder.file("\(role).sqlite"), role: role, registry: registry, options: options)
    }

    func connect() {
        var config = ReplicationConfiguration(pairingEpoch: "property")
        config.testingFaults = faults
        queues = [.phone: [], .watch: []]
        for role in DeviceRole.allCases { endpoints[role] = ReplicationEndpoint(store: stores[role]!, configuration: config) }
        for role in DeviceRole.allCases { send(endpoints[role]!.start(now: now), from: role) }
    }

    func send(_ frames: [Frame], from role: DeviceRole) {
        queues[role.counterpart]! += frames
    }

    func deliver(_ frame: Frame, to role: DeviceRole) {
        delivered.append((role, frame))
        send(endpoints[role]!.receive(frame, now: now), from: role)
    }

    func pumpBoth() {
        for role in DeviceRole.allCases { send(endpoints[role]!.pump(now: now), from: role) }
    }

    func deliverAll(limit: Int = 10_000) {
        var rounds = 0
        while rounds < limit {
            rounds += 1
            pumpBoth()
            guard let role = DeviceRole.allCases.first(where: { !queues[$0]!.isEmpty }) else { return }
            let frame = queues[role]!.removeFirst()
            deliver(frame, to: role)
        }
    }

    func value(_ code: Int, key: Int) -> [UInt8] {
        if PropertyHarness.keys[key].name == "a.big" {
            // Around the automatic limit: some sync on their own, some are deferred.
            let size = SyncPolicy.automaticLimit - 2 + code % 5
            return [UInt8](repeating: UInt8(48 + code % 10), count: size)
        }
        return Array(String(code).utf8)
    }

    func apply(_ step: Step) throws {
        now += 10
        for clock in clocks.values { clock.advance(by: 10) }
        switch step {
        case .set(let role, let key, let code):
            let name = PropertyHarness.keys[key].name
            guard PropertyHarness.keys[key].availability.canWrite(on: role) else { return }
            let bytes = value(code, key: key)
            let before = try stores[role]!.entryInfo(forKey: name)
            try stores[role]!.setEncoded(bytes, forKey: name)
            try record(role, name, before: before, value: bytes)
        case .remove(let role, let key):
            let name = PropertyHarness.keys[key].name
            guard PropertyHarness.keys[key].availability.canWrite(on: role) else { return }
            let before = try stores[role]!.entryInfo(forKey: name)
            try stores[role]!.removeValue(forKey: name)
            try record(role, name, before: before, value: nil)
        case .manualSync(let role):
            try stores[role]!.requestManualSync()
            pumpBoth()
        case .deliverAll:
            deliverAll()
        case .deliverOne:
            pumpBoth()
            if let role = DeviceRole.allCases.first(where: { !queues[$0]!.isEmpty }) { deliver(queues[role]!.removeFirst(), to: role) }
        case .dropOne:
            pumpBoth()
            if let role = DeviceRole.allCases.first(where: { !queues[$0]!.isEmpty }) { queues[role]!.removeFirst() }
        case .duplicateLast:
            if let last = delivered.last { deliver(last.frame, to: last.to) }
        case .reorder:
            pumpBoth()
            if let role = DeviceRole.allCases.first(where: { queues[$0]!.count > 1 }) { deliver(queues[role]!.removeLast(), to: role) }
        case .disconnect:
            connect()
        case .restart(let role):
            stores[role]!.close()
            try open(role)
            // Durability: every write this node made and that returned is still there, or superseded.
            for write in writes where write.role == role {
                let info = try stores[role]!.entryInfo(forKey: write.key)
                guard let info, info.version >= write.version else {
                    throw PropertyFailure("durability: \(role)'s write of \(write.key) at \(write.version) lost by a restart")
                }
            }
            connect()
        case .skew(let role, let minutes):
            clocks[role]!.setSkew(Int64(minutes) * 60_000)
        case .tick:
            now += 5_000
            for role in DeviceRole.allCases { send(endpoints[role]!.tick(now: now), from: role) }
        }
    }

    private func record(_ role: DeviceRole, _ name: String, before: EntryInfo?, value: [UInt8]?) throws {
        guard let info = try stores[role]!.entryInfo(forKey: name), info.version != before?.version else { return }
        // HLC monotonicity: versions issued by one node only grow.
        if let last = lastIssued[role], info.version <= last {
            throw PropertyFailure("hlc: \(role) issued \(info.version) after \(last)")
        }
        lastIssued[role] = info.version
        writes.append((role, name, info.version, value == nil, value))
    }

    /// Heals, syncs everything, and compares both stores with the model.
    func finish() throws -> String? {
        connect()
        for role in DeviceRole.allCases { try stores[role]!.requestManualSync() }
        for _ in 0..<20 {
            deliverAll()
            if endpoints[.phone]!.isIdle && endpoints[.watch]!.isIdle { break }
            now += 5_000
            for role in DeviceRole.allCases { send(endpoints[role]!.tick(now: now), from: role) }
        }
        guard endpoints[.phone]!.isIdle, endpoints[.watch]!.isIdle else { return "quiescence: the pair did not go idle after healing" }
        if let failure = placementViolation() { return failure }
        for descriptor in PropertyHarness.keys {
            let phone = try stores[.phone]!.entryInfo(forKey: descriptor.name)
            let watch = try stores[.watch]!.entryInfo(forKey: descriptor.name)
            let phoneValue = try stores[.phone]!.encodedValue(forKey: descriptor.name)
            let watchValue = try stores[.watch]!.encodedValue(forKey: descriptor.name)
            let shared = descriptor.replicates(from: .phone) || descriptor.replicates(from: .watch)
            if shared {
                if phoneValue != watchValue { return "convergence: \(descriptor.name) differs between phone and watch" }
                if descriptor.resolver != nil { continue }
                // Reference model: the write with the highest HLC among those allowed to travel wins.
                let candidates = writes.filter { $0.key == descriptor.name && descriptor.replicates(from: $0.role) }
                let winner = candidates.max { $0.version < $1.version }
                if winner?.deleted ?? true {
                    if phoneValue != nil { return "no-resurrection: \(descriptor.name) is present but its winning write is a delete" }
                } else if phoneValue != winner?.value || phone?.version != winner?.version {
                    return "model: \(descriptor.name) holds version \(String(describing: phone?.version)), the model says \(winner!.version)"
                }
                _ = watch
            } else {
                for role in DeviceRole.allCases {
                    let own = writes.filter { $0.key == descriptor.name && $0.role == role }.max { $0.version < $1.version }
                    let value = role == .phone ? phoneValue : watchValue
                    if value != (own?.deleted == false ? own?.value : nil) {
                        return "placement: \(descriptor.name) on the \(role) is not its own last write"
                    }
                }
            }
        }
        return nil
    }

    /// No frame ever carried a key that must not travel in its direction.
    func placementViolation() -> String? {
        for (to, frame) in delivered {
            guard let message = try? SyncMessage(frame: frame) else { continue }
            let from = to.counterpart
            var keys: [String] = []
            switch message {
            case .batch(let batch): keys = batch.entries.map(\.key)
            case .chunk(let chunk): keys = [chunk.entry.key]
            case .hello(let hello): keys = hello.declarations.map { String($0.prefix { $0 != "|" }) }
            default: break
            }
            for key in keys {
                guard let descriptor = registry.descriptor(forEntry: key) else { return "placement: unknown key in a frame" }
                if case .hello = message {
                    if descriptor.policy == .never || descriptor.availability == .phoneOnly || descriptor.availability == .watchOnly {
                        return "placement: the name \(key) appeared in a hello"
                    }
                } else if !descriptor.replicates(from: from) {
                    return "placement: \(key) was sent \(from) → \(to)"
                }
            }
        }
        return nil
    }

    /// Runs `steps` and the final check.
    static func check(_ steps: [Step], faults: TestingFaults = TestingFaults()) -> String? {
        do {
            let harness = try PropertyHarness(faults: faults)
            for step in steps { try harness.apply(step) }
            return try harness.finish()
        } catch let failure as PropertyFailure {
            return failure.description
        } catch {
            return "error: \(error)"
        }
    }
}

struct PropertyFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
