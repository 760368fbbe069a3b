import Foundation
import SyncEngine
import SyncTransport

/// Runs a scenario over real TCP sockets on 127.0.0.1: the phone listens
/// (port 0), the watch dials, each node runs a `SyncPeer`. Steps run in
/// order as fast as they can; their `at` sets the nodes' wall clocks, so
/// versions follow the scenario's times. Approximations: loss, latency,
/// duplication and reordering are not applied (TCP delivers in order); a
/// partition closes the connection and the watch does not redial until
/// `heal`; a crash closes the node's connection and drops its objects.
/// Reports are not byte-identical between runs.
final class TCPRunner {
    let scenario: Scenario
    let options: RunOptions
    let seed: UInt64
    let registry: KeyRegistry
    let folder: String
    let phone: SimNode
    let watch: SimNode
    let link = TCPLinkState()
    var model = WriteModel()
    var checker: InvariantChecker
    var valueRandom: SeededRandom
    var secret = PairingSecret.generate()
    var peers: [DeviceRole: SyncPeer] = [:]
    var tasks: [DeviceRole: Task<Void, Never>] = [:]
    var listener: TCPListener?
    var nextWatchID: UInt32 = 0x3003
    var awaitingRebaseline = false
    var checkpoints = 0
    var stepsRun = 0
    var sessions = 0
    static let idleTimeout: Duration = .seconds(30)

