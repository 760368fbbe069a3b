import Foundation
import SyncEngine
import SyncTransport

/// Runs a scenario: one SQLite store per node in a temporary folder, the
/// timeline's steps applied to them, a model of every write and sync the
/// apps made, and the invariants checked at checkpoints and at the end.
/// `Link` moves the frames: `SimulatedScenarioLink` in virtual time (the same
/// scenario and seed give the same report) or `TCPScenarioLink` over real sockets.
final class ScenarioRunner<Link: ScenarioLink> {
    let state: RunState
    let link: Link
    var valueRandom: SeededRandom
    var nextWatchID = RunState.firstReplacementWatchID
    var checkpoints = 0
    var stepsRun = 0

    init(scenario: Scenario, options: RunOptions = RunOptions()) throws {
        state = try RunState(scenario: scenario, options: options, folderPrefix: Link.folderPrefix)
        link = Link(state: state)
        valueRandom = SeededRandom(seed: state.seed ^ 0x5EED_5EED_5EED_5EED)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: state.folder)
    }

    /// Runs the timeline, settles, checks, and reports.
    func run(scenarioName: String = "scenario") async throws -> SimReport {
        do {
            try await link.start()
            for step in state.scenario.timeline {
                await link.advance(to: step.at)
                try await apply(step)
                stepsRun += 1
            }
            // Settle: heal, bring crashed nodes back, wait until all is idle.
            await link.setPartitioned(false)
            for node in state.nodes where !node.isUp { try await link.restart(node) }
            let converged = await link.settle(limitMs: state.scenario.settleLimitMs)
            if !converged { state.checker.log.violate(.convergence, link.unsettledAtEnd(limitMs: state.scenario.settleLimitMs)) }
            try checkState(label: "end", connected: true)
            await link.stop()
            let report = try makeReport(name: scenarioName, converged: converged)
            if let keep = state.options.keepStoresIn { try keepStores(in: keep) }
            return report
        } catch {
            await link.stop()
            throw error
        }
    }

    // MARK: steps

    func apply(_ step: Scenario.Step) async throws {
        switch step.action {
        case .put(let role, let key, let value, let size):
            let node = state.node(role)
            guard let store = node.store, let descriptor = state.registry.descriptor(forEntry: key) else {
                node.refusedWrites += 1
                return
            }
            let bytes = valueBytes(descriptor: descriptor, value: value, size: size)
            write(node, store: store, key: key, size: bytes.count) { try store.setEncoded(bytes, forKey: key) }
        case .delete(let role, let key):
            let node = state.node(role)
            guard let store = node.store else {
                node.refusedWrites += 1
                return
            }
            write(node, store: store, key: key, size: 0) { try store.removeValue(forKey: key) }
        case .sync(let role):
            let node = state.node(role)
            guard let store = node.store else { return }
            link.willSync(on: node)
            _ = try store.requestManualSync()
            state.model.recordSync(node: role, nodeID: node.nodeID)
            link.localChange(on: node)
        case .faults(let faults):
            link.setFaults(faults)
        case .partition:
            await link.setPartitioned(true)
        case .heal:
            await link.setPartitioned(false)
        case .crash(let role):
            let node = state.node(role)
            guard node.isUp else { return }
            await link.crash(node)
        case .restart(let role):
            let node = state.node(role)
            guard !node.isUp else { return }
            try await link.restart(node)
        case .skew(let role, let ms):
            let node = state.node(role)
            node.skewMs = ms
            node.clock.setSkew(ms)
        case .checkpoint:
            checkpoints += 1
            let connected = state.nodes.allSatisfy(\.isUp) && !link.isPartitioned
            var settled = false
            if connected {
                let limit = state.options.checkpointLimitMs
                settled = await link.settle(limitMs: limit)
                if !settled {
                    state.checker.log.violate(.convergence, "checkpoint at t=\(step.at): not idle within \(link.describeLimit(ms: limit))")
                }
            }
            try checkState(label: "checkpoint t=\(step.at)", connected: settled)
        case .replaceWatch:
            let watch = state.watch
            await link.willReplace(watch)
            state.model.retire(nodeID: watch.nodeID)
            watch.replace(nodeID: nextWatchID, folder: state.folder)
            nextWatchID += 1
            try await link.didReplace(watch)
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
            state.model.recordWrite(node: node.role, nodeID: node.nodeID, key: key, version: info.version, deleted: info.isDeleted, size: size)
        }
        link.localChange(on: node)
    }

    /// The serialized bytes of a `put`: the JSON value (canonical), or a generated value of `size` bytes.
    func valueBytes(descriptor: KeyDescriptor, value: JSONValue?, size: Int?) -> [UInt8] {
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
        for node in state.nodes { node.crash() }
        for name in try fm.contentsOfDirectory(atPath: state.folder).sorted() where name.hasSuffix(".sqlite") || name.hasSuffix(".sqlite-wal") {
            let target = (directory as NSString).appendingPathComponent(name)
            try? fm.removeItem(atPath: target)
            try fm.copyItem(atPath: (state.folder as NSString).appendingPathComponent(name), toPath: target)
        }
    }

    // MARK: checks and report

    /// Checks the stores. With a node down, checks what can be checked on the one that is up.
    func checkState(label: String, connected: Bool) throws {
        link.observeSentFrames()
        guard let ps = state.phone.store, let ws = state.watch.store else {
            guard let only = state.nodes.compactMap(\.store).first else { return }
            let s = try InvariantChecker.snapshot(only)
            let empty = InvariantChecker.Snapshot(role: only.role.counterpart, nodeID: 0, entries: [:], values: [:])
            state.checker.checkState(phone: only.role == .phone ? s : empty, watch: only.role == .watch ? s : empty, model: state.model,
                                     connected: false, label: label)
            return
        }
        state.checker.checkState(phone: try InvariantChecker.snapshot(ps), watch: try InvariantChecker.snapshot(ws), model: state.model,
                                 connected: connected, label: label)
    }

    func makeReport(name: String, converged: Bool) throws -> SimReport {
        let nodes = try state.nodes.map { node in
            let t = link.traffic(of: node)
            return try SimReport.Node.measure(node, bytesSent: t.bytesSent, payloadBytesSent: t.payloadBytesSent,
                                              framesSent: t.framesSent, framesDropped: t.framesDropped)
        }
        let transport = Link.transport
        let replay = SimReport.replayCommand(scenario: name, seed: state.seed, transport: transport == .sim ? nil : transport.rawValue,
                                             faults: state.options.testingFaults)
        return SimReport(scenario: name, description: state.scenario.description, seed: state.seed, transport: transport.rawValue,
                         steps: stepsRun, checkpoints: checkpoints, virtualTimeMs: link.elapsedMs, converged: converged,
                         sessions: link.sessions, sessionFailures: link.sessionFailures, nodes: nodes,
                         invariants: state.checker.log.ordered, replay: replay)
    }
}
