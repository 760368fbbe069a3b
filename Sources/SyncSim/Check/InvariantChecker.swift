@_spi(Benchmarks) import SyncEngine
import SyncTransport

/// Checks the simulator's invariants: every frame as it is sent (placement,
/// direction, large values) and every store at checkpoints and at the end
/// (convergence, no lost acknowledged write, no resurrection, placement).
///
/// Messages name keys and versions, never values.
struct InvariantChecker {
    /// The current app's registry (the scenario's `keys`): every node's but those in `olderApps`.
    let registry: KeyRegistry
    /// Names of the keys an older app declares otherwise (`Scenario.keysDeclaredDifferently`).
    let declaredDifferently: Set<String>
    /// The registry of each node (by id) that runs an older app.
    var olderApps: [UInt32: KeyRegistry] = [:]
    /// The newest tombstone version each node (by id) had purged when its app was last updated.
    var purgedBeforeUpdate: [UInt32: Int64] = [:]
    var log = ViolationLog()
    /// Watches known to be re-baselined (their own mark, or the phone's
    /// record of the notices it sent), from every check so far: one that is
    /// down at a later check still counts.
    var rebaselinedWatches: Set<UInt32> = []
    /// For a watch set up from a backup of another's store: the node ids
    /// whose local-only values it may hold (the source's, and its sources').
    var inherited: [UInt32: Set<UInt32>] = [:]
    /// A watch was set up from a copy that keeps its source's node id (no
    /// device marker): its phone may refuse that node id through the mailbox.
    var hasUnmarkedCopies = false
    /// When each entry was first sent, by any node, as a model order (a node
    /// other than its writer sends it only after its writer did): an entry
    /// that had gone before an app update made its key manual may stay where
    /// it was (a peer may hold it).
    var firstSent: [SentEntry: Int] = [:]

    /// An entry by its key and version.
    struct SentEntry: Hashable {
        var key: String
        var version: HLCTimestamp
    }

    init(registry: KeyRegistry, declaredDifferently: Set<String> = []) {
        self.registry = registry
        self.declaredDifferently = declaredDifferently
    }

    /// Node `node` was set up from a backup of `source`'s store.
    mutating func inherit(_ node: UInt32, from source: UInt32) {
        inherited[node] = (inherited[source] ?? []).union([source])
    }

    /// The device known as `old` took the node id `new` during the run: the
    /// values it wrote under `old` (and those it may hold through it) are its
    /// own still, and its app and re-baseline follow it.
    mutating func follow(_ old: UInt32, to new: UInt32) {
        inherited[new] = (inherited.removeValue(forKey: old) ?? []).union(inherited[new] ?? []).union([old])
        if let app = olderApps.removeValue(forKey: old) { olderApps[new] = app }
        if let purged = purgedBeforeUpdate.removeValue(forKey: old) { purgedBeforeUpdate[new] = purged }
        if rebaselinedWatches.contains(old) { rebaselinedWatches.insert(new) }
    }

    /// How node `nodeID`'s app declares the key of entry `key`.
    func declaration(_ key: String, on nodeID: UInt32) -> KeyDescriptor? {
        (olderApps[nodeID] ?? registry).descriptor(forEntry: key)
    }

    /// Whether some older app of the scenario declares the key of entry `key` otherwise.
    func isDeclaredDifferently(_ key: String) -> Bool {
        guard !declaredDifferently.isEmpty, let d = registry.descriptor(forEntry: key) else { return false }
        return declaredDifferently.contains(d.name)
    }

    /// Whether the apps of both nodes declare the key of entry `key` alike (and at all).
    func declaredAlike(_ key: String, _ a: UInt32, _ b: UInt32) -> Bool {
        Scenario.declaredAlike(declaration(key, on: a), declaration(key, on: b))
    }

    /// Whether entries of the key may cross between the devices at all.
    func crosses(_ descriptor: KeyDescriptor) -> Bool {
        descriptor.replicates(from: .phone) || descriptor.replicates(from: .watch)
    }

