@_spi(Benchmarks) import SyncEngine
import SyncTransport

/// Makes random scenarios from a seed: mixed keys over every availability
/// and policy, small values mostly and values around the 100 KB boundary
/// now and then, random faults, partitions, crashes and restarts, skew;
/// one to three watches, each with its own link, power cuts that land
/// inside SQLite transactions, queued delivery through a mailbox with a
/// node not running for a while, and tombstone purges with a short retention
/// (skews kept within it), a node that starts with an older app (keys
/// declared otherwise or missing) and is updated at some point, or not, and
/// a key with the `union` resolver whose values, some near or over the 100 KB
/// limit, merge into larger ones, a node whose disk fills up for a while, and
/// watches replaced by a device restored from a backup of one of the watches.
public struct ScenarioGenerator: Sendable {
    /// Timeline steps per scenario.
    public var ops: Int

    /// The most watches a scenario gets (1…3).
    public var maxWatches: Int
    /// Whether scenarios get `powerCut` steps.
    public var powerCuts: Bool
    /// Whether scenarios may get a mailbox (`"mailbox": true`, about 4 in 10)
    /// and, with it, a period where one node is not running while the other
    /// writes and queues.
    public var mailbox: Bool
    /// Whether scenarios may purge tombstones (about 3 in 10): a retention of
    /// 10–30 s of virtual time over a timeline stretched eightfold, skews
    /// within a quarter of the retention, `purge` steps, and in half of them
    /// a peer horizon of one to three retentions (a phone forgets a watch
    /// unseen that long, and re-baselines it when it returns).
    public var purges: Bool
    /// Whether scenarios may start one node with an older app (about 2 in
    /// 10): one to two keys declared otherwise (another policy,
    /// availability or value type) or missing, and in most of them an
    /// `updateApp` step at a random point of the timeline.
    public var appUpdates: Bool
    /// Whether scenarios may get a key with the `union` resolver (about 4 in
    /// 10), `k:set`: a fifth of the other keys' writes go to it instead,
    /// arrays of short strings mostly, and in half of them one long string of
    /// 30–70 KB or at the 100 KB limit (±2 bytes), so that merges make large
    /// values, chunked and deferred to a manual sync, at the versions both
    /// sides hold.
    public var largeMerges: Bool
    /// Whether scenarios may start one node with an app of an older session
    /// protocol (about 3 in 10): its highest protocol drawn from
    /// `olderProtocolRange`, and in most of them an `updateApp` step that gives it this build's.
    public var olderProtocols: Bool
    /// The highest protocols an older app's node is drawn with: 1 to the one before this build's.
    public static let olderProtocolRange = 1...Int(Scenario.currentProtocol - 1)
    /// Whether scenarios may fill one node's disk (about 2 in 10): a
    /// `fillDisk` step at a random point and, in most of them, a `freeDisk`
    /// 5–30 steps later (else the disk has room again only at the end).
    public var diskFull: Bool
    /// Whether a `replaceWatch` step may set the new watch up from a backup
    /// of a watch's store (half of them): the replaced one's, or with several
    /// watches another's that stays paired (`restoredFrom`).
    public var restoredCopies: Bool
    /// Whether a `sync` step may instead be a `requestManual` step on the
    /// other side (3 in 10): the node's peer asks it for its manual changes.
    public var manualRequests: Bool

    public init(ops: Int = 100, maxWatches: Int = Scenario.maxWatches, powerCuts: Bool = true, mailbox: Bool = true, purges: Bool = true,
                appUpdates: Bool = true, largeMerges: Bool = true, olderProtocols: Bool = true, diskFull: Bool = true,
                restoredCopies: Bool = true, manualRequests: Bool = true) {
        self.restoredCopies = restoredCopies
        self.manualRequests = manualRequests
        self.olderProtocols = olderProtocols
        self.diskFull = diskFull
        self.appUpdates = appUpdates
        self.largeMerges = largeMerges
        self.ops = ops
        self.maxWatches = min(max(1, maxWatches), Scenario.maxWatches)
        self.powerCuts = powerCuts
        self.mailbox = mailbox
        self.purges = purges
    }

