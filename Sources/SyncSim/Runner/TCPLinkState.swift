import Synchronization
import SyncEngine
import SyncTransport

/// State shared between the TCP runner and its node tasks: the partition
/// flag, the phone's port, the open connections, and every frame sent.
final class TCPLinkState: Sendable {
    struct Sent: Sendable {
        var role: DeviceRole
        var nodeID: UInt32
        var frame: Frame
        /// Syncs of the sender requested before the frame was sent.
        var syncsVisible: Int
    }

    private struct State {
        var partitioned = false
        var port: Int?
        var connections: [DeviceRole: any FrameConnection] = [:]
        var sent: [Sent] = []
        var syncs: [UInt32: Int] = [:]
        var statistics: [DeviceRole: ConnectionStatistics] = [.phone: .init(), .watch: .init()]
    }

    private let state = Mutex(State())

    var partitioned: Bool {
        get { state.withLock { $0.partitioned } }
        set { state.withLock { $0.partitioned = newValue } }
    }

    var port: Int? {
        get { state.withLock { $0.port } }
        set { state.withLock { $0.port = newValue } }
    }

    func setConnection(_ role: DeviceRole, _ connection: (any FrameConnection)?) {
        state.withLock { $0.connections[role] = connection }
    }

    /// Closes the open connections (of one role, or both).
    func closeConnections(_ roles: [DeviceRole] = DeviceRole.allCases) async {
        let open = state.withLock { s in roles.compactMap { s.connections.removeValue(forKey: $0) } }
        for connection in open { await connection.close() }
    }

    /// Counts a sync before it is requested, so frames it releases see it.
    func noteSync(nodeID: UInt32) {
        state.withLock { $0.syncs[nodeID, default: 0] += 1 }
    }

    func record(_ frame: Frame, role: DeviceRole, nodeID: UInt32) {
        state.withLock { $0.sent.append(Sent(role: role, nodeID: nodeID, frame: frame, syncsVisible: $0.syncs[nodeID] ?? 0)) }
    }

    /// The frames recorded since the last call.
    func drainSent() -> [Sent] {
        state.withLock { s in
            defer { s.sent.removeAll() }
            return s.sent
        }
    }

    func add(_ stats: ConnectionStatistics, for role: DeviceRole) {
        state.withLock { s in
            var t = s.statistics[role] ?? .init()
            t.framesSent += stats.framesSent
            t.framesReceived += stats.framesReceived
            t.bytesSent += stats.bytesSent
            t.bytesReceived += stats.bytesReceived
            t.payloadBytesSent += stats.payloadBytesSent
            s.statistics[role] = t
        }
    }

    func statistics(for role: DeviceRole) -> ConnectionStatistics {
        state.withLock { $0.statistics[role] ?? .init() }
    }
}

/// A connection that records every frame its node sends, for the checker.
struct RecordingConnection: FrameConnection {
    let base: any FrameConnection
    let role: DeviceRole
    let nodeID: UInt32
    let link: TCPLinkState

    var inbound: AsyncThrowingStream<Frame, any Error> { base.inbound }

    func send(_ frame: Frame) async throws {
        link.record(frame, role: role, nodeID: nodeID)
        try await base.send(frame)
    }

    func close() async { await base.close() }
    var peerDescription: String { base.peerDescription }
    var statistics: ConnectionStatistics { base.statistics }
    var deliversEveryFrame: Bool { base.deliversEveryFrame }
}