    // MARK: frames

    /// Inspects one frame sent by `sender` (node id `senderID`).
    /// `receiverID`, when known as the frame is sent, is the node it goes to:
    /// an entry of a key the two apps declare differently must not be in it
    /// (`receiverApp`: the receiver's declarations as the frame was sent, when
    /// the frame is checked later).
    mutating func observe(_ frame: Frame, from sender: DeviceRole, senderID: UInt32, receiverID: UInt32? = nil,
                          receiverApp: KeyRegistry? = nil, model: WriteModel,
                          at time: Int64, syncsVisible: Int? = nil) {
        log.checked(.placement)
        log.checked(.direction)
        let message: SyncMessage
        do {
            message = try SyncMessage(frame: frame)
        } catch {
            log.violate(.placement, "t=\(time) \(sender) sent a frame (type \(frame.type)) that does not decode: \(error.message)")
            return
        }
        switch message {
        case .hello(let hello):
            checkDeclarations(hello.declarations, from: sender, senderID: senderID, time: time, what: "hello")
            // A partial transfer is the receiver's note of chunks it holds: the value comes from the other side.
            for partial in hello.partialTransfers {
                checkEntryKey(partial.key, from: sender, senderID: senderID, time: time, what: "hello partial transfer", valueFrom: sender.counterpart)
            }
        case .batch(let batch):
            for entry in batch.entries {
                checkEntryKey(entry.key, from: sender, senderID: senderID, time: time, what: "batch entry")
                checkDeclaredAlike(entry.key, from: sender, senderID: senderID, to: receiverID, app: receiverApp, time: time, what: "batch entry")
                checkManual(entry.key, version: entry.version, from: sender, senderID: senderID, model: model, time: time, visible: syncsVisible)
                if !entry.deleted, let value = entry.value, value.count > SyncPolicy.automaticLimit {
                    checkLarge(entry.key, version: entry.version, from: sender, senderID: senderID, model: model, time: time, visible: syncsVisible)
                }
            }
        case .chunk(let chunk):
            checkEntryKey(chunk.entry.key, from: sender, senderID: senderID, time: time, what: "chunk")
            checkDeclaredAlike(chunk.entry.key, from: sender, senderID: senderID, to: receiverID, app: receiverApp, time: time, what: "chunk")
            checkManual(chunk.entry.key, version: chunk.entry.version, from: sender, senderID: senderID, model: model, time: time, visible: syncsVisible)
            if chunk.totalSize > SyncPolicy.automaticLimit {
                checkLarge(chunk.entry.key, version: chunk.entry.version, from: sender, senderID: senderID, model: model, time: time, visible: syncsVisible)
            }
        case .ack(let ack):
            for rejection in ack.rejected {
                checkEntryKey(rejection.key, from: sender, senderID: senderID, time: time, what: "ack rejection", directional: false)
            }
        case .chunkAck(let ack):
            checkEntryKey(ack.key, from: sender, senderID: senderID, time: time, what: "chunk ack", directional: false)
        case .rebaseline:
            // Re-baselined from the moment the phone sends it: the watch's older write of a key
            // whose delete was purged may reach the phone before the watch acts on the notice
            // (a lossy link, a session that ends), and be on other nodes while the phone is down.
            if sender == .phone, let receiverID { rebaselinedWatches.insert(receiverID) }
        case .error, .caughtUp, .manualRequest, .manualReply, .receipt:
            break
        }
    }

