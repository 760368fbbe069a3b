@_spi(Testing) import SyncEngine
import SyncTransport

/// The phone and its watches over one `SimulatedLink` per watch, in virtual
/// time: a `ReplicationEndpoint` per node per session; deliveries, ticks and
/// reconnects processed in time order; every frame checked as it is sent.
/// The same scenario and seed give the same run.
final class SimulatedScenarioLink: ScenarioLink {
    static let transport = SimTransport.sim
    static let folderPrefix = "syncsim-"

    /// One watch's link to the phone and the endpoints of its current session.
    final class Pair {
        let watch: SimNode
        var link: SimulatedLink
        var phoneEndpoint: ReplicationEndpoint?
        var watchEndpoint: ReplicationEndpoint?
        var reconnectAt: Int64?
        /// Counts this watch slot's pairings (`replaceWatch` starts a new one).
        var epoch = 1
        /// Set by `replaceWatch`: the phone re-baselines when the first session with the new watch is established.
        var awaitingRebaseline = false
        /// The node id the phone's endpoint of the current session was established with, once it was.
        var establishedPeer: UInt32?

        init(watch: SimNode, link: SimulatedLink) {
            self.watch = watch
            self.link = link
        }

        var pairingEpoch: String {
            watch.name == .watch ? "syncsim-epoch-\(epoch)" : "syncsim-\(watch.name.rawValue)-epoch-\(epoch)"
        }
    }

    let state: RunState
    let pairs: [Pair]
    var now: Int64 = 0
    var nextTick: Int64 = 0
    private(set) var sessions = 0
    private(set) var sessionFailures = 0

    init(state: RunState) {
        self.state = state
        // The first watch's link draws from the seed itself (so a one-watch run is what it always was).
        pairs = state.watches.map { watch in
            let salt = UInt64(watch.name.watchNumber - 1) &* 0x9E37_79B9_7F4A_7C15
            return Pair(watch: watch, link: SimulatedLink(seed: state.seed ^ salt, faults: state.scenario.faults))
        }
    }

    func pair(_ watch: SimNode) -> Pair { pairs[watch.name.watchNumber - 1] }

    func start() async throws {
        for node in state.nodes { try node.open(durableAcknowledgements: state.options.durableAcknowledgements) }
        for pair in pairs { startSession(pair) }
    }

    func advance(to at: Int64) async {
        _ = runUntil(limit: at, stop: nil)
        now = max(now, at)
        state.setClocks(now)
    }

    func localChange(on node: SimNode) {
        for pair in pairs {
            let endpoint = node.role == .phone ? pair.phoneEndpoint : (pair.watch === node ? pair.watchEndpoint : nil)
            if let endpoint { send(endpoint.pump(now: now), from: node, in: pair) }
        }
        reapPowerCuts()
    }

    func willSync(on node: SimNode) {}

    func requestManual(on node: SimNode) {
        for pair in pairs {
            let endpoint = node.role == .phone ? pair.phoneEndpoint : (pair.watch === node ? pair.watchEndpoint : nil)
            if let endpoint, endpoint.isEstablished { send(endpoint.requestManualChanges(now: now), from: node, in: pair) }
        }
    }

    func setFaults(_ faults: LinkFaults, watches: [SimNode]) {
        for watch in watches {
            let pair = pair(watch)
            let partitioned = pair.link.faults.partitioned
            pair.link.faults = faults
            pair.link.faults.partitioned = partitioned
        }
    }

    func isPartitioned(_ watch: SimNode) -> Bool { pair(watch).link.faults.partitioned }
    func pairingEpoch(of watch: SimNode) -> String { pair(watch).pairingEpoch }

    func setPartitioned(_ partitioned: Bool, watches: [SimNode]) async {
        for watch in watches { pair(watch).link.faults.partitioned = partitioned }
    }

    /// The pairs a node is in: every one for the phone, its own for a watch.
    func pairs(of node: SimNode) -> [Pair] { node.role == .phone ? pairs : [pair(node)] }

    func crash(_ node: SimNode) async {
        crashNow(node)
    }

