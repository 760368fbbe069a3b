import Foundation
@_spi(Testing) import SyncEngine
import SyncTransport

/// The phone and its watches over real TCP sockets on 127.0.0.1: the phone
/// listens (port 0) with one pairing per watch and serves them at once, each
/// watch dials, each node runs a `SyncPeer`. Steps run in order as fast as
/// they can; their `at` sets the nodes' wall clocks, so versions follow the
/// scenario's times. Approximations: loss, latency, duplication and
/// reordering are not applied (TCP delivers in order); a partition closes the
/// watch's connection and it does not redial until `heal`; a crash closes the
/// node's connections and drops its objects. Frames are recorded as they are
/// sent, with the receiver's app as the connection opened, and checked at the
/// next check. Reports are not byte-identical between runs.
final class TCPScenarioLink: ScenarioLink {
    static let transport = SimTransport.tcp
    static let folderPrefix = "syncsim-tcp-"
    /// How long a checkpoint or the end may wait for the nodes to go idle (a loaded machine is slow).
    static let idleTimeout: Duration = .seconds(150)

    let state: RunState
    let shared = TCPLinkState()
    /// Each watch's pairing with the phone (a new one at `replaceWatch`).
    var secrets: [ScenarioNode: PairingSecret] = [:]
    var peers: [ScenarioNode: SyncPeer] = [:]
    var tasks: [ScenarioNode: Task<Void, Never>] = [:]
    var listener: TCPListener?

    init(state: RunState) {
        self.state = state
        for watch in state.watches { secrets[watch.name] = PairingSecret.generate() }
    }

    func secret(_ watch: ScenarioNode) -> PairingSecret { secrets[watch]! }

    func start() async throws {
        for node in state.nodes { try await start(node) }
    }

    func advance(to at: Int64) async {
        state.setClocks(at)
    }

    func localChange(on node: SimNode) {}

    /// The node's replication configuration; it answers a manual request
    /// only while a `requestManual` step waits for it (a request asked again
    /// in a later session is declined: its release would come at no step).
    func replication(of node: SimNode, epoch: String) -> ReplicationConfiguration {
        var configuration = state.replication(of: node, epoch: epoch)
        let (shared, name) = (self.shared, node.name)
        configuration.answersManualRequests = { _ in shared.answersManualRequest(by: name) }
        return configuration
    }

    /// How long a `requestManual` step waits for the peers asked to answer:
    /// a peer of protocol 1 is never asked (it is counted among them all the same).
    static let manualAnswerGrace: Duration = .seconds(2)

    /// Asks the node's peers for their manual changes and waits until each
    /// peer asked has released them (or `manualAnswerGrace` passed, and each
    /// that accepted by then has released), so that no later step runs beside
    /// a release; each release is a sync in the model.
    func requestManual(on node: SimNode) async {
        guard let peer = peers[node.name] else { return }
        let answering = (node.role == .phone ? state.watches : [state.phone]).filter { peers[$0.name] != nil }
        let events = answering.compactMap { peer in peer.store.map { (peer, $0.events()) } }
        shared.openManualAnswers(answering.map(\.name))
        let asked = peer.requestManualChanges()
        let released = asked == 0 ? [] : await releases(in: events, asked: asked)
        _ = shared.closeManualAnswers()
        for answered in released { state.model.recordSync(node: answered.role, nodeID: answered.nodeID) }
    }