    /// Inspects one message `sender` posted to a mailbox (queued delivery):
    /// the same placement, direction and large-value rules as a frame.
    mutating func observeQueued(_ message: QueuedMessage, from sender: DeviceRole, senderID: UInt32, model: WriteModel, at time: Int64) {
        log.checked(.placement)
        log.checked(.direction)
        switch message {
        case .batch(_, _, _, let entries):
            for entry in entries {
                checkEntryKey(entry.key, from: sender, senderID: senderID, time: time, what: "queued batch entry")
                checkManual(entry.key, version: entry.version, from: sender, senderID: senderID, model: model, time: time, visible: nil)
                if !entry.deleted, let value = entry.value, value.count > SyncPolicy.automaticLimit {
                    checkLarge(entry.key, version: entry.version, from: sender, senderID: senderID, model: model, time: time, visible: nil)
                }
            }
        case .ack(_, _, _, _, let rejected):
            for rejection in rejected {
                checkEntryKey(rejection.key, from: sender, senderID: senderID, time: time, what: "queued ack rejection", directional: false)
            }
        case .refusal(_, let code, let text):
            // Apps with registries not compared yet refuse each other's messages until they have compared
            // them, and a phone refuses a marker-less copy's node id (or its source's).
            if !refusalExpected(code: code) {
                log.violate(.queuedDelivery, "t=\(time) \(sender) refused a queued message: \(code): \(text)")
            }
        case .rebaseline:
            if sender != .phone { log.violate(.direction, "t=\(time) a \(sender) posted a re-baseline notice; only a phone sends them") }
        case .caughtUpFollows, .caughtUp:
            if sender != .phone { log.violate(.direction, "t=\(time) a \(sender) posted a caught-up marker; only a phone sends them") }
        case .renewsNodeID:
            if sender != .watch { log.violate(.direction, "t=\(time) a \(sender) posted a node renewal notice; only a watch sends them") }
        case .declarations(_, let lines, _):
            checkDeclarations(lines, from: sender, senderID: senderID, time: time, what: "queued declarations")
            // Without older apps every node has the scenario's one registry: nothing to compare.
            if declaredDifferently.isEmpty {
                log.violate(.queuedDelivery, "t=\(time) \(sender) posted its key declarations although both sides share one registry")
            }
        }
    }

    /// Whether a queued refusal with `code` is part of comparing registries that
    /// differ (a scenario with older apps), or of a phone catching a copy that
    /// kept its source's node id (`hasUnmarkedCopies`), not a fault.
    func refusalExpected(code: String) -> Bool {
        (!declaredDifferently.isEmpty && code == SyncError.Code.keyDeclarationMismatch.rawValue)
            || (hasUnmarkedCopies && code == SyncError.Code.nodeIDConflict.rawValue)
    }

    /// An entry of a key the sender's and the receiver's apps declare
    /// differently must never cross: the sessions compare registries first.
    /// `app` is the receiver's registry when it may have changed since the
    /// frame was sent (over TCP, checked later); else the receiver's app now.
    private mutating func checkDeclaredAlike(_ key: String, from sender: DeviceRole, senderID: UInt32, to receiverID: UInt32?,
                                             app: KeyRegistry?, time: Int64, what: String) {
        guard let receiverID, isDeclaredDifferently(key) else { return }
        let receiving = app.map { $0.descriptor(forEntry: key) } ?? declaration(key, on: receiverID)
        guard !Scenario.declaredAlike(declaration(key, on: senderID), receiving) else { return }
        log.violate(.placement, "t=\(time) \(sender) sent a \(what) for \(key) to node \(String(receiverID, radix: 16)), whose app declares it differently")
    }

    /// `valueFrom` is the device whose value the message is about: the sender,
    /// except for resume notes about values the sender is receiving.
    private mutating func checkEntryKey(_ key: String, from sender: DeviceRole, senderID: UInt32, time: Int64, what: String,
                                        directional: Bool = true, valueFrom: DeviceRole? = nil) {
        let origin = valueFrom ?? sender
        // A rejection names what the peer sent: with apps that differ, a key the rejecting app lets
        // not cross (or does not know) is what it should refuse.
        if !directional, isDeclaredDifferently(key) { return }
        guard let d = declaration(key, on: senderID) else {
            log.violate(.placement, "t=\(time) \(sender) sent a \(what) for undeclared key \(key)")
            return
        }
        if !crosses(d) {
            log.violate(.placement, "t=\(time) \(sender) sent a \(what) for \(d.availability.rawValue)/\(d.policy.rawValue) key \(key)")
            return
        }
        guard directional else { return }
        if d.availability == .phoneWithWatchSync && origin == .watch {
            log.violate(.direction, "t=\(time) \(sender) sent a \(what) for a watch value of phoneWithWatchSync key \(key)")
        } else if !d.replicates(from: origin) {
            log.violate(.placement, "t=\(time) \(sender) sent a \(what) for key \(key), which does not replicate from the \(origin)")
        }
    }