    init(scenario: Scenario, options: RunOptions) throws {
        self.scenario = scenario
        self.options = options
        seed = options.seed ?? scenario.seed
        registry = try KeyRegistry(descriptors: scenario.keys)
        folder = (options.temporaryDirectory as NSString).appendingPathComponent("syncsim-tcp-" + UUID().uuidString)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        phone = SimNode(role: .phone, end: .a, nodeID: SimRunner.phoneNodeID, folder: folder, wallStart: SimRunner.wallStart)
        watch = SimNode(role: .watch, end: .b, nodeID: SimRunner.watchNodeID, folder: folder, wallStart: SimRunner.wallStart)
        checker = InvariantChecker(registry: registry)
        valueRandom = SeededRandom(seed: seed ^ 0x5EED_5EED_5EED_5EED)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: folder)
    }

    func node(_ role: DeviceRole) -> SimNode { role == .phone ? phone : watch }

    var configuration: TCPConfiguration { TCPConfiguration(secret: secret) }

    var replication: ReplicationConfiguration {
        var config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        config.testingFaults = options.testingFaults
        return config
    }

    func run(scenarioName: String) async throws -> SimReport {
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try await start(.phone)
        try await start(.watch)
        var failure: Error?
        do {
            for step in scenario.timeline {
                setClocks(step.at)
                try await apply(step)
                stepsRun += 1
            }
            link.partitioned = false
            for role in DeviceRole.allCases where !node(role).isUp { try await start(role) }
            let converged = await settle()
            if !converged {
                checker.log.violate(.convergence, "did not go idle within \(Self.idleTimeout) after the last step")
            }
            try checkState(label: "end", connected: true)
            await stopAll()
            return try makeReport(name: scenarioName, converged: converged)
        } catch {
            failure = error
        }
        await stopAll()
        throw failure!
    }

    func setClocks(_ at: Int64) {
        phone.clock.set(SimRunner.wallStart + at)
        watch.clock.set(SimRunner.wallStart + at)
    }

    // MARK: nodes

    /// Opens the node's store and starts its peer (the phone listens, the watch dials).
    func start(_ role: DeviceRole) async throws {
        let node = node(role)
        if !node.isUp { try node.open(registry: registry) }
        guard let store = node.store else { return }
        let peer = SyncPeer(store: store, configuration: replication)
        peers[role] = peer
        let link = self.link
        let nodeID = node.nodeID
        let configuration = self.configuration
        if role == .phone {
            let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: configuration)
            self.listener = listener
            link.port = listener.port
            tasks[role] = Task {
                for await connection in listener.connections {
                    if Task.isCancelled || link.partitioned {
                        await connection.close()
                        if Task.isCancelled { break } else { continue }
                    }
                    let recording = RecordingConnection(base: connection, role: .phone, nodeID: nodeID, link: link)
                    link.setConnection(.phone, recording)
                    await peer.run(over: recording)
                    link.setConnection(.phone, nil)
                    link.add(connection.statistics, for: .phone)
                }
            }
        } else {
            tasks[role] = Task {
                while !Task.isCancelled {
                    guard !link.partitioned, let port = link.port else {
                        try? await Task.sleep(for: .milliseconds(20))
                        continue
                    }
                    do {
                        let connection = try await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: configuration)
                        let recording = RecordingConnection(base: connection, role: .watch, nodeID: nodeID, link: link)
                        link.setConnection(.watch, recording)
                        if Task.isCancelled || link.partitioned {
                            await connection.close()
                        } else {
                            await peer.run(over: recording)
                        }
                        link.setConnection(.watch, nil)
                        link.add(connection.statistics, for: .watch)
                    } catch {
                        try? await Task.sleep(for: .milliseconds(50))
                    }
                }
            }
        }
    }

    /// Stops the node's peer and closes its connection; the store is dropped if `crash`.
    func stop(_ role: DeviceRole, crash: Bool) async {
        tasks[role]?.cancel()
        if role == .phone, let listener {
            await listener.close()
            self.listener = nil
            link.port = nil
        }
        await link.closeConnections()
        await tasks[role]?.value
        tasks[role] = nil
        peers[role] = nil
        if crash { node(role).crash() }
    }

    func stopAll() async {
        await stop(.watch, crash: false)
        await stop(.phone, crash: false)
    }

    /// Waits until both peers are idle at the same time.
    func settle() async -> Bool {
        guard phone.isUp, watch.isUp, !link.partitioned else { return false }
        for _ in 0..<5 {
            do {
                try await peers[.phone]?.waitUntilIdle(timeout: Self.idleTimeout)
                try await peers[.watch]?.waitUntilIdle(timeout: Self.idleTimeout)
                try await peers[.phone]?.waitUntilIdle(timeout: .milliseconds(1))
                return true
            } catch {
                continue
            }
        }
        return false
    }

    // MARK: steps

    func apply(_ step: Scenario.Step) async throws {
        switch step.action {
        case .put(let role, let key, let value, let size):
            let node = node(role)
            guard let store = node.store, let descriptor = registry.descriptor(forEntry: key) else {
                node.refusedWrites += 1
                return
            }
            let bytes = SimRunner.valueBytes(descriptor: descriptor, value: value, size: size, random: &valueRandom)
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
            link.noteSync(nodeID: node.nodeID)
            _ = try store.requestManualSync()
            model.recordSync(node: role, nodeID: node.nodeID)
        case .faults:
            break
        case .partition:
            link.partitioned = true
            await link.closeConnections()
        case .heal:
            link.partitioned = false
        case .crash(let role):
            guard node(role).isUp else { return }
            await stop(role, crash: true)
        case .restart(let role):
            guard !node(role).isUp else { return }
            try await start(role)
        case .skew(let role, let ms):
            node(role).skewMs = ms
            node(role).clock.setSkew(ms)
        case .checkpoint:
            checkpoints += 1
            let connected = phone.isUp && watch.isUp && !link.partitioned
            var settled = false
            if connected {
                settled = await settle()
                if !settled { checker.log.violate(.convergence, "checkpoint at t=\(step.at): not idle within \(Self.idleTimeout)") }
            }
            try checkState(label: "checkpoint t=\(step.at)", connected: settled)
        case .replaceWatch:
            await stop(.watch, crash: true)
            await stop(.phone, crash: false)
            model.retire(nodeID: watch.nodeID)
            watch.replace(nodeID: nextWatchID, folder: folder)
            nextWatchID += 1
            secret = PairingSecret.generate()
            // Without a session record, the re-baseline is taken to happen at the re-pair.
            model.recordRebaseline(nodeID: phone.nodeID)
            try await start(.phone)
            try await start(.watch)
            watch.clock.setSkew(watch.skewMs)
        }
    }

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
    }

    // MARK: checks and report

    func checkFrames() {
        for sent in link.drainSent() {
            checker.observe(sent.frame, from: sent.role, senderID: sent.nodeID, model: model, at: 0, syncsVisible: sent.syncsVisible)
        }
    }

    func checkState(label: String, connected: Bool) throws {
        checkFrames()
        guard let ps = phone.store, let ws = watch.store else { return }
        checker.checkState(phone: try InvariantChecker.snapshot(ps), watch: try InvariantChecker.snapshot(ws), model: model,
                           connected: connected, label: label)
    }

    func makeReport(name: String, converged: Bool) throws -> SimReport {
        let nodes = try [phone, watch].map { node in
            let s = link.statistics(for: node.role)
            return try SimReport.Node.measure(node, bytesSent: s.bytesSent, payloadBytesSent: s.payloadBytesSent,
                                              framesSent: s.framesSent, framesDropped: 0)
        }
        let replay = SimReport.replayCommand(scenario: name, seed: seed, transport: "tcp", faults: options.testingFaults)
        let sessionCount = phone.counters.sessions
        return SimReport(scenario: name, description: scenario.description, seed: seed, transport: "tcp", steps: stepsRun,
                         checkpoints: checkpoints, virtualTimeMs: scenario.timeline.last?.at ?? 0, converged: converged,
                         sessions: sessionCount, sessionFailures: 0, nodes: nodes, invariants: checker.log.ordered, replay: replay)
    }
}