    /// The scenario for `seed`.
    public func scenario(seed: UInt64) -> Scenario {
        var r = SeededRandom(seed: seed)
        // Which watch, and power cuts, come from a second stream, so a one-watch
        // scenario without cuts is the one this seed always gave.
        var w = SeededRandom(seed: seed ^ 0x3A7C_5EED_0F_1A7C)
        let watchCount = 1 + w.nextInt(in: 0...(maxWatches - 1))
        let watches = Array(ScenarioNode.watches.prefix(watchCount))
        func someWatch() -> ScenarioNode { watches[w.nextInt(in: 0...(watchCount - 1))] }
        func someLink() -> ScenarioNode? { watchCount == 1 || w.nextBool(probability: 0.5) ? nil : someWatch() }
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
        // Family member 2 is "é", written precomposed or as e + U+0301 (one key: names are kept in NFC),
        // the spelling from a stream of its own: the scenario is otherwise the one this seed always gave.
        var spelling = SeededRandom(seed: seed ^ 0x4E46_4321_0E01)
        func member(_ i: Int) -> String { i != 2 ? "\(i)" : spelling.nextBool(probability: 0.5) ? "\u{E9}" : "e\u{301}" }
        let writable = keys.map { $0.isFamily ? "\($0.name):\(member(r.nextInt(in: 1...3)))" : $0.name }
        // The merged key comes from a stream of its own: a scenario without it is the one this seed always gave.
        var v = SeededRandom(seed: seed ^ 0x5E7_0F_A2_6E_B1)
        let merging = largeMerges && v.nextBool(probability: 0.4)

        // Restored backups come from a stream of their own, drawn only at `replaceWatch`
        // steps: a scenario without them is the one this seed always gave.
        var b = SeededRandom(seed: seed ^ 0x2B4C_0F_5E_ED_07)
        func restoredFrom(replacing node: ScenarioNode) -> ScenarioNode? {
            guard restoredCopies, b.nextBool(probability: 0.5) else { return nil }
            return b.nextBool(probability: 0.5) ? node : watches[b.nextInt(in: 0...(watchCount - 1))]
        }
        // Whether a restored copy's app keeps no device marker (its phone then
        // refuses the copy, or its source): a stream of its own, drawn only for a copy.
        var unmarked = SeededRandom(seed: seed ^ 0x0C_0B1E_D1D)
        func replaceWatch(_ node: ScenarioNode?, replacing watch: ScenarioNode) -> Scenario.Action {
            let source = restoredFrom(replacing: watch)
            return .replaceWatch(node: node, restoredFrom: source, marker: source == nil || !unmarked.nextBool(probability: 0.4))
        }

        // Manual requests come from a stream of their own, drawn only at `sync` steps:
        // a scenario without them is the one this seed always gave.
        var q = SeededRandom(seed: seed ^ 0x6D_A7_0A_12_E0)

        var steps: [Scenario.Step] = []
        var at: Int64 = 0
        var crashed: [ScenarioNode] = []
        for _ in 0..<ops {
            at += Int64(r.nextInt(in: 0...150))
            let roll = r.nextInt(in: 0...99)
            let role: DeviceRole = r.nextBool(probability: 0.5) ? .phone : .watch
            let watch = someWatch()
            let node: ScenarioNode = role == .phone ? .phone : watch
            let keyIndex = r.nextInt(in: 0...(keys.count - 1))
            let descriptor = keys[keyIndex]
            let key = descriptor.isFamily ? "\(descriptor.name):\(member(r.nextInt(in: 1...3)))" : writable[keyIndex]
            // Mostly write where the key may be written.
            let writer: ScenarioNode = descriptor.availability.canWrite(on: role) || r.nextBool(probability: 0.1) ? node : (role == .phone ? watch : .phone)
            var action: Scenario.Action
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
            case 60..<70:
                if manualRequests, q.nextBool(probability: 0.3) {
                    action = .requestManual(node: role == .phone ? watches[q.nextInt(in: 0...(watchCount - 1))] : .phone)
                } else {
                    action = .sync(node: node)
                }
            case 70..<75:
                action = .faults(LinkFaults(latencyMs: r.nextInt(in: 1...200), jitterMs: r.nextInt(in: 0...100),
                                            lossRate: Double(r.nextInt(in: 0...30)) / 100, duplicateRate: Double(r.nextInt(in: 0...20)) / 100,
                                            reorderRate: Double(r.nextInt(in: 0...30)) / 100), node: someLink())
            case 75..<79: action = .partition(node: someLink())
            case 79..<84: action = .heal(node: someLink())
            case 84..<87:
                action = .crash(node: node)
                if !crashed.contains(node) { crashed.append(node) }
            case 87..<92:
                let target = crashed.first ?? node
                crashed.removeAll { $0 == target }
                action = .restart(node: target)
            case 92..<96: action = .skew(node: node, ms: Int64(r.nextInt(in: -600...600)) * 1000)
            case 96..<99: action = .checkpoint
            default: action = replaceWatch(watchCount == 1 ? nil : watch, replacing: watch)
            }
            if merging, case .put(let writer, _, _, _) = action, v.nextBool(probability: 0.2) {
                action = Self.mergedWrite(by: writer, using: &v)
            }
            if powerCuts, w.nextBool(probability: 0.03) {
                // The cut lands inside one of the node's next SQLite writes, truncates or syncs.
                let target = w.nextBool(probability: 0.5) ? ScenarioNode.phone : someWatch()
                steps.append(Scenario.Step(at: at, .powerCut(node: target, afterOperations: w.nextInt(in: 1...40))))
                if !crashed.contains(target) { crashed.append(target) }
            }
            steps.append(Scenario.Step(at: at, action))
        }
        if merging { keys.append(KeyDescriptor(name: Self.mergedKey, availability: .all, policy: .automaticSmall, resolver: "union")) }
        // Queued delivery comes from a stream of its own: a scenario without a mailbox is the one this seed always gave.
        var m = SeededRandom(seed: seed ^ 0x3A11_B0C5_0F_16)
        let queued = mailbox && m.nextBool(probability: 0.4)
        if queued, !steps.isEmpty {
            // A period where one node is not running while the other goes on writing and queueing.
            let down: ScenarioNode = m.nextBool(probability: 0.5) ? .phone : watches[m.nextInt(in: 0...(watchCount - 1))]
            let first = m.nextInt(in: 0...(steps.count - 1))
            let last = min(steps.count - 1, first + m.nextInt(in: 5...30))
            let restart = Scenario.Step(at: steps[last].at, .restart(node: down))
            steps.insert(restart, at: last + 1)
            steps.insert(Scenario.Step(at: steps[first].at, .crash(node: down)), at: first)
        }
        // In half of those, a small spool and small batches: a baseline takes several reads.
        var mailboxMessages: Int?, queuedBatchEntries: Int?
        if queued, m.nextBool(probability: 0.5) {
            mailboxMessages = m.nextInt(in: 3...8)
            queuedBatchEntries = m.nextInt(in: 1...4)
        }
        // Purges come from a stream of their own too: a scenario without them is the one this seed always gave.
        var g = SeededRandom(seed: seed ^ 0x7F06_B5A7_0E_44)
        var retention: Int64?
        var horizon: Int64? = nil
        if purges, g.nextBool(probability: 0.3), !steps.isEmpty {
            // The engine's assumption (README, tombstones): the retention is longer than any
            // frame stays in flight (retransmits included) and than any jump of a clock. The
            // timeline is stretched eightfold so that tombstones outlive it within one scenario,
            // and clock skews stay within a quarter of the retention.
            let kept = Int64(g.nextInt(in: 10_000...30_000))
            retention = kept
            // Half of them forget a watch unseen for one to three retentions: it is re-baselined when it returns.
            if g.nextBool(probability: 0.5) { horizon = kept * Int64(g.nextInt(in: 1...3)) }
            steps = steps.map { step in
                var stretched = step
                stretched.at *= 8
                if case .skew(let node, let ms) = step.action { stretched.action = .skew(node: node, ms: max(-kept / 4, min(kept / 4, ms))) }
                return stretched
            }
            let nodes: [ScenarioNode] = [.phone] + watches
            for _ in 0..<g.nextInt(in: 1...4) {
                let index = g.nextInt(in: 0...(steps.count - 1))
                steps.insert(Scenario.Step(at: steps[index].at, .purge(node: nodes[g.nextInt(in: 0...(nodes.count - 1))])), at: index + 1)
            }
        }
        // Older apps come from a stream of their own too: a scenario without one is the one this seed always gave.
        var u = SeededRandom(seed: seed ^ 0x0A_99_0B_D4_7E_51)
        var olderApps: [ScenarioNode: [KeyDescriptor]] = [:]
        if appUpdates, u.nextBool(probability: 0.2), !steps.isEmpty {
            let nodes: [ScenarioNode] = [.phone] + watches
            let older = nodes[u.nextInt(in: 0...(nodes.count - 1))]
            var declared = keys
            for _ in 0..<u.nextInt(in: 1...2) {
                let index = u.nextInt(in: 0...(declared.count - 1))
                switch u.nextInt(in: 0...5) {
                case 0: declared.remove(at: index)
                case 1: declared[index].policy = declared[index].policy == .automaticSmall ? .manual : .automaticSmall
                case 2: declared[index].availability = declared[index].availability == .all ? .phoneWithWatchSync : .all
                case 3: declared[index].valueType = declared[index].valueType == nil ? "Int" : nil
                // The older app kept the key on the device: what it wrote there goes once the app is updated.
                case 4: declared[index].policy = declared[index].policy == .never ? .automaticSmall : .never
                default: declared[index].availability = declared[index].availability == .all ? (older == .phone ? .phoneOnly : .watchOnly) : .all
                }
                if declared.isEmpty { break }
            }
            if !declared.isEmpty {
                olderApps[older] = declared
                if u.nextBool(probability: 0.8) {
                    let index = u.nextInt(in: 0...(steps.count - 1))
                    steps.insert(Scenario.Step(at: steps[index].at, .updateApp(node: older)), at: index + 1)
                }
            }
        }
        // So do older protocols: a scenario without one is the one this seed always gave.
        var o = SeededRandom(seed: seed ^ 0x01D_9A07_0C0_15)
        var protocols: [ScenarioNode: UInt16] = [:]
        if olderProtocols, o.nextBool(probability: 0.3), !steps.isEmpty {
            let nodes: [ScenarioNode] = [.phone] + watches
            let older = nodes[o.nextInt(in: 0...(nodes.count - 1))]
            protocols[older] = UInt16(o.nextInt(in: Self.olderProtocolRange))
            let updated = steps.contains { if case .updateApp(older) = $0.action { true } else { false } }
            if !updated, o.nextBool(probability: 0.7) {
                let index = o.nextInt(in: 0...(steps.count - 1))
                steps.insert(Scenario.Step(at: steps[index].at, .updateApp(node: older)), at: index + 1)
            }
        }
        // So does a full disk: a scenario without one is the one this seed always gave.
        var d = SeededRandom(seed: seed ^ 0x0D15_CF_0011)
        if diskFull, d.nextBool(probability: 0.2), !steps.isEmpty {
            let nodes: [ScenarioNode] = [.phone] + watches
            let full = nodes[d.nextInt(in: 0...(nodes.count - 1))]
            let first = d.nextInt(in: 0...(steps.count - 1))
            if d.nextBool(probability: 0.8) {
                let last = min(steps.count - 1, first + d.nextInt(in: 5...30))
                steps.insert(Scenario.Step(at: steps[last].at, .freeDisk(node: full)), at: last + 1)
            }
            steps.insert(Scenario.Step(at: steps[first].at, .fillDisk(node: full)), at: first)
        }
        if protocols[.phone].map({ $0 < SyncMessage.nodeRenewalProtocol }) == true {
            // A copy without its marker keeps it here: a phone before protocol 6 cannot tell the
            // copy from its source (the two miss each other's changes, as before protocol 6).
            steps = steps.map { step in
                guard case .replaceWatch(let node, let source?, false) = step.action else { return step }
                return Scenario.Step(at: step.at, .replaceWatch(node: node, restoredFrom: source))
            }
        }
        var faults = LinkFaults()
        if r.nextBool(probability: 0.5) {
            faults = LinkFaults(latencyMs: r.nextInt(in: 1...50), jitterMs: r.nextInt(in: 0...20), lossRate: Double(r.nextInt(in: 0...20)) / 100,
                                duplicateRate: Double(r.nextInt(in: 0...10)) / 100, reorderRate: Double(r.nextInt(in: 0...20)) / 100)
        }
        return Scenario(description: "fuzz scenario from seed \(seed) (\(ops) ops, \(watchCount) watch\(watchCount == 1 ? "" : "es"))",
                        seed: seed, keys: keys, faults: faults, settleLimitMs: 300_000, watches: watchCount, tombstoneRetentionMs: retention, peerHorizonMs: horizon,
                        mailbox: queued, mailboxMessages: mailboxMessages, queuedBatchEntries: queuedBatchEntries, olderApps: olderApps,
                        olderProtocols: protocols, timeline: steps)
    }

    /// The key of `largeMerges`.
    static let mergedKey = "k:set"

    /// A write of `mergedKey`: mostly a short array, in half of them one long
    /// string (a `size` that the runner makes a one-element array of).
    static func mergedWrite(by writer: ScenarioNode, using v: inout SeededRandom) -> Scenario.Action {
        switch v.nextInt(in: 0...9) {
        case 0...1: return .delete(node: writer, key: mergedKey)
        case 2...5: return .put(node: writer, key: mergedKey, value: .array((0..<v.nextInt(in: 1...3)).map { _ in .string("s\(v.nextInt(in: 0...20))") }), size: nil)
        case 6...7: return .put(node: writer, key: mergedKey, value: nil, size: v.nextInt(in: 30_000...70_000))
        default: return .put(node: writer, key: mergedKey, value: nil, size: SyncPolicy.automaticLimit + v.nextInt(in: -2...2))
        }
    }
}