    private mutating func checkLarge(_ key: String, version: HLCTimestamp, from sender: DeviceRole, senderID: UInt32, model: WriteModel, time: Int64, visible: Int?) {
        guard let d = declaration(key, on: senderID), d.policy == .automaticSmall else { return }
        log.checked(.largeValuesManual)
        // Only values written on the sender are checked (a value that arrived from the peer has no local write).
        if let write = model.unreleasedWrite(key: key, version: version, by: senderID, visible: visible) {
            log.violate(.largeValuesManual, "t=\(time) \(sender) sent \(key) (\(write.size) bytes, version \(version)) without a manual sync after the write")
        }
    }

    /// Every live value of a key the node's app declares `encrypted` is stored
    /// encrypted there (keys an older app declares otherwise are left out: an
    /// update may change a key's security, and values stay as they were written).
    private mutating func checkEncryptedAtRest(_ nodes: [Snapshot], label: String) {
        log.checked(.encryptedAtRest)
        for node in nodes {
            for (key, entry) in node.entries.sorted(by: { $0.key < $1.key }) where !entry.isDeleted && !entry.isEncrypted {
                guard !isDeclaredDifferently(key), declaration(key, on: node.nodeID)?.security == .encrypted else { continue }
                log.violate(.encryptedAtRest, "\(label): \(node.name) holds \(key) at \(entry.version) unencrypted")
            }
        }
    }

    /// Declarations (a hello's, or queued ones) name no key that never leaves the sender.
    private mutating func checkDeclarations(_ lines: [String], from sender: DeviceRole, senderID: UInt32, time: Int64, what: String) {
        for line in lines {
            let name = String(line.prefix { $0 != "|" })
            if let d = declaration(name, on: senderID), !crosses(d) {
                log.violate(.placement, "t=\(time) \(sender)'s \(what) declares local-only key \(name)")
            }
        }
    }

    /// An entry (a value or a delete) of a key its writer declares `manual`
    /// goes out from that writer only after a `sync` there made after the
    /// write. Forwarded by another node, it was released by its writer's sync
    /// before (checked when the writer sent it). For a key the apps declare
    /// differently, the writer's app when it wrote decides: a write made
    /// under the app that declares the key `manual` waits for a sync after
    /// it; one that went on its own (automatic) or stayed on the device
    /// waits for a sync after the update that made the key manual, unless
    /// it went before that update (a peer may have acknowledged it, and
    /// then it stays where it was).
    private mutating func checkManual(_ key: String, version: HLCTimestamp, from sender: DeviceRole, senderID: UInt32, model: WriteModel,
                                      time: Int64, visible: Int?) {
        let entry = SentEntry(key: key, version: version)
        let sentBefore = firstSent[entry]
        if sentBefore == nil { firstSent[entry] = model.currentOrder }
        guard let d = declaration(key, on: senderID), d.policy == .manual else { return }
        if isDeclaredDifferently(key) {
            guard let write = model.write(key: key, version: version), write.nodeID == senderID else { return }
            let release = model.releaseOrder(of: write)
            if release != write.order, let sentBefore, sentBefore <= release { return }
            log.checked(.manualUntilSync)
            if !model.syncedAfter(order: release, nodeID: senderID, visible: visible) {
                let after = release == write.order ? "the write" : "the app update that made the key manual"
                log.violate(.manualUntilSync, "t=\(time) \(sender) sent manual key \(key) (version \(version)\(write.deleted ? ", a delete" : "")) without a sync after \(after)")
            }
            return
        }
        log.checked(.manualUntilSync)
        if let write = model.unreleasedWrite(key: key, version: version, by: senderID, visible: visible) {
            log.violate(.manualUntilSync, "t=\(time) \(sender) sent manual key \(key) (version \(version)\(write.deleted ? ", a delete" : "")) without a sync after the write")
        }
    }

