import Foundation
import Logging
import SyncEngine
import SyncTransport

/// One simulated device: its store file, clock, and (while up) its open
/// store and the endpoint of the current session.
final class SimNode {
    let role: DeviceRole
    let clock: ManualClock
    private(set) var nodeID: UInt32
    private(set) var path: String
    let keyPath: String
    var store: SyncStore?
    var endpoint: ReplicationEndpoint?
    /// Counters of store objects dropped by crashes (they live in memory).
    private(set) var pastCounters = SyncCounters()
    var refusedWrites = 0
    var skewMs: Int64 = 0

    init(role: DeviceRole, nodeID: UInt32, folder: String, wallStart: Int64) {
        self.role = role
        self.nodeID = nodeID
        self.path = "\(folder)/\(role.rawValue)-\(String(nodeID, radix: 16)).sqlite"
        self.keyPath = "\(folder)/\(role.rawValue).key"
        self.clock = ManualClock(now: wallStart)
    }

    var isUp: Bool { store != nil }

    /// Opens (or reopens) the store file with the same options every time.
    func open(registry: KeyRegistry) throws {
        var options = StoreOptions(clock: clock)
        options.nodeID = nodeID
        options.externalChangePollInterval = nil   // one process per file here; no timer in a deterministic run
        options.logger = Logger(label: "syncsim.\(role)", factory: { _ in SwiftLogNoOpLogHandler() })
        if registry.descriptors.contains(where: { $0.security == .encrypted }) {
            options.encryption = .keyFile(path: keyPath)
        }
        StoreTemplate.install(at: path)
        store = try SyncStore(path: path, role: role, registry: registry, options: options)
    }

    /// Stops without closing: the objects are dropped, the file stays.
    func crash() {
        if let store { add(store.syncCounters) }
        store = nil
        endpoint = nil
    }

    /// Replaces this node with a new device: a new file and node id.
    func replace(nodeID: UInt32, folder: String) {
        crash()
        self.nodeID = nodeID
        path = "\(folder)/\(role.rawValue)-\(String(nodeID, radix: 16)).sqlite"
    }

    /// Counters since the run started, across restarts.
    var counters: SyncCounters {
        var total = pastCounters
        if let store { SimNode.add(store.syncCounters, to: &total) }
        return total
    }

    private func add(_ c: SyncCounters) { SimNode.add(c, to: &pastCounters) }

    private static func add(_ c: SyncCounters, to t: inout SyncCounters) {
        t.entriesSent += c.entriesSent
        t.entriesReceived += c.entriesReceived
        t.entriesIgnored += c.entriesIgnored
        t.entriesRejected += c.entriesRejected
        t.bytesSent += c.bytesSent
        t.bytesReceived += c.bytesReceived
        t.batchesSent += c.batchesSent
        t.batchesReceived += c.batchesReceived
        t.chunksSent += c.chunksSent
        t.chunksReceived += c.chunksReceived
        t.conflicts += c.conflicts
        t.deferred += c.deferred
        t.sessions += c.sessions
    }
}
