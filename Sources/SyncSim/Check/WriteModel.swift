import SyncEngine

/// What the simulated apps did: every write whose call returned (with the
/// version it got) and every manual sync, in the order they ran.
struct WriteModel {
    struct Write {
        var node: DeviceRole
        var nodeID: UInt32
        var key: String
        var version: HLCTimestamp
        var deleted: Bool
        var size: Int
        /// How the writer's app declared the key when it wrote.
        var declaration: KeyDescriptor?
        /// Position among all model events (writes and syncs).
        var order: Int
        /// The node was replaced (a new watch): its writes are no longer checked.
        var retired = false
    }

    struct Sync {
        var node: DeviceRole
        var nodeID: UInt32
        var order: Int
    }

    private(set) var writes: [Write] = []
    private(set) var syncs: [Sync] = []
    /// The last re-baseline per node: it queues every entry again, and manual
    /// entries wait for a sync made after it.
    private(set) var rebaselines: [UInt32: Int] = [:]
    /// The last app update per node (`updateApp`).
    private(set) var appUpdates: [UInt32: Int] = [:]
    private var nextOrder = 0
    /// The order the next model event gets: everything recorded so far comes before it.
    var currentOrder: Int { nextOrder }

    mutating func recordWrite(node: DeviceRole, nodeID: UInt32, key: String, version: HLCTimestamp, deleted: Bool, size: Int,
                              declaration: KeyDescriptor? = nil) {
        writes.append(Write(node: node, nodeID: nodeID, key: key, version: version, deleted: deleted, size: size, declaration: declaration,
                            order: nextOrder))
        nextOrder += 1
    }

    mutating func recordSync(node: DeviceRole, nodeID: UInt32) {
        syncs.append(Sync(node: node, nodeID: nodeID, order: nextOrder))
        nextOrder += 1
    }

    mutating func recordAppUpdate(nodeID: UInt32) {
        appUpdates[nodeID] = nextOrder
        nextOrder += 1
    }

    mutating func recordRebaseline(nodeID: UInt32) {
        rebaselines[nodeID] = nextOrder
        nextOrder += 1
    }

    /// Marks every write of `nodeID` as belonging to a node that is gone.
    mutating func retire(nodeID: UInt32) {
        for i in writes.indices where writes[i].nodeID == nodeID { writes[i].retired = true }
    }

    /// The device known as `old` took the node id `new` (its phone refused
    /// `old`): its writes, syncs and re-baselines are `new`'s from now on.
    mutating func rename(_ old: UInt32, to new: UInt32) {
        for i in writes.indices where writes[i].nodeID == old { writes[i].nodeID = new }
        for i in syncs.indices where syncs[i].nodeID == old { syncs[i].nodeID = new }
        if let order = rebaselines.removeValue(forKey: old) { rebaselines[new] = max(order, rebaselines[new] ?? order) }
        if let order = appUpdates.removeValue(forKey: old) { appUpdates[new] = max(order, appUpdates[new] ?? order) }
    }

    /// The write that produced `version` on `nodeID`, if the model has it.
    func write(key: String, version: HLCTimestamp) -> Write? {
        writes.last { $0.key == key && $0.version == version }
    }

    /// The write of `key` at `version` made on `nodeID` with no sync there
    /// after it (among the first `visible` syncs, when given); nil when it was
    /// released, or not written on that node (it arrived from a peer).
    func unreleasedWrite(key: String, version: HLCTimestamp, by nodeID: UInt32, visible: Int?) -> Write? {
        guard let write = write(key: key, version: version), write.nodeID == nodeID,
              !syncedAfter(order: write.order, nodeID: nodeID, visible: visible) else { return nil }
        return write
    }

    /// The model event a sync must follow to release `write`: the write, or
    /// for a write that did not wait for a sync when it was made (its app kept
    /// it on the device: `never`, or an availability that does not replicate
    /// from it; or sent it on its own: automatic), the update after it, which
    /// files it in the manual lane where the key is manual now.
    func releaseOrder(of write: Write) -> Int {
        guard let declared = write.declaration, let update = appUpdates[write.nodeID], update > write.order else { return write.order }
        let waitedForSync = declared.replicates(from: write.node)
            && (declared.policy == .manual || (declared.policy == .automaticSmall && !write.deleted && write.size > SyncPolicy.automaticLimit))
        return waitedForSync ? write.order : update
    }

    /// Whether `nodeID` requested a manual sync after model event `order`;
    /// with `visible`, only its first `visible` syncs count (those made before a frame was sent).
    func syncedAfter(order: Int, nodeID: UInt32, visible: Int? = nil) -> Bool {
        // A re-baseline (new watch) keeps changes that a sync() had released released.
        let after = order
        return syncs.filter { $0.nodeID == nodeID }.prefix(visible ?? Int.max).contains { $0.order > after }
    }
}