    /// Whether `frame` accepts a manual request: its sender released its
    /// manual changes, as a sync there would, before it sent the answer.
    static func acceptsManualRequest(_ frame: Frame) -> Bool {
        guard frame.type == SyncMessage.MessageType.manualReply.rawValue, case .manualReply(let reply)? = try? SyncMessage(frame: frame) else { return false }
        return reply.accepted
    }

    // MARK: state

    /// One node's stored state, for comparison.
    struct Snapshot {
        var role: DeviceRole
        var nodeID: UInt32
        var entries: [String: EntryInfo]
        var values: [String: [UInt8]]
        /// The node's name in messages (`phone`, `watch`, `watch2`, …).
        var name: String
        /// The newest tombstone version (packed) the node purged (`purgedThrough()`); 0 when none.
        var purgedThrough: Int64
        /// A watch that acted on a phone's re-baseline notice (the phone had forgotten it).
        var rebaselined: Bool
        /// The watches a phone sent a re-baseline notice (empty for a watch).
        var rebaselinedPeers: Set<UInt32>

        init(role: DeviceRole, nodeID: UInt32, entries: [String: EntryInfo], values: [String: [UInt8]], name: String? = nil,
             purgedThrough: Int64 = 0, rebaselined: Bool = false, rebaselinedPeers: Set<UInt32> = []) {
            self.role = role
            self.nodeID = nodeID
            self.entries = entries
            self.values = values
            self.name = name ?? role.rawValue
            self.purgedThrough = purgedThrough
            self.rebaselined = rebaselined
            self.rebaselinedPeers = rebaselinedPeers
        }
    }

    /// `nodeID`: the device's in the run (the store's own unless given: a
    /// copy that has not yet taken its own still names the one it was copied with).
    static func snapshot(_ store: SyncStore, name: ScenarioNode? = nil, nodeID: UInt32? = nil) throws -> Snapshot {
        var entries: [String: EntryInfo] = [:]
        var values: [String: [UInt8]] = [:]
        for info in try store.allEntryInfo() {
            entries[info.key] = info
            if !info.isDeleted, let value = try store.rawValue(forKey: info.key) { values[info.key] = value }
        }
        return Snapshot(role: store.role, nodeID: nodeID ?? store.nodeID, entries: entries, values: values, name: name?.rawValue,
                        purgedThrough: try store.purgedThrough(), rebaselined: !(try store.rebaselinedBy()).isEmpty,
                        rebaselinedPeers: try store.rebaselinedPeers())
    }

    /// `no-flicker`: what `node`'s app saw set again at a version it saw go
    /// (keys an older app declares otherwise come back once the apps agree).
    mutating func checkNoFlicker(_ node: String, setAgain: [(key: String, version: HLCTimestamp)], label: String) {
        log.checked(.noFlicker)
        for (key, version) in setAgain where !isDeclaredDifferently(key) {
            log.violate(.noFlicker, "\(label): \(node) saw \(key) at \(version) go and set again")
        }
    }