    func crashNow(_ node: SimNode) {
        node.crash()
        for pair in pairs(of: node) { startSession(pair) }
    }

    func powerFailed(_ node: SimNode) async {
        crashNow(node)
    }

    func restart(_ node: SimNode) async throws {
        try node.open(durableAcknowledgements: state.options.durableAcknowledgements)
        for pair in pairs(of: node) { startSession(pair) }
    }

    func willReplace(_ watch: SimNode) async {}

    func didReplace(_ watch: SimNode) async throws {
        let pair = pair(watch)
        pair.epoch += 1
        pair.awaitingRebaseline = true
        try watch.open(durableAcknowledgements: state.options.durableAcknowledgements)
        watch.clock.setSkew(watch.skewMs)
        startSession(pair)
    }

    func settle(limitMs: Int64, watches: [SimNode]) async -> Bool {
        let settling = watches.map(pair)
        // A node whose power fails meanwhile ends the wait (the runner sees it is down).
        return runUntil(limit: now + limitMs, stop: {
            settling.allSatisfy(self.isQuiescent) || !self.state.phone.isUp || !watches.allSatisfy(\.isUp)
        })
    }

    func describeLimit(ms: Int64) -> String { "\(ms) ms" }

    func unsettledAtEnd(limitMs: Int64) -> String {
        var busy: [String] = []
        for pair in pairs where !isQuiescent(pair) {
            var sides: [String] = []
            if pair.link.inFlightCount > 0 { sides.append("\(pair.link.inFlightCount) frames on the link") }
            for (name, endpoint) in [("phone", pair.phoneEndpoint), (pair.watch.name.rawValue, pair.watchEndpoint)] {
                guard let endpoint else {
                    sides.append("\(name): no session")
                    continue
                }
                let reasons = endpoint.idleBlockers
                if !reasons.isEmpty { sides.append("\(name): " + reasons.joined(separator: "; ")) }
            }
            busy.append("\(pair.watch.name.rawValue)'s link: " + sides.joined(separator: " | "))
        }
        return "did not converge within \(limitMs) ms of virtual time after the last step" + (busy.isEmpty ? "" : " (" + busy.joined(separator: "; ") + ")")
    }

    func observeSentFrames() {}
    func didRename(_ node: SimNode, from old: UInt32) {}  // each frame is checked as it is sent, under the node's id then

    func stop() async {}

    var elapsedMs: Int64 { now }

    func traffic(of node: SimNode) -> LinkTraffic {
        var total = LinkTraffic()
        for pair in pairs(of: node) {
            let s = pair.link.statistics(for: node.role == .phone ? .a : .b)
            total.bytesSent += s.bytesSent
            total.payloadBytesSent += s.payloadBytesSent
            total.framesSent += s.framesSent
            total.framesDropped += s.framesDropped
        }
        return total
    }

    // MARK: sessions

    /// Ends the pair's current session and starts a new one when both nodes are up.
    func startSession(_ pair: Pair) {
        let phone = state.phone, watch = pair.watch
        endSession(pair, reconnectAt: nil)
        guard let ps = phone.store, let ws = watch.store else { return }
        sessions += 1
        let pe = ReplicationEndpoint(store: ps, configuration: state.replication(of: phone, epoch: pair.pairingEpoch))
        let we = ReplicationEndpoint(store: ws, configuration: state.replication(of: watch, epoch: pair.pairingEpoch))
        pair.phoneEndpoint = pe
        pair.watchEndpoint = we
        send(pe.start(now: now), from: phone, in: pair)
        send(we.start(now: now), from: watch, in: pair)
    }

    func send(_ frames: [Frame], from node: SimNode, in pair: Pair) {
        for frame in frames {
            let receiver = node.role == .phone ? pair.watch : state.phone
            // The answer goes before what it released: a sync on the answering node from here on.
            if InvariantChecker.acceptsManualRequest(frame) { state.model.recordSync(node: node.role, nodeID: node.nodeID) }
            state.checker.observe(frame, from: node.role, senderID: node.nodeID, receiverID: receiver.nodeID, model: state.model, at: now)
            pair.link.send(frame, from: node.role == .phone ? .a : .b, at: now)
        }
        if pair.awaitingRebaseline, pair.phoneEndpoint?.isEstablished == true {
            pair.awaitingRebaseline = false
            state.model.recordRebaseline(nodeID: state.phone.nodeID)
        }
        replaceOlderSessions(of: pair)
        noteFailures(pair)
    }

