import Synchronization
import SyncEngine
import SyncTransport

/// State shared between the TCP runner and its node tasks: the partitioned
/// watches, the phone's port, the open connections, and every frame sent.
final class TCPLinkState: Sendable {
    struct Sent: Sendable {
        var role: DeviceRole
        var nodeID: UInt32
        var frame: Frame
        /// Syncs of the sender requested before the frame was sent.
        var syncsVisible: Int
        /// The node at the other end and the app it ran when the connection opened.
        var receiver: App
    }

    /// A running node as the other end of a connection sees it: its id and
    /// its app's key declarations. An app changes only while its node is
    /// down, so it stays what it was for the whole of a connection.
    struct App: Sendable {
        var nodeID: UInt32
        var registry: KeyRegistry
    }

    /// One end of a watch's connection: the watch's, or the phone's end for that watch.
    struct End: Hashable, Sendable {
        var watch: ScenarioNode
        var atPhone: Bool
    }

    private struct State {
        var partitioned: Set<ScenarioNode> = []
        var port: Int?
        var connections: [End: any FrameConnection] = [:]
        var sent: [Sent] = []
        var syncs: [UInt32: Int] = [:]
        /// Nodes that may accept a manual request now.
        var manualAnswerers: Set<ScenarioNode> = []
        /// Nodes that accepted one since the step asked.
        var manualAccepted: Set<ScenarioNode> = []
        var statistics: [ScenarioNode: ConnectionStatistics] = [:]
        var apps: [ScenarioNode: App] = [:]
    }

    private let state = Mutex(State())

    func isPartitioned(_ watch: ScenarioNode) -> Bool {
        state.withLock { $0.partitioned.contains(watch) }
    }

    func setPartitioned(_ watch: ScenarioNode, _ partitioned: Bool) {
        state.withLock { s in
            if partitioned { s.partitioned.insert(watch) } else { s.partitioned.remove(watch) }
        }
    }

    var port: Int? {
        get { state.withLock { $0.port } }
        set { state.withLock { $0.port = newValue } }
    }

    func setConnection(_ end: End, _ connection: (any FrameConnection)?) {
        state.withLock { $0.connections[end] = connection }
    }

    /// Closes the open connections of the ends `which` selects.
    func closeConnections(where which: (End) -> Bool) async {
        let open = state.withLock { s in
            let ends = s.connections.keys.filter(which)
            return ends.compactMap { s.connections.removeValue(forKey: $0) }
        }
        for connection in open { await connection.close() }
    }

    /// Closes both ends of the watch's connection.
    func closeConnections(of watch: ScenarioNode) async {
        await closeConnections { $0.watch == watch }
    }

    /// Lets `nodes` accept a manual request (a `requestManual` step waits for them).
    func openManualAnswers(_ nodes: [ScenarioNode]) {
        state.withLock { s in
            s.manualAnswerers = Set(nodes)
            s.manualAccepted = []
        }
    }

    /// No node accepts a manual request from now on; returns those that accepted one since `openManualAnswers`.
    func closeManualAnswers() -> Set<ScenarioNode> {
        state.withLock { s in
            s.manualAnswerers = []
            return s.manualAccepted
        }
    }

    /// Whether `node` accepts the manual request it got (once per step); if
    /// so, what it sends from now on comes after a sync.
    func answersManualRequest(by node: ScenarioNode) -> Bool {
        state.withLock { s in
            guard s.manualAnswerers.remove(node) != nil else { return false }
            s.manualAccepted.insert(node)
            if let nodeID = s.apps[node]?.nodeID { s.syncs[nodeID, default: 0] += 1 }
            return true
        }
    }

    /// Counts a sync before it is requested, so frames it releases see it.
    func noteSync(nodeID: UInt32) {
        state.withLock { $0.syncs[nodeID, default: 0] += 1 }
    }

    /// Notes the app a node starts with (before it listens or dials).
    func setApp(_ app: App, of node: ScenarioNode) {
        state.withLock { $0.apps[node] = app }
    }

    /// The app the node last started with.
    func app(of node: ScenarioNode) -> App? {
        state.withLock { $0.apps[node] }
    }

    /// A watch the run knew as `old` is known as `new` from now on (its phone
    /// refused its node id and it took another): its frames are recorded under
    /// `new`, and the syncs counted for it go with it.
    func renamed(_ node: ScenarioNode, from old: UInt32, to new: UInt32) {
        state.withLock { s in
            s.apps[node]?.nodeID = new
            if let syncs = s.syncs.removeValue(forKey: old) { s.syncs[new, default: 0] += syncs }
        }
    }

    /// Records a frame `sender` sent, under the id the run knows it by now
    /// (`fallback` before it set its app).
    func record(_ frame: Frame, role: DeviceRole, from sender: ScenarioNode, fallback: UInt32, to receiver: App) {
        state.withLock { s in
            let nodeID = s.apps[sender]?.nodeID ?? fallback
            s.sent.append(Sent(role: role, nodeID: nodeID, frame: frame, syncsVisible: s.syncs[nodeID] ?? 0, receiver: receiver))
        }
    }

    /// The frames recorded since the last call.
    func drainSent() -> [Sent] {
        state.withLock { s in
            defer { s.sent.removeAll() }
            return s.sent
        }
    }

    func add(_ stats: ConnectionStatistics, for node: ScenarioNode) {
        state.withLock { s in
            var t = s.statistics[node] ?? .init()
            t.framesSent += stats.framesSent
            t.framesReceived += stats.framesReceived
            t.bytesSent += stats.bytesSent
            t.bytesReceived += stats.bytesReceived
            t.payloadBytesSent += stats.payloadBytesSent
            s.statistics[node] = t
        }
    }

    func statistics(for node: ScenarioNode) -> ConnectionStatistics {
        state.withLock { $0.statistics[node] ?? .init() }
    }
}

/// A connection that records every frame its node sends, for the checker.
struct RecordingConnection: FrameConnection {
    let base: any FrameConnection
    let role: DeviceRole
    /// The sending node, and its id when the connection opened.
    let sender: ScenarioNode
    let nodeID: UInt32
    /// The node at the other end, as it was when the connection opened.
    let receiver: TCPLinkState.App
    let link: TCPLinkState

    var inbound: AsyncThrowingStream<Frame, any Error> { base.inbound }

    func send(_ frame: Frame) async throws {
        link.record(frame, role: role, from: sender, fallback: nodeID, to: receiver)
        try await base.send(frame)
    }

    func close() async { await base.close() }
    var peerDescription: String { base.peerDescription }
    var statistics: ConnectionStatistics { base.statistics }
    var deliversEveryFrame: Bool { base.deliversEveryFrame }
    var pairingEpoch: String? { base.pairingEpoch }
}