    /// Checks the stores of the nodes that are up (the phone first when it is
    /// up). `connected` holds the watches settled with the phone: convergence
    /// is checked between the phone and each of them (a watch partitioned or
    /// down at a checkpoint is not expected to have converged).
    mutating func checkState(nodes: [Snapshot], connected: Set<UInt32>, model: WriteModel, label: String) {
        for node in nodes {
            if node.role == .watch, node.rebaselined { rebaselinedWatches.insert(node.nodeID) }
            rebaselinedWatches.formUnion(node.rebaselinedPeers)
        }
        // placement in the stores
        log.checked(.placement)
        for node in nodes {
            for key in node.entries.keys.sorted() {
                guard let d = declaration(key, on: node.nodeID) else {
                    log.violate(.placement, "\(label): \(node.name) holds undeclared key \(key)")
                    continue
                }
                if isDeclaredDifferently(key) {
                    checkOlderAppHolds(key, node: node, declared: d, model: model, label: label)
                    continue
                }
                if !d.availability.canWrite(on: node.role) && !d.replicates(from: node.role.counterpart) {
                    log.violate(.placement, "\(label): \(node.name) holds \(d.availability.rawValue)/\(d.policy.rawValue) key \(key)")
                } else if !crosses(d), let writer = node.entries[key]?.version.node, writer != node.nodeID,
                          inherited[node.nodeID]?.contains(writer) != true {
                    // A key that never crosses holds only its own node's writes (a watch's watchOnly value stays
                    // on that watch), or those of the store it was restored from.
                    log.violate(.placement, "\(label): \(node.name) holds \(d.availability.rawValue)/\(d.policy.rawValue) key \(key) written by node \(String(writer, radix: 16))")
                }
            }
        }
        checkEncryptedAtRest(nodes, label: label)
        // no lost acknowledged write
        log.checked(.noLostAcknowledgedWrite)
        let held = heldBack(nodes: nodes, model: model)
        for write in model.writes where !write.retired {
            guard let node = nodes.first(where: { $0.nodeID == write.nodeID }) else { continue }
            guard let entry = node.entries[write.key] else {
                // A re-baseline notice removes what the phone knew (the watch's own writes it had
                // too) and the baseline after it brings back what is alive: until the watch has
                // settled with the phone since, its own write may be on the phone alone.
                let awaitsBaseline = node.role == .watch && node.rebaselined && !connected.contains(node.nodeID)
                if !write.deleted && !supersededByPurgedDelete(write, nodes: nodes, model: model)
                    && !supersededByHeldWrite(write, held: held, model: model) && !awaitsBaseline
                    && !(node.rebaselined && model.writes.contains { $0.key == write.key && $0.version > write.version }) {
                    // (A re-baselined watch drops what the phone knew of its writes; where a newer write
                    // of the key superseded one, that newer value is what the baseline brings, once the
                    // watch is in touch long enough: convergence checks it then.)
                    log.violate(.noLostAcknowledgedWrite, "\(label): \(node.name) lost its write of \(write.key) at \(write.version)")
                }
                continue
            }
            // A delete whose tombstone a node purged may come back as an older delete of the
            // same key that the purging node had not seen (the README's tombstone limits): the
            // key is deleted either way, and nothing the app holds is lost.
            let purgedDelete = write.deleted && entry.isDeleted && write.version.packed <= (nodes.map(\.purgedThrough).max() ?? 0)
            if entry.version < write.version && !purgedDelete
                && !unsentBeforePurgedDelete(write.key, entry.version, nodes: nodes, model: model)
                && !supersededByPurgedLocalDelete(write, model: model) {
                log.violate(.noLostAcknowledgedWrite, "\(label): \(node.name) holds \(write.key) at \(entry.version), older than its acknowledged write \(write.version)")
            }
        }
        // The nodes in sync: the phone and the watches settled with it.
        let phoneID = nodes.first { $0.role == .phone }?.nodeID
        var inSync = connected
        if let phoneID, !connected.isEmpty { inSync.insert(phoneID) }
        // no resurrection
        log.checked(.noResurrection)
        var finals: [String: WriteModel.Write] = [:]
        for write in model.writes where !write.retired {
            // (A key some older app declares otherwise is not one value everywhere while the apps differ.)
            guard let d = registry.descriptor(forEntry: write.key), d.resolver == nil, !isDeclaredDifferently(write.key) else { continue }
            let scope = crosses(d) ? write.key : "\(write.key)@\(write.nodeID)"
            if let current = finals[scope], current.version > write.version { continue }
            finals[scope] = write
        }
        for scope in finals.keys.sorted() {
            let write = finals[scope]!
            guard write.deleted, !held.contains(write.key) else { continue }
            // A value newer than the delete legitimately wins (e.g. written by a replaced watch).
            for node in nodes where node.values[write.key] != nil && node.entries[write.key]!.version < write.version {
                guard let d = registry.descriptor(forEntry: write.key),
                      !unsentBeforePurgedDelete(write.key, node.entries[write.key]!.version, nodes: nodes, model: model) else { continue }
                let ownWrite = node.nodeID == write.nodeID
                if ownWrite || (crosses(d) && inSync.contains(node.nodeID) && inSync.contains(write.nodeID)) {
                    log.violate(.noResurrection, "\(label): \(write.key) was last deleted (\(write.version)) but \(node.name) holds a value at \(node.entries[write.key]!.version)")
                }
            }
        }
        // convergence: the phone with each watch settled with it
        guard let phone = nodes.first(where: { $0.role == .phone }) else { return }
        for watch in nodes where watch.role == .watch && connected.contains(watch.nodeID) {
            checkConvergence(phone, watch, held: held, model: model, label: label)
        }
    }