    /// As a phone's `SyncPeer` does: a session newly established with a node
    /// replaces any other session with that node, through any pairing (one
    /// device runs one session at a time; two devices with one node id, a
    /// copied store, then end up with one of them refused and renewing).
    func replaceOlderSessions(of pair: Pair) {
        guard pair.establishedPeer == nil, let phoneEndpoint = pair.phoneEndpoint, phoneEndpoint.isEstablished,
              let node = phoneEndpoint.peerNode else { return }
        pair.establishedPeer = node
        for other in pairs where other !== pair && other.establishedPeer == node && other.phoneEndpoint?.failure == nil {
            endSession(other, reconnectAt: now + 500)
        }
    }

    /// Ends the pair's session (what is on its link is lost); a new one starts at `reconnectAt`, if given.
    private func endSession(_ pair: Pair, reconnectAt: Int64?) {
        pair.link.dropInFlight()
        pair.phoneEndpoint?.connectionLost()
        pair.watchEndpoint?.connectionLost()
        pair.phoneEndpoint = nil
        pair.watchEndpoint = nil
        pair.establishedPeer = nil
        pair.reconnectAt = reconnectAt
    }

    /// A failed session is replaced by a new one after a short pause (a reconnect).
    func noteFailures(_ pair: Pair) {
        guard pair.reconnectAt == nil else { return }
        if pair.phoneEndpoint?.failure != nil || pair.watchEndpoint?.failure != nil {
            sessionFailures += 1
            pair.reconnectAt = now + 500
        }
    }

    /// Nodes whose armed power cut fired go down at once (their files are dead).
    func reapPowerCuts() {
        for node in state.nodes where node.isUp && node.powerFailed { crashNow(node) }
    }

    func isQuiescent(_ pair: Pair) -> Bool {
        guard pair.link.inFlightCount == 0, !pair.link.faults.partitioned else { return false }
        return pair.phoneEndpoint?.isIdle == true && pair.watchEndpoint?.isIdle == true
    }

    // MARK: the event loop

    /// Processes deliveries, ticks and reconnects in time order up to `limit`.
    /// With `stop`, returns true as soon as it holds (checked at ticks).
    func runUntil(limit: Int64, stop: (() -> Bool)?) -> Bool {
        if let stop, stop() { return true }
        while true {
            var next = nextTick
            for pair in pairs {
                if let d = pair.link.nextDeliveryTime { next = min(next, d) }
                if let r = pair.reconnectAt { next = min(next, r) }
            }
            guard next <= limit else {
                now = max(now, limit)
                state.setClocks(now)
                return false
            }
            now = max(now, next)
            state.setClocks(now)
            for pair in pairs {
                guard let d = pair.link.nextDeliveryTime, d <= now else { continue }
                for (to, frame) in pair.link.deliverDue(at: now) {
                    let target = to == .a ? state.phone : pair.watch
                    guard let endpoint = to == .a ? pair.phoneEndpoint : pair.watchEndpoint else { continue }
                    send(endpoint.receive(frame, now: now), from: target, in: pair)
                }
                reapPowerCuts()
            }
            for pair in pairs {
                if let r = pair.reconnectAt, r <= now { startSession(pair) }
            }
            if nextTick <= now {
                nextTick = now + state.options.tickMs
                for pair in pairs {
                    if let endpoint = pair.phoneEndpoint { send(endpoint.tick(now: now), from: state.phone, in: pair) }
                    if let endpoint = pair.watchEndpoint { send(endpoint.tick(now: now), from: pair.watch, in: pair) }
                }
                reapPowerCuts()
                if let stop, stop() { return true }
            }
        }
    }
}
