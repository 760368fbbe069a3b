import Foundation
@_spi(Testing) import SyncEngine
import SyncTransport

/// The transport a scenario runs over (`syncsim run --transport`).
public enum SimTransport: String, CaseIterable, Sendable {
    /// `SimulatedLink` in virtual time: reproducible from the seed.
    case sim
    /// Real sockets on 127.0.0.1, a `SyncPeer` per node.
    case tcp
}

/// What a runner and its link share: the scenario, the nodes (a phone and
/// its watches), the model of what the apps did, and the invariant checker.
final class RunState {
    let scenario: Scenario
    let options: RunOptions
    let seed: UInt64
    /// The registry of the scenario's `keys` (the current app's).
    let registry: KeyRegistry
    /// The registries of `olderApps`.
    let olderRegistries: [ScenarioNode: KeyRegistry]
    /// The folder of the run's store files (removed by the runner).
    let folder: String
    /// The phone first, then its watches (`replaceWatch` replaces one in
    /// place); each watch has its own link to the phone.
    let nodes: [SimNode]
    var model = WriteModel()
    var checker: InvariantChecker
    /// The crash VFS of each node a `powerCut` or `fillDisk` step names (released at the end).
    private(set) var crashVFSes: [CrashVFS] = []

    /// Fixed node ids, so runs are reproducible.
    static let phoneNodeID: UInt32 = 0x1001
    static let watchNodeID: UInt32 = 0x2002
    /// The node ids of the first `watch2` and `watch3`.
    static let moreWatchNodeIDs: [UInt32] = [0x2003, 0x2004]
    /// The node id of the first replacement watch; each further one counts up.
    static let firstReplacementWatchID: UInt32 = 0x3003
    /// The nodes' wall clock at virtual time 0.
    static let wallStart: Int64 = 1_700_000_000_000

    init(scenario: Scenario, options: RunOptions, folderPrefix: String) throws {
        self.scenario = scenario
        self.options = options
        seed = options.seed ?? scenario.seed
        registry = try KeyRegistry(descriptors: scenario.keys)
        olderRegistries = try scenario.olderApps.mapValues { try KeyRegistry(descriptors: $0) }
        let registry = self.registry, olderRegistries = self.olderRegistries
        folder = (options.temporaryDirectory as NSString).appendingPathComponent(folderPrefix + UUID().uuidString)
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        } catch {
            // Not Foundation's dump: what could not be made, where the folder comes from, and why.
            throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure,
                                 "cannot create a folder for the run's stores in \(options.temporaryDirectory) ($SYNCSIM_TMPDIR, else /dev/shm, else the system's temporary folder): \(CommandFailure.reason(error))")
        }
        let ids = [RunState.phoneNodeID, RunState.watchNodeID] + RunState.moreWatchNodeIDs
        let folder = self.folder
        let cut = Set(scenario.timeline.compactMap { step -> ScenarioNode? in
            switch step.action {
            case .powerCut(let node, _), .fillDisk(let node): node
            default: nil
            }
        })
        var vfses: [CrashVFS] = []
        nodes = try scenario.nodes.enumerated().map { index, name in
            let node = SimNode(name: name, nodeID: ids[index], folder: folder, wallStart: RunState.wallStart,
                               registry: olderRegistries[name] ?? registry)
            node.runsOlderApp = olderRegistries[name] != nil
            node.highestProtocol = scenario.olderProtocols[name]
            node.tombstoneRetentionMs = scenario.tombstoneRetentionMs
            node.peerHorizonMs = scenario.peerHorizonMs
            // With a backup restored, every device marks its store as an app that wants copies caught does.
            node.marksDevice = scenario.restoresBackups
            if cut.contains(name) {
                node.crashVFS = try CrashVFSPool.acquire()
                vfses.append(node.crashVFS!)
            }
            return node
        }
        crashVFSes = vfses
        checker = InvariantChecker(registry: registry, declaredDifferently: scenario.keysDeclaredDifferently)
        for node in nodes where node.runsOlderApp { checker.olderApps[node.nodeID] = node.registry }
        noteSessionProtocols()
    }

    deinit {
        for vfs in crashVFSes { CrashVFSPool.release(vfs) }
    }

    var phone: SimNode { nodes[0] }
    /// The watches, in order.
    var watches: ArraySlice<SimNode> { nodes.dropFirst() }

    /// The node a step names.
    func node(_ name: ScenarioNode) -> SimNode { nodes[name.watchNumber] }

    /// The watches a step about links names: `name`, or every watch when nil.
    func watches(_ name: ScenarioNode?) -> [SimNode] { name.map { [node($0)] } ?? Array(watches) }

    /// `node` runs the current app from now on (`updateApp`, or a new watch in its place).
    func updateApp(of node: SimNode) {
        checker.olderApps[node.nodeID] = nil
        checker.purgedBeforeUpdate[node.nodeID] = node.purgedThrough
        model.recordAppUpdate(nodeID: node.nodeID)
        node.registry = registry
        node.runsOlderApp = false
        node.highestProtocol = nil
        noteSessionProtocols()
    }

    /// Tells each watch's `no-flicker` record whether it syncs in protocol 1.
    private func noteSessionProtocols() {
        let phoneSpeaks = phone.highestProtocol ?? Scenario.currentProtocol
        for watch in watches { watch.removals.removesAtOnce = min(phoneSpeaks, watch.highestProtocol ?? Scenario.currentProtocol) < 2 }
    }

    /// The replication settings of `node`'s app for a pairing: the session
    /// protocols it speaks (`olderProtocols`) and the run's testing faults.
    func replication(of node: SimNode, epoch: String) -> ReplicationConfiguration {
        var config = ReplicationConfiguration(pairingEpoch: epoch)
        config.testingFaults = options.testingFaults
        if let highest = node.highestProtocol { config.protocolRange = 1...highest }
        return config
    }

    /// Sets every node's wall clock to virtual time `at` (each adds its own skew).
    func setClocks(_ at: Int64) {
        for node in nodes { node.clock.set(RunState.wallStart + at) }
    }
}