    /// A node that runs an older app holds, of a key declared differently,
    /// only values written under its own declaration: its own, or another
    /// node's whose app declared the key alike when it wrote it.
    private mutating func checkOlderAppHolds(_ key: String, node: Snapshot, declared: KeyDescriptor, model: WriteModel, label: String) {
        guard olderApps[node.nodeID] != nil, let entry = node.entries[key],
              let write = model.write(key: key, version: entry.version), write.nodeID != node.nodeID,
              !Scenario.declaredAlike(write.declaration, declared) else { return }
        log.violate(.placement, "\(label): \(node.name), which runs an older app, holds \(key) at \(entry.version), written by node \(String(write.nodeID, radix: 16)) whose app declared it differently")
    }

    /// Whether the entry at `version` of `key` may be a write that a
    /// re-baselined watch made before a delete of that key which the phone
    /// purged while it had forgotten the watch, and that reached the phone
    /// only after (the README's first tombstone limit): with nothing left to
    /// compare it with, it wins on every node as if that delete had not
    /// happened, and so do the writes between them lose.
    func unsentBeforePurgedDelete(_ key: String, _ version: HLCTimestamp, nodes: [Snapshot], model: WriteModel) -> Bool {
        guard rebaselinedWatches.contains(version.node) else { return false }
        let purged = nodes.map(\.purgedThrough).max() ?? 0
        return model.writes.contains { $0.key == key && $0.deleted && $0.version > version && $0.version.packed <= purged }
    }

    /// Whether a value write that is gone from its node was superseded by a
    /// later delete of its key that a node has since purged: a returning watch
    /// removes such a value at the phone's re-baseline notice (a purged delete
    /// is an absent key). A tombstone row that was purged is absent too; the
    /// convergence and no-resurrection checks already treat both as no value.
    /// A key that never crosses (phoneOnly, watchOnly) has only its own
    /// node's writes: the later delete is that node's, and so is the purge.
    func supersededByPurgedDelete(_ write: WriteModel.Write, nodes: [Snapshot], model: WriteModel) -> Bool {
        guard let d = registry.descriptor(forEntry: write.key) else { return false }
        let crossing = crosses(d)
        let purgedThrough = crossing ? nodes.map(\.purgedThrough).max() ?? 0
                                     : nodes.first { $0.nodeID == write.nodeID }?.purgedThrough ?? 0
        return model.writes.contains { later in
            later.key == write.key && later.deleted && later.version > write.version && later.version.packed <= purgedThrough
                && (crossing || later.nodeID == write.nodeID)
        }
    }

    /// Whether a value write that is gone from its node was superseded by a
    /// newer write of its key that waits in a manual lane: a watch
    /// re-baselined after the phone forgot it drops what the phone knew, and
    /// the baseline brings back what is alive except what the phone holds
    /// for `sync()` (the README's tombstone limits). The newer value arrives
    /// with that sync; nothing the app would keep is lost.
    func supersededByHeldWrite(_ write: WriteModel.Write, held: Set<String>, model: WriteModel) -> Bool {
        held.contains(write.key) && model.writes.contains { $0.key == write.key && $0.version > write.version }
    }

