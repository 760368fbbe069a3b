import Foundation
import SyncEngine
import SyncTransport

/// How a scenario is run.
public struct RunOptions: Sendable {
    /// Overrides the scenario's seed.
    public var seed: UInt64?
    /// Deliberate engine faults, to prove the checker can fail.
    public var testingFaults = TestingFaults()
    /// Virtual milliseconds between endpoint ticks (retransmission, hello retry).
    public var tickMs: Int64 = 100
    /// Virtual milliseconds a checkpoint may wait for both nodes to go idle.
    public var checkpointLimitMs: Int64 = 120_000
    /// Where the temporary store folders go: `$SYNCSIM_TMPDIR`, else `/dev/shm`
    /// when writable (real SQLite files, without waiting for the disk), else the system's.
    public var temporaryDirectory: String = RunOptions.defaultTemporaryDirectory
    /// When set, the nodes' store files are copied here at the end (for `syncsim inspect`).
    public var keepStoresIn: String?

    public static var defaultTemporaryDirectory: String {
        if let dir = ProcessInfo.processInfo.environment["SYNCSIM_TMPDIR"], !dir.isEmpty { return dir }
        if FileManager.default.isWritableFile(atPath: "/dev/shm") { return "/dev/shm" }
        return NSTemporaryDirectory()
    }

    public init(seed: UInt64? = nil, testingFaults: TestingFaults = TestingFaults()) {
        self.seed = seed
        self.testingFaults = testingFaults
    }
}

/// Runs a scenario over the simulated link in virtual time: one SQLite store
/// per node in a temporary folder, a `ReplicationEndpoint` per node per
/// session, and a `SimulatedLink` carrying the frames. The same scenario and
/// seed give the same report.
public final class SimRunner {
    public let scenario: Scenario
    public let options: RunOptions
    public let seed: UInt64
    let registry: KeyRegistry
    let folder: String
    var link: SimulatedLink
    let phone: SimNode
    let watch: SimNode
    var model = WriteModel()
    var checker: InvariantChecker
    var now: Int64 = 0
    var nextTick: Int64 = 0
    var reconnectAt: Int64?
    var epoch = 1
    var nextWatchID: UInt32 = 0x3003
    var valueRandom: SeededRandom
    var sessionsStarted = 0
    var sessionFailures = 0
    var checkpoints = 0
    var notes: [String] = []
    var stepsRun = 0
    /// Set by `replaceWatch`: the phone re-baselines when the first session with the new watch is established.
    var awaitingRebaseline = false

    /// Fixed node ids, so runs are reproducible.
    public static let phoneNodeID: UInt32 = 0x1001
    public static let watchNodeID: UInt32 = 0x2002
    static let wallStart: Int64 = 1_700_000_000_000

