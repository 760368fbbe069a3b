import Foundation
import Synchronization
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
    var powerCuts = 0
    var stepsRun = 0
    /// Queued delivery, in scenarios with `"mailbox": true`.
    let mailboxes: ScenarioMailboxes?

    init(scenario: Scenario, options: RunOptions = RunOptions()) throws {
        state = try RunState(scenario: scenario, options: options, folderPrefix: Link.folderPrefix)
        link = Link(state: state)
        mailboxes = scenario.mailbox ? ScenarioMailboxes(state: state) : nil
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
                await Task.yield()  // a simulated run computes without suspending: let other tasks (and runs) have the threads
                await link.advance(to: step.at)
                await reapPowerCuts()
                if let mailboxes {
                    mailboxes.now = step.at
                    mailboxes.rounds(link: link)
                    await reapPowerCuts()
                }
                try await apply(step)
                followRenewals()
                stepsRun += 1
            }
            // Settle: heal, bring crashed nodes back, wait until all is idle.
            // A power cut armed that has not fired by now is called off.
            await reapPowerCuts()
            for node in state.nodes where node.isUp { node.disarmPowerCut() }
            for node in state.nodes { node.setDiskFull(false) }
            await link.setPartitioned(false, watches: Array(state.watches))
            for node in state.nodes where !node.isUp { try await restart(node) }
            var converged = await link.settle(limitMs: state.scenario.settleLimitMs, watches: Array(state.watches))
            if let mailboxes {
                mailboxes.now = link.elapsedMs
                // What arrived queued may have to go on live to the other watches, and back.
                for _ in 0..<5 where mailboxes.rounds(link: link) {
                    converged = await link.settle(limitMs: state.scenario.settleLimitMs, watches: Array(state.watches)) && converged
                }
                mailboxes.check(label: "end", link: link)
            }
            if !converged { state.checker.log.violate(.convergence, link.unsettledAtEnd(limitMs: state.scenario.settleLimitMs)) }
            await reapPowerCuts()
            try checkState(label: "end", connected: Array(state.watches))
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
        case .put(let name, let key, let value, let size):
            let node = state.node(name)
            guard let store = node.store, let descriptor = node.registry.descriptor(forEntry: key) else {
                node.refusedWrites += 1
                return
            }
            let bytes = valueBytes(descriptor: descriptor, value: value, size: size)
            write(node, store: store, key: key, size: bytes.count) { try store.setEncoded(bytes, forKey: key) }
        case .delete(let name, let key):
            let node = state.node(name)
            guard let store = node.store else {
                node.refusedWrites += 1
                return
            }
            write(node, store: store, key: key, size: 0) { try store.removeValue(forKey: key) }
        case .sync(let name):
            let node = state.node(name)
            guard let store = node.store else { return }
            link.willSync(on: node)
            do {
                _ = try store.requestManualSync()
            } catch where node.powerFailed || node.diskFull {
                return  // the power failed during the request, or the disk is full: the app saw an error
            }
            state.model.recordSync(node: node.role, nodeID: node.nodeID)
            link.localChange(on: node)
        case .requestManual(let name):
            let node = state.node(name)
            guard node.isUp else { return }
            await link.requestManual(on: node)
        case .faults(let faults, let name):
            link.setFaults(faults, watches: state.watches(name))
        case .partition(let name):
            await link.setPartitioned(true, watches: state.watches(name))
        case .heal(let name):
            await link.setPartitioned(false, watches: state.watches(name))
        case .crash(let name):
            let node = state.node(name)
            guard node.isUp else { return }
            await link.crash(node)
        case .restart(let name):
            let node = state.node(name)
            guard !node.isUp else { return }
            try await restart(node)
        case .skew(let name, let ms):
            let node = state.node(name)
            node.skewMs = ms
            node.clock.setSkew(ms)
        case .powerCut(let name, let operations):
            let node = state.node(name)
            await reapPowerCuts()  // a cut armed before may have fired since, on a background thread
            guard node.isUp else { return }
            powerCuts += 1
            node.armPowerCut(afterOperations: operations)
        case .fillDisk(let name):
            state.node(name).setDiskFull(true)
        case .freeDisk(let name):
            state.node(name).setDiskFull(false)
        case .purge(let name):
            let node = state.node(name)
            guard let store = node.store else { return }
            do {
                node.purgedByStep += try store.purgeTombstones()
            } catch where node.powerFailed || node.diskFull {
                return  // the power failed during the purge, or the disk is full: the app saw an error
            }
        case .checkpoint:
            checkpoints += 1
            // Each watch up with its link healed settles with the phone; the others are checked alone.
            // While a running node's storage is full its sessions fail and start again (and over TCP
            // the phone is never idle): nothing settles, every node is checked alone.
            let diskFull = state.nodes.contains { $0.isUp && $0.diskFull }
            let reachable = state.phone.isUp && !diskFull ? state.watches.filter { $0.isUp && !link.isPartitioned($0) } : []
            var settled: [SimNode] = []
            if !reachable.isEmpty {
                let limit = state.options.checkpointLimitMs
                var idle = await link.settle(limitMs: limit, watches: reachable)
                await reapPowerCuts()
                if let mailboxes {
                    for _ in 0..<5 where mailboxes.rounds(link: link) {
                        idle = await link.settle(limitMs: limit, watches: reachable) && idle
                        await reapPowerCuts()
                    }
                }
                if !state.phone.isUp || !reachable.allSatisfy(\.isUp) {
                    settled = []  // a power cut fired while settling: the nodes left are checked alone
                } else if idle {
                    settled = reachable
                } else {
                    state.checker.log.violate(.convergence, "checkpoint at t=\(step.at): not idle within \(link.describeLimit(ms: limit))")
                }
            }
            if let mailboxes, state.phone.isUp, !diskFull {
                // Queued delivery reaches the watches that run behind a partition too.
                let queued = state.watches.filter { $0.isUp && link.isPartitioned($0) }
                if !queued.isEmpty {
                    for _ in 0..<5 where mailboxes.rounds(link: link) {
                        // What the phone took from the mailbox goes on to the watches settled with it.
                        let idle = settled.isEmpty ? true : await link.settle(limitMs: state.options.checkpointLimitMs, watches: settled)
                        await reapPowerCuts()
                        if !idle, state.phone.isUp, settled.allSatisfy(\.isUp) {
                            state.checker.log.violate(.convergence, "checkpoint at t=\(step.at): not idle within \(link.describeLimit(ms: state.options.checkpointLimitMs)) after queued delivery")
                        }
                    }
                }
                mailboxes.check(label: "checkpoint t=\(step.at)", link: link)
                // The rounds run at one instant: a store that still holds its stream until a lane pass a
                // full disk put off runs (retried at a tick or round, up to 5 s on) posted nothing: checked alone.
                let holdsStream = state.nodes.contains { $0.isUp && $0.holdsStreamForLanes }
                if state.phone.isUp, reachable.allSatisfy(\.isUp), reachable.isEmpty || !settled.isEmpty, !holdsStream {
                    settled += queued.filter(\.isUp)
                }
            }
            try checkState(label: "checkpoint t=\(step.at)", connected: settled)
        case .replaceWatch(let name, let sourceName, let marker):
            let watch = state.node(name ?? .watch)
            // The backup is taken before the old device goes (it may be the one restored).
            let source = sourceName.map { state.node($0) }
            let backup = try source?.backUp(to: "\(state.folder)/backup-\(String(nextWatchID, radix: 16)).sqlite")
            // The id the copy holds is read from the copy: over TCP the source's
            // session may renew its node id while the runner copies the file.
            let copiedNodeID = try backup.flatMap { try SyncStore.inspect(path: $0.store).nodeID }
            if let source, backup != nil { state.checker.inherit(nextWatchID, from: source.nodeID) }
            if backup != nil, !marker { state.checker.hasUnmarkedCopies = true }
            await link.willReplace(watch)
            state.model.retire(nodeID: watch.nodeID)
            try watch.replace(nodeID: nextWatchID, folder: state.folder, restoring: backup,
                              unmarkedCopyOf: marker ? nil : copiedNodeID)
            watch.powerOn()  // a new device: whatever cut the old one had is not its
            nextWatchID += 1
            state.updateApp(of: watch)  // a new device gets the current app
            try await link.didReplace(watch)
        case .updateApp(let name):
            // The system ends an app to update it; it starts again if it was running.
            let node = state.node(name)
            let wasUp = node.isUp
            if wasUp { await link.crash(node) }
            link.observeSentFrames()  // what the older app sent is checked against its own registry
            state.updateApp(of: node)
            if wasUp { try await restart(node) }
        }
    }

    /// A node whose armed power cut fired is down from then on.
    func reapPowerCuts() async {
        for node in state.nodes where node.isUp && node.powerFailed { await link.powerFailed(node) }
    }

    /// Brings a node back: the power on (after a cut), its store reopened from its file, its sessions started.
    func restart(_ node: SimNode) async throws {
        node.powerOn()
        do {
            try await link.restart(node)
        } catch let error as SyncError where error.code == .storageFull && node.diskFull {
            node.crash()  // the app could not open its store on a full disk: it stays down until the next restart
        }
    }

    /// Performs a local write and records it in the model when it made a new
    /// version: the version its commit announced, not one read back after it
    /// (over TCP a purge on the session's thread may take a local-only
    /// tombstone away in between, and the delete went unrecorded).
    private func write(_ node: SimNode, store: SyncStore, key: String, size: Int, _ body: () throws -> Void) {
        let committed = Mutex<StoreChange?>(nil)
        let observation = store.observeChanges(matching: .key(key)) { change in
            if change.origin == .local { committed.withLock { $0 = change } }
        }
        defer { observation.cancel() }
        do {
            try body()
        } catch {
            node.refusedWrites += 1
            return
        }
        if let change = committed.withLock({ $0 }) {
            state.model.recordWrite(node: node.role, nodeID: node.nodeID, key: key, version: change.version, deleted: change.kind == .removed,
                                    size: size, declaration: node.registry.descriptor(forEntry: key))
        }
        link.localChange(on: node)
    }

    /// The serialized bytes of a `put`: the JSON value (canonical), or a generated value of `size` bytes
    /// (for a JSON key a quoted string, and for a key with the `union` resolver a one-element array of one).
    func valueBytes(descriptor: KeyDescriptor, value: JSONValue?, size: Int?) -> [UInt8] {
        if let size {
            let quoted = descriptor.encoding == "json"
            let listed = quoted && descriptor.resolver == "union"
            let open: [UInt8] = listed ? Array("[\"".utf8) : quoted ? Array("\"".utf8) : []
            let close: [UInt8] = listed ? Array("\"]".utf8) : open
            let count = max(0, size - open.count - close.count)
            var bytes = open
            bytes.reserveCapacity(size)
            let alphabet = Array("abcdefghijklmnop".utf8)
            while bytes.count < count + open.count {
                var word = valueRandom.next()
                for _ in 0..<16 where bytes.count < count + open.count {
                    bytes.append(alphabet[Int(word & 0xF)])
                    word >>= 4
                }
            }
            return bytes + close
        }
        guard let value else { return [] }
        if descriptor.encoding != "json", case .string(let text) = value { return Array(text.utf8) }
        return Array(value.canonicalText.utf8)
    }

    /// Copies every store file of the run (including replaced watches') to `directory`.
    func keepStores(in directory: String) throws {
        let fm = FileManager.default
        do {
            try fm.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure, "cannot create \(directory) for the stores (--keep-stores): \(Self.reason(error))")
        }
        for node in state.nodes { node.crash() }
        for name in try fm.contentsOfDirectory(atPath: state.folder).sorted() where name.hasSuffix(".sqlite") || name.hasSuffix(".sqlite-wal") {
            let target = (directory as NSString).appendingPathComponent(name)
            try? fm.removeItem(atPath: target)
            // An earlier run's WAL (or its index) beside this store would be read into it:
            // removed, and this run's `-wal`, if any, is copied after (names sort after).
            for stale in name.hasSuffix(".sqlite") ? [target + "-wal", target + "-shm"] : [] where fm.fileExists(atPath: stale) {
                do {
                    try fm.removeItem(atPath: stale)
                } catch {
                    throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure, "cannot remove \(stale), left by an earlier run, beside \(name) (--keep-stores): \(Self.reason(error))")
                }
            }
            do {
                try fm.copyItem(atPath: (state.folder as NSString).appendingPathComponent(name), toPath: target)
            } catch {
                throw CommandFailure(exitCode: Simulation.Exit.runtimeFailure, "cannot copy \(name) to \(directory) (--keep-stores): \(Self.reason(error))")
            }
        }
    }

    /// The operating system's words for why a file operation failed (Foundation's error wraps them).
    static func reason(_ error: any Error) -> String { CommandFailure.reason(error) }

    // MARK: checks and report

    /// A watch whose phone refused its node id (`node-id-conflict`: a copy
    /// without its marker, or the source of one that the phone met first)
    /// took a new one: the run knows it by that one from now on. A copy keeps
    /// its run's id while its store still names the one it was copied with.
    /// Frames sent until now are checked under the id the watch had (the
    /// data the checker keeps for it is the same under either).
    func followRenewals() {
        for node in state.nodes {
            guard let id = node.store?.nodeID, id != node.nodeID, id != node.unmarkedCopyOf else { continue }
            link.observeSentFrames()
            let old = node.nodeID
            state.model.rename(old, to: id)
            state.checker.follow(old, to: id)
            node.follow(renewedTo: id)
            link.didRename(node, from: old)
        }
    }

    /// Checks the stores of the nodes that are up; convergence only between
    /// the phone and the watches in `connected` (settled with it).
    func checkState(label: String, connected: [SimNode]) throws {
        followRenewals()
        link.observeSentFrames()
        var snapshots: [InvariantChecker.Snapshot] = []
        for node in state.nodes {
            guard let store = node.store else { continue }
            do {
                snapshots.append(try InvariantChecker.snapshot(store, name: node.name, nodeID: node.nodeID))
                if state.scenario.showsTombstonePurge { node.forgottenSeen.formUnion(try store.forgottenPeers()) }
            } catch where node.powerFailed {
                continue  // the power failed while reading: the node is down
            }
        }
        state.checker.checkState(nodes: snapshots, connected: Set(connected.filter(\.isUp).map(\.nodeID)), model: state.model, label: label)
        for node in state.watches { state.checker.checkNoFlicker(node.name.rawValue, setAgain: node.removals.takeSetAgain(), label: label) }
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
                         invariants: state.checker.log.ordered.filter { state.scenario.mailbox || $0.name != Invariant.queuedDelivery.rawValue },
                         replay: replay,
                         powerCuts: state.scenario.timeline.contains { if case .powerCut = $0.action { true } else { false } } ? powerCuts : nil,
                         tombstonePurge: state.scenario.showsTombstonePurge ? try state.nodes.map(SimReport.Purge.measure) : nil)
    }
}
