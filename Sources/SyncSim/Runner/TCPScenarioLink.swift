import Foundation
import SyncEngine
import SyncTransport

/// The phone and the watch over real TCP sockets on 127.0.0.1: the phone
/// listens (port 0), the watch dials, each node runs a `SyncPeer`. Steps run
/// in order as fast as they can; their `at` sets the nodes' wall clocks, so
/// versions follow the scenario's times. Approximations: loss, latency,
/// duplication and reordering are not applied (TCP delivers in order); a
/// partition closes the connection and the watch does not redial until
/// `heal`; a crash closes the node's connection and drops its objects.
/// Frames are recorded as they are sent and checked at the next check.
/// Reports are not byte-identical between runs.
final class TCPScenarioLink: ScenarioLink {
    static let transport = SimTransport.tcp
    static let folderPrefix = "syncsim-tcp-"
    static let idleTimeout: Duration = .seconds(30)

    let state: RunState
    let shared = TCPLinkState()
    var secret = PairingSecret.generate()
    var peers: [DeviceRole: SyncPeer] = [:]
    var tasks: [DeviceRole: Task<Void, Never>] = [:]
    var listener: TCPListener?

    init(state: RunState) {
        self.state = state
    }

    var configuration: TCPConfiguration { TCPConfiguration(secret: secret) }

    var replication: ReplicationConfiguration {
        var config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        config.testingFaults = state.options.testingFaults
        return config
    }

    func start() async throws {
        for node in state.nodes { try await start(node.role) }
    }

    func advance(to at: Int64) async {
        state.setClocks(at)
    }

    func localChange(on node: SimNode) {}

    func willSync(on node: SimNode) {
        shared.noteSync(nodeID: node.nodeID)
    }

    /// Loss, latency and the like are not applied over TCP.
    func setFaults(_ faults: LinkFaults) {}

    var isPartitioned: Bool { shared.partitioned }

    func setPartitioned(_ partitioned: Bool) async {
        shared.partitioned = partitioned
        if partitioned { await shared.closeConnections() }
    }

    func crash(_ node: SimNode) async {
        await stop(node.role, crash: true)
    }

    func restart(_ node: SimNode) async throws {
        try await start(node.role)
    }

    func willReplace(_ watch: SimNode) async {
        await stop(.watch, crash: true)
        await stop(.phone, crash: false)
    }

    func didReplace(_ watch: SimNode) async throws {
        secret = PairingSecret.generate()
        // Without a session record, the re-baseline is taken to happen at the re-pair.
        state.model.recordRebaseline(nodeID: state.phone.nodeID)
        try await start(.phone)
        try await start(.watch)
        watch.clock.setSkew(watch.skewMs)
    }

    /// Waits until both peers are idle at the same time.
    func settle(limitMs: Int64) async -> Bool {
        guard state.nodes.allSatisfy(\.isUp), !shared.partitioned else { return false }
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

    func describeLimit(ms: Int64) -> String { "\(Self.idleTimeout)" }

    func unsettledAtEnd(limitMs: Int64) -> String {
        "did not go idle within \(Self.idleTimeout) after the last step"
    }

    func observeSentFrames() {
        for sent in shared.drainSent() {
            state.checker.observe(sent.frame, from: sent.role, senderID: sent.nodeID, model: state.model, at: 0, syncsVisible: sent.syncsVisible)
        }
    }

    func stop() async {
        await stop(.watch, crash: false)
        await stop(.phone, crash: false)
    }

    /// The last step's time: steps run as fast as they can.
    var elapsedMs: Int64 { state.scenario.timeline.last?.at ?? 0 }

    var sessions: Int { state.phone.counters.sessions }

    var sessionFailures: Int { 0 }

    func traffic(of node: SimNode) -> LinkTraffic {
        let s = shared.statistics(for: node.role)
        return LinkTraffic(bytesSent: s.bytesSent, payloadBytesSent: s.payloadBytesSent, framesSent: s.framesSent)
    }

    // MARK: peers

    /// Opens the node's store and starts its peer (the phone listens, the watch dials).
    func start(_ role: DeviceRole) async throws {
        let node = state.node(role)
        if !node.isUp { try node.open(registry: state.registry) }
        guard let store = node.store else { return }
        let peer = SyncPeer(store: store, configuration: replication)
        peers[role] = peer
        let link = self.shared
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
            shared.port = nil
        }
        await shared.closeConnections()
        await tasks[role]?.value
        tasks[role] = nil
        peers[role] = nil
        if crash { state.node(role).crash() }
    }
}