    public init(scenario: Scenario, options: RunOptions = RunOptions()) throws {
        self.scenario = scenario
        self.options = options
        seed = options.seed ?? scenario.seed
        registry = try KeyRegistry(descriptors: scenario.keys)
        folder = (options.temporaryDirectory as NSString).appendingPathComponent("syncsim-" + UUID().uuidString)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        link = SimulatedLink(seed: seed, faults: scenario.faults)
        phone = SimNode(role: .phone, end: .a, nodeID: SimRunner.phoneNodeID, folder: folder, wallStart: SimRunner.wallStart)
        watch = SimNode(role: .watch, end: .b, nodeID: SimRunner.watchNodeID, folder: folder, wallStart: SimRunner.wallStart)
        checker = InvariantChecker(registry: registry)
        valueRandom = SeededRandom(seed: seed ^ 0x5EED_5EED_5EED_5EED)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: folder)
    }

    func node(_ role: DeviceRole) -> SimNode { role == .phone ? phone : watch }

    /// Runs the timeline, settles, checks, and reports.
    public func run(scenarioName: String = "scenario") throws -> SimReport {
        try phone.open(registry: registry)
        try watch.open(registry: registry)
        startSession()
        for step in scenario.timeline {
            _ = runUntil(limit: step.at, stop: nil)
            now = max(now, step.at)
            setClocks()
            try apply(step)
            stepsRun += 1
        }
        // Settle: heal, bring crashed nodes back, wait for quiescence.
        link.faults.partitioned = false
        for node in [phone, watch] where !node.isUp {
            try node.open(registry: registry)
            startSession()
        }
        let deadline = now + scenario.settleLimitMs
        let converged = runUntil(limit: deadline, stop: { self.isQuiescent })
        if !converged {
            checker.log.violate(.convergence, "did not converge within \(scenario.settleLimitMs) ms of virtual time after the last step")
        }
        try checkState(label: "end", connected: true)
        let report = try makeReport(name: scenarioName, converged: converged)
        if let keep = options.keepStoresIn { try keepStores(in: keep) }
        return report
    }

    // MARK: sessions

    var configuration: ReplicationConfiguration {
        var config = ReplicationConfiguration(pairingEpoch: "syncsim-epoch-\(epoch)")
        config.testingFaults = options.testingFaults
        return config
    }

    /// Ends any current session and starts a new one when both nodes are up.
    func startSession() {
        link.dropInFlight()
        phone.endpoint?.connectionLost()
        watch.endpoint?.connectionLost()
        phone.endpoint = nil
        watch.endpoint = nil
        reconnectAt = nil
        guard let ps = phone.store, let ws = watch.store else { return }
        sessionsStarted += 1
        let config = configuration
        let pe = ReplicationEndpoint(store: ps, configuration: config)
        let we = ReplicationEndpoint(store: ws, configuration: config)
        phone.endpoint = pe
        watch.endpoint = we
        send(pe.start(now: now), from: phone)
        send(we.start(now: now), from: watch)
    }

    func send(_ frames: [Frame], from node: SimNode) {
        for frame in frames {
            checker.observe(frame, from: node.role, senderID: node.nodeID, model: model, at: now)
            link.send(frame, from: node.end, at: now)
        }
        if awaitingRebaseline, phone.endpoint?.isEstablished == true {
            awaitingRebaseline = false
            model.recordRebaseline(nodeID: phone.nodeID)
        }
        noteFailures()
    }

    /// A failed session is replaced by a new one after a short pause (a reconnect).
    func noteFailures() {
        guard reconnectAt == nil else { return }
        if phone.endpoint?.failure != nil || watch.endpoint?.failure != nil {
            sessionFailures += 1
            reconnectAt = now + 500
        }
    }

    func setClocks() {
        phone.clock.set(SimRunner.wallStart + now)
        watch.clock.set(SimRunner.wallStart + now)
    }

    var isQuiescent: Bool {
        guard link.inFlightCount == 0, !link.faults.partitioned, let pe = phone.endpoint, let we = watch.endpoint else { return false }
        return pe.isIdle && we.isIdle
    }

    // MARK: the event loop

    /// Processes deliveries, ticks and reconnects in time order up to `limit`.
    /// With `stop`, returns true as soon as it holds (checked at ticks).
    func runUntil(limit: Int64, stop: (() -> Bool)?) -> Bool {
        if let stop, stop() { return true }
        while true {
            var next = nextTick
            if let d = link.nextDeliveryTime { next = min(next, d) }
            if let r = reconnectAt { next = min(next, r) }
            guard next <= limit else {
                now = max(now, limit)
                setClocks()
                return false
            }
            now = max(now, next)
            setClocks()
            if let d = link.nextDeliveryTime, d <= now {
                for (to, frame) in link.deliverDue(at: now) {
                    let target = to == .a ? phone : watch
                    guard let endpoint = target.endpoint else { continue }
                    send(endpoint.receive(frame, now: now), from: target)
                }
            }
            if let r = reconnectAt, r <= now {
                startSession()
            }
            if nextTick <= now {
                nextTick = now + options.tickMs
                for node in [phone, watch] {
                    if let endpoint = node.endpoint { send(endpoint.tick(now: now), from: node) }
                }
                if let stop, stop() { return true }
            }
        }
    }

    // MARK: steps

    func apply(_ step: Scenario.Step) throws {
        switch step.action {
        case .put(let role, let key, let value, let size):
            let node = node(role)
            guard let store = node.store, let descriptor = registry.descriptor(forEntry: key) else {
                node.refusedWrites += 1
                return
            }
            let bytes = valueBytes(descriptor: descriptor, value: value, size: size)
            write(node, store: store, key: key, size: bytes.count) { try store.setEncoded(bytes, forKey: key) }
        case .delete(let role, let key):
            let node = node(role)
            guard let store = node.store else {
                node.refusedWrites += 1
                return
            }
            write(node, store: store, key: key, size: 0) { try store.removeValue(forKey: key) }
        case .sync(let role):
            let node = node(role)
            guard let store = node.store else { return }
            _ = try store.requestManualSync()
            model.recordSync(node: role, nodeID: node.nodeID)
            pump(node)
        case .faults(let faults):
            let partitioned = link.faults.partitioned
            link.faults = faults
            link.faults.partitioned = partitioned
        case .partition:
            link.faults.partitioned = true
        case .heal:
            link.faults.partitioned = false
        case .crash(let role):
            let node = node(role)
            guard node.isUp else { return }
            node.crash()
            startSession()
        case .restart(let role):
            let node = node(role)
            guard !node.isUp else { return }
            try node.open(registry: registry)
            startSession()
        case .skew(let role, let ms):
            node(role).skewMs = ms
            node(role).clock.setSkew(ms)
        case .checkpoint:
            checkpoints += 1
            let connected = phone.isUp && watch.isUp && !link.faults.partitioned
            var settled = false
            if connected {
                settled = runUntil(limit: now + options.checkpointLimitMs, stop: { self.isQuiescent })
                if !settled {
                    checker.log.violate(.convergence, "checkpoint at t=\(step.at): not idle within \(options.checkpointLimitMs) ms")
                }
            }
            try checkState(label: "checkpoint t=\(step.at)", connected: settled)
        case .replaceWatch:
            model.retire(nodeID: watch.nodeID)
            watch.replace(nodeID: nextWatchID, folder: folder)
            nextWatchID += 1
            epoch += 1
            awaitingRebaseline = true
            try watch.open(registry: registry)
            watch.clock.setSkew(watch.skewMs)
            startSession()
        }
    }

    /// Performs a local write and records it in the model when it made a new version.
    private func write(_ node: SimNode, store: SyncStore, key: String, size: Int, _ body: () throws -> Void) {
        let before = (try? store.entryInfo(forKey: key))?.version
        do {
            try body()
        } catch {
            node.refusedWrites += 1
            return
        }
        if let info = try? store.entryInfo(forKey: key), info.version != before {
            model.recordWrite(node: node.role, nodeID: node.nodeID, key: key, version: info.version, deleted: info.isDeleted, size: size)
        }
        pump(node)
    }

    private func pump(_ node: SimNode) {
        if let endpoint = node.endpoint { send(endpoint.pump(now: now), from: node) }
    }

    /// The serialized bytes of a `put`: the JSON value (canonical), or a generated value of `size` bytes.
    func valueBytes(descriptor: KeyDescriptor, value: JSONValue?, size: Int?) -> [UInt8] {
        SimRunner.valueBytes(descriptor: descriptor, value: value, size: size, random: &valueRandom)
    }

    static func valueBytes(descriptor: KeyDescriptor, value: JSONValue?, size: Int?, random valueRandom: inout SeededRandom) -> [UInt8] {
        if let size {
            let quoted = descriptor.encoding == "json"
            let count = quoted ? max(0, size - 2) : size
            var bytes: [UInt8] = []
            bytes.reserveCapacity(count + 2)
            if quoted { bytes.append(UInt8(ascii: "\"")) }
            let alphabet = Array("abcdefghijklmnop".utf8)
            while bytes.count < count + (quoted ? 1 : 0) {
                var word = valueRandom.next()
                for _ in 0..<16 where bytes.count < count + (quoted ? 1 : 0) {
                    bytes.append(alphabet[Int(word & 0xF)])
                    word >>= 4
                }
            }
            if quoted { bytes.append(UInt8(ascii: "\"")) }
            return bytes
        }
        guard let value else { return [] }
        if descriptor.encoding != "json", case .string(let text) = value { return Array(text.utf8) }
        return Array(value.canonicalText.utf8)
    }

    /// Copies every store file of the run (including replaced watches') to `directory`.
    func keepStores(in directory: String) throws {
        let fm = FileManager.default
        try fm.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for node in [phone, watch] { node.crash() }
        for name in try fm.contentsOfDirectory(atPath: folder).sorted() where name.hasSuffix(".sqlite") || name.hasSuffix(".sqlite-wal") {
            let target = (directory as NSString).appendingPathComponent(name)
            try? fm.removeItem(atPath: target)
            try fm.copyItem(atPath: (folder as NSString).appendingPathComponent(name), toPath: target)
        }
    }

    // MARK: checks

    func checkState(label: String, connected: Bool) throws {
        guard let ps = phone.store, let ws = watch.store else {
            // A node is down: check what can be checked on the one that is up.
            let up = [phone, watch].compactMap(\.store)
            guard let only = up.first else { return }
            let s = try InvariantChecker.snapshot(only)
            let empty = InvariantChecker.Snapshot(role: only.role.counterpart, nodeID: 0, entries: [:], values: [:])
            checker.checkState(phone: only.role == .phone ? s : empty, watch: only.role == .watch ? s : empty, model: model,
                               connected: false, label: label)
            return
        }
        checker.checkState(phone: try InvariantChecker.snapshot(ps), watch: try InvariantChecker.snapshot(ws), model: model,
                           connected: connected, label: label)
    }
}
