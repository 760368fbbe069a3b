import SyncEngine
import SyncTransport

/// Makes random scenarios from a seed: mixed keys over every availability
/// and policy, small values mostly and values around the 100 KB boundary
/// now and then, random faults, partitions, crashes and restarts, skew.
public struct ScenarioGenerator: Sendable {
    /// Timeline steps per scenario.
    public var ops: Int

    public init(ops: Int = 100) {
        self.ops = ops
    }

    /// The scenario for `seed`.
    public func scenario(seed: UInt64) -> Scenario {
        var r = SeededRandom(seed: seed)
        var keys: [KeyDescriptor] = [
            KeyDescriptor(name: "k:all-auto", availability: .all, policy: .automaticSmall),
            KeyDescriptor(name: "k:all-manual", availability: .all, policy: .manual),
            KeyDescriptor(name: "k:phone-sync", availability: .phoneWithWatchSync, policy: .automaticSmall),
        ]
        for i in 0..<r.nextInt(in: 2...4) {
            let a = Availability.allCases[r.nextInt(in: 0...3)]
            let p = SyncPolicy.allCases[r.nextInt(in: 0...2)]
            keys.append(KeyDescriptor(name: "k:\(i):\(a.rawValue)-\(p.rawValue)", availability: a, policy: p,
                                      security: r.nextBool(probability: 0.15) ? .encrypted : .none))
        }
        if r.nextBool(probability: 0.5) { keys.append(KeyDescriptor(name: "k:max", availability: .all, policy: .automaticSmall, resolver: "max")) }
        if r.nextBool(probability: 0.5) { keys.append(KeyDescriptor(name: "k:day", availability: .all, policy: .automaticSmall, isFamily: true)) }
        let writable = keys.map { $0.isFamily ? "\($0.name):\(r.nextInt(in: 1...3))" : $0.name }

        var steps: [Scenario.Step] = []
        var at: Int64 = 0
        var crashed: Set<DeviceRole> = []
        for _ in 0..<ops {
            at += Int64(r.nextInt(in: 0...150))
            let roll = r.nextInt(in: 0...99)
            let role: DeviceRole = r.nextBool(probability: 0.5) ? .phone : .watch
            let keyIndex = r.nextInt(in: 0...(keys.count - 1))
            let descriptor = keys[keyIndex]
            let key = descriptor.isFamily ? "\(descriptor.name):\(r.nextInt(in: 1...3))" : writable[keyIndex]
            // Mostly write where the key may be written.
            let writer: DeviceRole = descriptor.availability.canWrite(on: role) || r.nextBool(probability: 0.1) ? role : role.counterpart
            let action: Scenario.Action
            switch roll {
            case 0..<46:
                if descriptor.resolver == nil, descriptor.policy != .never, r.nextBool(probability: 0.02) {
                    action = .put(node: writer, key: key, value: nil, size: SyncPolicy.automaticLimit + r.nextInt(in: -2...2))
                } else if descriptor.resolver != nil {
                    action = .put(node: writer, key: key, value: .int(r.nextInt(in: 0...1000)), size: nil)
                } else if r.nextBool(probability: 0.1) {
                    action = .put(node: writer, key: key, value: nil, size: r.nextInt(in: 100...4000))
                } else {
                    action = .put(node: writer, key: key, value: .string("v\(r.nextInt(in: 0...99))"), size: nil)
                }
            case 46..<60: action = .delete(node: writer, key: key)
            case 60..<70: action = .sync(node: role)
            case 70..<75:
                action = .faults(LinkFaults(latencyMs: r.nextInt(in: 1...200), jitterMs: r.nextInt(in: 0...100),
                                            lossRate: Double(r.nextInt(in: 0...30)) / 100, duplicateRate: Double(r.nextInt(in: 0...20)) / 100,
                                            reorderRate: Double(r.nextInt(in: 0...30)) / 100))
            case 75..<79: action = .partition
            case 79..<84: action = .heal
            case 84..<87:
                action = .crash(node: role)
                crashed.insert(role)
            case 87..<92:
                let target = crashed.first ?? role
                crashed.remove(target)
                action = .restart(node: target)
            case 92..<96: action = .skew(node: role, ms: Int64(r.nextInt(in: -600...600)) * 1000)
            case 96..<99: action = .checkpoint
            default: action = .replaceWatch
            }
            steps.append(Scenario.Step(at: at, action))
        }
        var faults = LinkFaults()
        if r.nextBool(probability: 0.5) {
            faults = LinkFaults(latencyMs: r.nextInt(in: 1...50), jitterMs: r.nextInt(in: 0...20), lossRate: Double(r.nextInt(in: 0...20)) / 100,
                                duplicateRate: Double(r.nextInt(in: 0...10)) / 100, reorderRate: Double(r.nextInt(in: 0...20)) / 100)
        }
        return Scenario(description: "fuzz scenario from seed \(seed) (\(ops) ops)", seed: seed, keys: keys, faults: faults,
                        settleLimitMs: 300_000, timeline: steps)
    }
}