    /// The nodes among `events` that released their manual changes for the
    /// request: until `asked` did, or once the grace passed, until each that
    /// accepted by then did or cannot (its power failed, its disk is full or
    /// it is down: a release that fails sends no event), at most `idleTimeout`.
    func releases(in events: [(SimNode, AsyncStream<SyncEvent>)], asked: Int) async -> [SimNode] {
        // A node's index; nil: the grace passed; -1: the long wait passed; -2: look again.
        let (signals, signal) = AsyncStream.makeStream(of: Int?.self)
        let watchers = events.map(\.1).enumerated().map { index, stream in Self.signalRelease(in: stream, as: index, to: signal) }
        var timers = [Self.signal(nil, after: Self.manualAnswerGrace, to: signal)]
        defer {
            for task in watchers { task.cancel() }
            for task in timers { task.cancel() }
            signal.finish()
        }
        var released: Set<Int> = []
        var accepted: Set<ScenarioNode>?  // known once the window closed
        for await next in signals {
            if next == -1 { break }
            if let index = next, index >= 0 { released.insert(index) }
            if accepted == nil, next == nil || released.count >= asked {
                accepted = shared.closeManualAnswers()
                timers.append(Self.signal(-1, after: Self.idleTimeout, to: signal))
                timers.append(Task {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .milliseconds(100))
                        signal.yield(-2)
                    }
                })
            }
            guard let accepted else { continue }
            let waiting = events.indices.filter { accepted.contains(events[$0].0.name) && !released.contains($0) }.map { events[$0].0 }
            if waiting.allSatisfy({ !$0.isUp || $0.powerFailed || $0.diskFull }) { break }
        }
        return released.sorted().map { events[$0].0 }
    }

    /// A task that yields `index` once `events` shows an accepted manual request.
    static func signalRelease(in events: AsyncStream<SyncEvent>, as index: Int, to signal: AsyncStream<Int?>.Continuation) -> Task<Void, Never> {
        Task {
            for await event in events {
                if case .manualRequestReceived(accepted: true, _) = event {
                    signal.yield(index)
                    return
                }
            }
        }
    }

    /// A task that yields `value` after `delay`.
    static func signal(_ value: Int?, after delay: Duration, to signal: AsyncStream<Int?>.Continuation) -> Task<Void, Never> {
        Task {
            try? await Task.sleep(for: delay)
            signal.yield(value)
        }
    }

    func willSync(on node: SimNode) {
        shared.noteSync(nodeID: node.nodeID)
    }

    /// Loss, latency and the like are not applied over TCP.
    func setFaults(_ faults: LinkFaults, watches: [SimNode]) {}

    func isPartitioned(_ watch: SimNode) -> Bool { shared.isPartitioned(watch.name) }
    func pairingEpoch(of watch: SimNode) -> String { secret(watch.name).epoch }

    func setPartitioned(_ partitioned: Bool, watches: [SimNode]) async {
        for watch in watches {
            shared.setPartitioned(watch.name, partitioned)
            if partitioned { await shared.closeConnections(of: watch.name) }
        }
    }

    func crash(_ node: SimNode) async {
        await stop(node, crash: true)
    }

    func powerFailed(_ node: SimNode) async {
        await stop(node, crash: true)
    }

    func restart(_ node: SimNode) async throws {
        try await start(node)
    }

    func willReplace(_ watch: SimNode) async {
        await stop(watch, crash: true)
        await stop(state.phone, crash: false)
    }

    func didReplace(_ watch: SimNode) async throws {
        secrets[watch.name] = PairingSecret.generate()
        // Without a session record, the re-baseline is taken to happen at the re-pair.
        state.model.recordRebaseline(nodeID: state.phone.nodeID)
        // A phone that is down (crashed, or its power cut) stays down until its `restart`.
        if state.phone.isUp { try await start(state.phone) }
        try await start(watch)
        watch.clock.setSkew(watch.skewMs)
    }

    /// Waits until the phone has a session with each of `watches`, then until
    /// the phone and those watches are idle at the same time. A power cut
    /// firing on one of them meanwhile ends the wait (false).
    func settle(limitMs: Int64, watches: [SimNode]) async -> Bool {
        guard state.phone.isUp, watches.allSatisfy({ $0.isUp && !shared.isPartitioned($0.name) }),
              let phone = peers[.phone] else { return false }
        let involved = [state.phone] + watches
        let slice: Duration = .seconds(5)
        let deadline = ContinuousClock.now + Self.idleTimeout
        while ContinuousClock.now < deadline {
            if involved.contains(where: \.powerFailed) { return false }
            // The node ids the watches' stores name now (a copy names the one
            // it was copied with until its phone refuses it and it takes its own).
            let wanted = Set(watches.map { $0.store?.nodeID ?? $0.nodeID })
            guard wanted.isSubset(of: Set(phone.connectedPeers)) else {
                try? await Task.sleep(for: .milliseconds(10))
                continue
            }
            do {
                try await phone.waitUntilIdle(timeout: slice)
                for watch in watches { try await peers[watch.name]?.waitUntilIdle(timeout: slice) }
                // What one watch sent, the phone forwards to the others.
                try await phone.waitUntilIdle(timeout: slice)
                for watch in watches { try await peers[watch.name]?.waitUntilIdle(timeout: .milliseconds(1)) }
                try await phone.waitUntilIdle(timeout: .milliseconds(1))
                return true
            } catch {
                continue
            }
        }
        unsettled = await whatKeepsBusy(watches)
        return false
    }

    /// What the last settle that timed out found still busy (for the report).
    private var unsettled = ""

    /// Each involved peer's sessions that are not idle, and the watches not connected.
    private func whatKeepsBusy(_ watches: [SimNode]) async -> String {
        var busy: [String] = []
        if let phone = peers[.phone] {
            let connected = Set(phone.connectedPeers)
            let named = { (nodes: [UInt32]) in nodes.isEmpty ? "none" : nodes.map { String($0, radix: 16) }.joined(separator: ", ") }
            for watch in watches where !connected.contains(watch.store?.nodeID ?? watch.nodeID) {
                let id = watch.store?.nodeID ?? watch.nodeID
                let ends = peers[watch.name].map { "; its sessions: \(named($0.connectedPeers))" } ?? ""
                busy.append("\(watch.name.rawValue) (\(String(id, radix: 16))) not connected to the phone (the phone's sessions: \(named(phone.connectedPeers))\(ends))")
            }
        }
        for node in [state.phone] + watches {
            guard let peer = peers[node.name] else { continue }
            let blockers = await peer.idleBlockers()
            if !blockers.isEmpty { busy.append("\(node.name.rawValue): " + blockers.joined(separator: " | ")) }
        }
        return busy.joined(separator: "; ")
    }

    func describeLimit(ms: Int64) -> String { "\(Self.idleTimeout)" + (unsettled.isEmpty ? "" : " (\(unsettled))") }

    func unsettledAtEnd(limitMs: Int64) -> String {
        "did not go idle within \(Self.idleTimeout) after the last step" + (unsettled.isEmpty ? "" : " (\(unsettled))")
    }

    func observeSentFrames() {
        for sent in shared.drainSent() {
            state.checker.observe(sent.frame, from: sent.role, senderID: sent.nodeID, receiverID: sent.receiver.nodeID,
                                  receiverApp: sent.receiver.registry, model: state.model, at: 0, syncsVisible: sent.syncsVisible)
        }
    }

    func didRename(_ node: SimNode, from old: UInt32) {
        shared.renamed(node.name, from: old, to: node.nodeID)
    }

    func stop() async {
        for watch in state.watches { await stop(watch, crash: false) }
        await stop(state.phone, crash: false)
    }

    /// The last step's time: steps run as fast as they can.
    var elapsedMs: Int64 { state.scenario.timeline.last?.at ?? 0 }

    var sessions: Int { state.phone.counters.sessions }

    var sessionFailures: Int { 0 }

    func traffic(of node: SimNode) -> LinkTraffic {
        let s = shared.statistics(for: node.name)
        return LinkTraffic(bytesSent: s.bytesSent, payloadBytesSent: s.payloadBytesSent, framesSent: s.framesSent)
    }

    // MARK: peers

    /// Opens the node's store and starts its peer (the phone listens, a watch dials).
    func start(_ node: SimNode) async throws {
        if !node.isUp { try node.open(durableAcknowledgements: state.options.durableAcknowledgements) }
        guard let store = node.store else { return }
        let link = self.shared
        let nodeID = node.nodeID
        link.setApp(TCPLinkState.App(nodeID: nodeID, registry: node.registry), of: node.name)
        if node.role == .phone {
            let pairings = state.watches.map { secret($0.name) }
            let watchOfEpoch = Dictionary(uniqueKeysWithValues: state.watches.map { (secret($0.name).epoch, $0.name) })
            let peer = SyncPeer(store: store, configuration: replication(of: node, epoch: pairings[0].epoch))
            peers[.phone] = peer
            let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: try TCPConfiguration(secrets: pairings))
            self.listener = listener
            link.port = listener.port
            tasks[.phone] = Task {
                await withTaskGroup(of: Void.self) { group in
                    for await connection in listener.connections {
                        guard let watch = connection.pairingEpoch.flatMap({ watchOfEpoch[$0] }) else {
                            await connection.close()
                            continue
                        }
                        // The watch set its app before it dialed.
                        guard let receiver = link.app(of: watch) else {
                            await connection.close()
                            continue
                        }
                        let end = TCPLinkState.End(watch: watch, atPhone: true)
                        let recording = RecordingConnection(base: connection, role: .phone, sender: .phone, nodeID: nodeID, receiver: receiver,
                                                            link: link)
                        link.setConnection(end, recording)
                        // Checked after registering: `stop` and `partition` set their flag before closing
                        // the registered connections, so one of the two closes this connection.
                        if Task.isCancelled || link.isPartitioned(watch) {
                            await connection.close()
                            if Task.isCancelled { break } else { continue }
                        }
                        group.addTask {
                            await peer.run(over: recording)
                            link.add(connection.statistics, for: .phone)
                        }
                    }
                }
            }
        } else {
            let watch = node.name
            let configuration = TCPConfiguration(secret: secret(watch))
            let peer = SyncPeer(store: store, configuration: replication(of: node, epoch: secret(watch).epoch))
            peers[watch] = peer
            let end = TCPLinkState.End(watch: watch, atPhone: false)
            tasks[watch] = Task {
                // The package's one reconnect loop, with the simulator's short delays; a watch
                // that is partitioned (or whose phone is down) waits inside its dial.
                let policy = ReconnectPolicy(initialDelay: .milliseconds(20), maxDelay: .milliseconds(200), jitter: 0,
                                             resetAfter: .milliseconds(200))
                let dialer = ReconnectingDialer(policy: policy, seed: 0) {
                    while true {
                        if !link.isPartitioned(watch), let port = link.port {
                            return try await TCPTransport.connect(host: "127.0.0.1", port: port, configuration: configuration)
                        }
                        try await Task.sleep(for: .milliseconds(20))
                    }
                }
                for await connection in dialer {
                    // The phone set its app before it listened.
                    guard let receiver = link.app(of: .phone) else {
                        await connection.close()
                        continue
                    }
                    let recording = RecordingConnection(base: connection, role: .watch, sender: watch, nodeID: nodeID, receiver: receiver, link: link)
                    link.setConnection(end, recording)
                    if Task.isCancelled || link.isPartitioned(watch) {
                        await connection.close()
                    } else {
                        await peer.run(over: recording)
                    }
                    link.setConnection(end, nil)
                    link.add(connection.statistics, for: watch)
                }
            }
        }
    }

    /// Stops the node's peer and closes its connections; the store is dropped if `crash`.
    func stop(_ node: SimNode, crash: Bool) async {
        let name = node.name
        tasks[name]?.cancel()
        if node.role == .phone {
            if let listener {
                await listener.close()
                self.listener = nil
                shared.port = nil
            }
            await shared.closeConnections { $0.atPhone }
        } else {
            await shared.closeConnections(of: name)
        }
        await tasks[name]?.value
        tasks[name] = nil
        peers[name] = nil
        if crash { node.crash() }
    }
}