    /// The phone and one watch hold the same entries for every key that crosses between them.
    private mutating func checkConvergence(_ phone: Snapshot, _ watch: Snapshot, held: Set<String>, model: WriteModel, label: String) {
        log.checked(.convergence)
        let keys = Set(phone.entries.keys).union(watch.entries.keys)
        for key in keys.sorted() {
            // A key the two apps declare differently does not cross until they agree.
            let declared = isDeclaredDifferently(key)
                ? (declaredAlike(key, phone.nodeID, watch.nodeID) ? declaration(key, on: phone.nodeID) : nil)
                : registry.descriptor(forEntry: key)
            guard let d = declared, crosses(d), !held.contains(key) else { continue }
            let a = phone.entries[key], b = watch.entries[key]
            // A value an older app wrote that the current declaration does not send from its writer
            // (the key became phoneWithWatchSync, say) stays where it is.
            if declared != nil, isDeclaredDifferently(key), [a, b].contains(where: { entry in
                guard let entry, let write = model.write(key: key, version: entry.version) else { return false }
                return !Scenario.declaredAlike(write.declaration, d) && !d.replicates(from: write.node)
            }) { continue }
            let aLive = a.map { !$0.isDeleted } ?? false
            let bLive = b.map { !$0.isDeleted } ?? false
            if !aLive && !bLive { continue }
            if a == nil || b == nil {
                log.violate(.convergence, "\(label): \(key) is only on the \(a == nil ? watch.name : "phone")\(a == nil ? "" : " (not on the \(watch.name))")")
            } else if a!.version != b!.version || a!.isDeleted != b!.isDeleted {
                log.violate(.convergence, "\(label): \(key) differs: phone \(a!.version)\(a!.isDeleted ? " deleted" : ""), \(watch.name) \(b!.version)\(b!.isDeleted ? " deleted" : "")")
            } else if phone.values[key] != watch.values[key] {
                log.violate(.convergence, "\(label): \(key) has the same version \(a!.version) but different values on the phone and the \(watch.name)")
            }
        }
    }

    /// Whether `write` was superseded by a delete its node's app kept on the
    /// device (`never`, or an availability that does not replicate from it)
    /// whose tombstone the node purged, as a local one, before an update made
    /// the key sync: a peer's older value of the key may then come back
    /// (README: a declaration an app update changes).
    func supersededByPurgedLocalDelete(_ write: WriteModel.Write, model: WriteModel) -> Bool {
        guard let purged = purgedBeforeUpdate[write.nodeID] else { return false }
        return model.writes.contains { delete in
            delete.deleted && delete.nodeID == write.nodeID && delete.key == write.key && delete.version >= write.version
                && delete.declaration.map { !$0.replicates(from: delete.node) } == true && delete.version.packed <= purged
        }
    }

    /// Keys whose latest version waits, by the rules, in a manual lane: a
    /// pending manual-lane entry on its writer with no sync since its write
    /// (or since the update that made its key sync, for a write its app kept
    /// on the device),
    /// or a resolver's merge (another size than the write of its version: a
    /// merge over the limit waits for the next sync, one made after it);
    /// not one its node's app now declares automatic (an update made a manual
    /// key automatic: what waited goes).
    func heldBack(nodes: [Snapshot], model: WriteModel) -> Set<String> {
        var held = Set<String>()
        for node in nodes {
            for (key, info) in node.entries where info.isPending && info.lane == .manual {
                if let d = declaration(key, on: node.nodeID), d.replicates(from: node.role), d.policy == .automaticSmall,
                   info.isDeleted || info.size <= SyncPolicy.automaticLimit {
                    continue
                }
                if let write = model.write(key: key, version: info.version), write.nodeID == node.nodeID, write.size == info.size,
                   model.syncedAfter(order: model.releaseOrder(of: write), nodeID: node.nodeID) {
                    continue
                }
                held.insert(key)
            }
        }
        return held
    }
}
