import SyncEngine
import SyncTransport

/// The phone and the watch over a `SimulatedLink` in virtual time: a
/// `ReplicationEndpoint` per node per session; deliveries, ticks and
/// reconnects processed in time order; every frame checked as it is sent.
/// The same scenario and seed give the same run.
final class SimulatedScenarioLink: ScenarioLink {
    static let transport = SimTransport.sim
    static let folderPrefix = "syncsim-"

    let state: RunState
    var link: SimulatedLink
    var now: Int64 = 0
    var nextTick: Int64 = 0
    var reconnectAt: Int64?
    var epoch = 1
    private(set) var sessions = 0
    private(set) var sessionFailures = 0
    /// Set by `replaceWatch`: the phone re-baselines when the first session with the new watch is established.
    var awaitingRebaseline = false

    init(state: RunState) {
        self.state = state
        link = SimulatedLink(seed: state.seed, faults: state.scenario.faults)
    }

    /// The end of the link a node is on.
    func end(_ node: SimNode) -> LinkEnd { node.role == .phone ? .a : .b }

    func start() async throws {
        for node in state.nodes { try node.open(registry: state.registry) }
        startSession()
    }

    func advance(to at: Int64) async {
        _ = runUntil(limit: at, stop: nil)
        now = max(now, at)
        state.setClocks(now)
    }

    func localChange(on node: SimNode) {
        if let endpoint = node.endpoint { send(endpoint.pump(now: now), from: node) }
    }

    func willSync(on node: SimNode) {}

    func setFaults(_ faults: LinkFaults) {
        let partitioned = link.faults.partitioned
        link.faults = faults
        link.faults.partitioned = partitioned
    }

    var isPartitioned: Bool { link.faults.partitioned }

    func setPartitioned(_ partitioned: Bool) async {
        link.faults.partitioned = partitioned
    }

    func crash(_ node: SimNode) async {
        node.crash()
        startSession()
    }

    func restart(_ node: SimNode) async throws {
        try node.open(registry: state.registry)
        startSession()
    }

    func willReplace(_ watch: SimNode) async {}

    func didReplace(_ watch: SimNode) async throws {
        epoch += 1
        awaitingRebaseline = true
        try watch.open(registry: state.registry)
        watch.clock.setSkew(watch.skewMs)
        startSession()
    }

    func settle(limitMs: Int64) async -> Bool {
        runUntil(limit: now + limitMs, stop: { self.isQuiescent })
    }

    func describeLimit(ms: Int64) -> String { "\(ms) ms" }

    func unsettledAtEnd(limitMs: Int64) -> String {
        "did not converge within \(limitMs) ms of virtual time after the last step"
    }

    func observeSentFrames() {}

    func stop() async {}

    var elapsedMs: Int64 { now }

    func traffic(of node: SimNode) -> LinkTraffic {
        let s = link.statistics(for: end(node))
        return LinkTraffic(bytesSent: s.bytesSent, payloadBytesSent: s.payloadBytesSent, framesSent: s.framesSent, framesDropped: s.framesDropped)
    }

    // MARK: sessions

    var configuration: ReplicationConfiguration {
        var config = ReplicationConfiguration(pairingEpoch: "syncsim-epoch-\(epoch)")
        config.testingFaults = state.options.testingFaults
        return config
    }

    /// Ends any current session and starts a new one when both nodes are up.
    func startSession() {
        let phone = state.phone, watch = state.watch
        link.dropInFlight()
        phone.endpoint?.connectionLost()
        watch.endpoint?.connectionLost()
        phone.endpoint = nil
        watch.endpoint = nil
        reconnectAt = nil
        guard let ps = phone.store, let ws = watch.store else { return }
        sessions += 1
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
            state.checker.observe(frame, from: node.role, senderID: node.nodeID, model: state.model, at: now)
            link.send(frame, from: end(node), at: now)
        }
        if awaitingRebaseline, state.phone.endpoint?.isEstablished == true {
            awaitingRebaseline = false
            state.model.recordRebaseline(nodeID: state.phone.nodeID)
        }
        noteFailures()
    }

    /// A failed session is replaced by a new one after a short pause (a reconnect).
    func noteFailures() {
        guard reconnectAt == nil else { return }
        if state.nodes.contains(where: { $0.endpoint?.failure != nil }) {
            sessionFailures += 1
            reconnectAt = now + 500
        }
    }

    var isQuiescent: Bool {
        guard link.inFlightCount == 0, !link.faults.partitioned else { return false }
        return state.nodes.allSatisfy { $0.endpoint?.isIdle == true }
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
                state.setClocks(now)
                return false
            }
            now = max(now, next)
            state.setClocks(now)
            if let d = link.nextDeliveryTime, d <= now {
                for (to, frame) in link.deliverDue(at: now) {
                    let target = to == .a ? state.phone : state.watch
                    guard let endpoint = target.endpoint else { continue }
                    send(endpoint.receive(frame, now: now), from: target)
                }
            }
            if let r = reconnectAt, r <= now {
                startSession()
            }
            if nextTick <= now {
                nextTick = now + state.options.tickMs
                for node in state.nodes {
                    if let endpoint = node.endpoint { send(endpoint.tick(now: now), from: node) }
                }
                if let stop, stop() { return true }
            }
        }
    }
}