/// One node's traffic, for the report.
struct LinkTraffic {
    var bytesSent = 0
    var payloadBytesSent = 0
    var framesSent = 0
    var framesDropped = 0
}

/// How frames move between the nodes of a run, and what that means for
/// time, sessions, crashes and faults. `ScenarioRunner` owns the timeline,
/// the model, the checker and the steps; a link does only what differs
/// between virtual time (`SimulatedScenarioLink`) and real sockets (`TCPScenarioLink`).
protocol ScenarioLink: AnyObject {
    static var transport: SimTransport { get }
    /// The run folder's name starts with this.
    static var folderPrefix: String { get }

    init(state: RunState)

    /// Opens every node's store and connects them.
    func start() async throws
    /// Lets time run up to the step at `at` and sets the nodes' clocks to it.
    func advance(to at: Int64) async
    /// After a local write or sync request on `node` (the simulated link pumps its endpoint).
    func localChange(on node: SimNode)
    /// Before a sync request on `node` (frames it releases must see it).
    func willSync(on node: SimNode)
    /// Asks the peers `node` has a session with for their manual changes
    /// (`requestManualChanges`); the model counts a peer's accepted answer as a
    /// sync on that peer.
    func requestManual(on node: SimNode) async
    /// Replaces the faults of the links of `watches`; a partition stays as it is.
    func setFaults(_ faults: LinkFaults, watches: [SimNode])
    /// The pairing epoch of the watch's pairing with the phone (its sessions' and its mailbox's).
    func pairingEpoch(of watch: SimNode) -> String
    /// Whether the watch's link to the phone is partitioned.
    func isPartitioned(_ watch: SimNode) -> Bool
    func setPartitioned(_ partitioned: Bool, watches: [SimNode]) async
    /// Stops `node` without closing its store; its file stays.
    func crash(_ node: SimNode) async
    /// Reopens `node` from its file and connects it again.
    func restart(_ node: SimNode) async throws
    /// The node's power failed (an armed cut fired): drop it as `crash` does.
    /// The runner calls it; the simulated link also as soon as the cut fires.
    func powerFailed(_ node: SimNode) async
    /// Before the watch is replaced by a new device.
    func willReplace(_ watch: SimNode) async
    /// After `watch` was given its new file and node id: pairs it with the phone.
    func didReplace(_ watch: SimNode) async throws
    /// Runs until the phone and the watches of `watches` (each up with its
    /// link healed) are idle and nothing is in flight between them; false if
    /// that did not happen within `limitMs` (virtual; the TCP link has its own timeout).
    func settle(limitMs: Int64, watches: [SimNode]) async -> Bool
    /// `limitMs` as the checkpoint violation says it.
    func describeLimit(ms: Int64) -> String
    /// The convergence violation when the nodes did not settle after the last step.
    func unsettledAtEnd(limitMs: Int64) -> String
    /// Hands the frames sent since the last call to the checker (the simulated link checks each as it is sent).
    func observeSentFrames()
    /// The watch the run knew as `old` is known by `node.nodeID` from now on
    /// (`ScenarioRunner.followRenewals`): the frames it sends carry that one.
    func didRename(_ node: SimNode, from old: UInt32)
    /// Stops every peer (the stores stay open, for the report).
    func stop() async
    /// The run's time at the end, for the report.
    var elapsedMs: Int64 { get }
    var sessions: Int { get }
    var sessionFailures: Int { get }
    func traffic(of node: SimNode) -> LinkTraffic
}
