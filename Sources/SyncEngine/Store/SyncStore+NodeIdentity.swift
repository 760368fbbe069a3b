import Foundation

/// One node id per device.
///
/// A store makes a random node id when its file is created. A second watch
/// set up from a copy of another watch's store file (a backup restored while
/// the first is still paired) has the same one, and a phone never sends a
/// change back to the node it came from: each of those watches would miss the
/// other's changes. So a phone binds a node id to the pairing it met it
/// through, and refuses a watch of another pairing that names it
/// (`node-id-conflict`, protocol 6); the watch then takes a new node id and
/// syncs as the new device it is. A store restored from an older backup of
/// its own, or a copy that also has the other watch's pairing secret, is
/// caught at open by a marker file (`StoreOptions.renewsNodeIDWhenRestored`).
extension SyncStore {
    /// The pairing epoch the peer `node` was last recorded under, if this store keeps it.
    ///
    /// Throws `.databaseCorrupt`, naming the table and column, for a row this
    /// engine never writes (a file edited by hand): an epoch that is not UTF-8
    /// text of at most `maxPairingEpochBytes` (what a hello or a queued header
    /// carries, and `recordPeer` keeps), or a role other than the counterpart
    /// of this store's. Such a row tells nothing of the pairing the node was
    /// met through: it is not a node met through another one (`node-id-conflict`).
    func pairingEpoch(ofPeer node: UInt32) throws -> String? {
        try checkOpen()
        return try database.read { conn in
            let stmt = try conn.statement("SELECT CAST(epoch AS BLOB), typeof(epoch), peer_role, typeof(peer_role) FROM sync_peers WHERE peer_node = ?1")
            stmt.bind(1, Int64(node))
            defer { stmt.reset() }
            guard try stmt.step() else { return nil }
            let bytes = stmt.blob(0) ?? []
            guard stmt.string(1) == "text", bytes.count <= SyncStore.maxPairingEpochBytes,
                  let epoch = String(validating: bytes, as: UTF8.self) else {
                throw SyncStore.damagedPeerRow(node, column: "epoch")
            }
            guard stmt.string(3) == "text", stmt.string(2) == role.counterpart.rawValue else {
                throw SyncStore.damagedPeerRow(node, column: "peer_role")
            }
            return epoch
        }
    }

    /// The longest pairing epoch a peer's row holds, in UTF-8 bytes: the most
    /// a hello or a queued header carries (`recordPeer` keeps the epoch both
    /// sides named).
    static let maxPairingEpochBytes = 256

    /// The error for the `sync_peers` row of `node` whose `column` holds what this engine never writes there.
    static func damagedPeerRow(_ node: UInt32, column: String) -> SyncError {
        SyncError(.databaseCorrupt, "the store is damaged: the sync_peers row of node \(String(node, radix: 16)) holds in its \(column) column a value this engine never writes; the row is recorded again under this session's pairing (the peer is sent everything again, which it applies once) — nothing else was changed")
    }

    /// On a phone: whether the watch of pairing `epoch` said (through its
    /// mailbox) that it takes a new node id when refused for its node id.
    func queuedPeerRenewsNodeID(in epoch: String) throws -> Bool {
        try meta(Self.queuedRenewalMeta(epoch)) != nil
    }

    /// On a phone: the watch of pairing `epoch` takes a new node id when refused for it (kept in the file).
    func noteQueuedPeerRenewsNodeID(in epoch: String) throws {
        guard try !queuedPeerRenewsNodeID(in: epoch) else { return }
        try database.write { conn in try SyncStore.writeMeta(conn, Self.queuedRenewalMeta(epoch), "1") }
    }

    static func queuedRenewalMeta(_ epoch: String) -> String { "queued_renews_node_id_\(epoch)" }

    /// The watches this phone last met through the pairing `epoch` (node ids,
    /// ascending; a node id belongs to one pairing at a time).
    public func knownPeers(ofPairing epoch: String) throws -> [UInt32] {
        try checkOpen()
        return try database.read { conn in
            let stmt = try conn.statement("SELECT peer_node FROM sync_peers WHERE epoch = ?1 ORDER BY peer_node")
            stmt.bind(1, epoch)
            defer { stmt.reset() }
            var nodes: [UInt32] = []
            while try stmt.step() { nodes.append(UInt32(truncatingIfNeeded: stmt.int64(0))) }
            return nodes
        }
    }

    /// Forgets, as `forgetPeer(_:)` does, every watch this phone last met
    /// through the pairing `epoch`, and returns their node ids: for an app
    /// that removed that pairing (the watch was unpaired, or paired again
    /// with a new secret). They no longer hold tombstones back, and a watch
    /// of a new pairing with one of their node ids keeps it (it is not
    /// refused with `node-id-conflict`; it is baselined as a forgotten watch
    /// is). Throws `.writeNotAllowed` while a session with one of them runs,
    /// and then forgets none of them.
    @discardableResult
    public func forgetPeers(ofPairing epoch: String) throws -> [UInt32] {
        try forgetAllPeers(ofPairing: epoch)
    }

    /// Gives this store a new node id (`StoreOptions.nodeID` if that one is
    /// free, else a random one), kept in its file, and returns it: the
    /// versions it writes from now on carry it, and its peers meet it as a new device (a phone baselines it). For a store whose file was
    /// copied from another device that still syncs, or restored from an
    /// older backup of its own (`StoreOptions.renewsNodeIDWhenRestored` does
    /// it at open); a watch of protocol 6 does it by itself when its phone
    /// finds its node id taken (`node-id-conflict`).
    @discardableResult
    public func renewNodeID() throws -> UInt32 {
        try renewNodeID(replacing: nil)
    }

    /// `renewNodeID()`, unless the store's node id is no longer `node`
    /// (another process sharing the file renewed it): that one is kept.
    @discardableResult
    func renewNodeID(replacing node: UInt32?) throws -> UInt32 {
        try checkOpen()
        let (renewed, old) = try database.write { conn -> (UInt32, UInt32) in
            let stored = UInt32(try SyncStore.readMeta(conn)["node_id"] ?? "") ?? 0
            if let node, stored != node, stored != 0 { return (stored, stored) }
            return (try SyncStore.writeNewNodeID(conn, replacing: stored, preferred: options.nodeID), stored)
        }
        try adoptRenewed(renewed, old: old)
        return renewed
    }

    /// Writes a new node id, `preferred` if given and free, else random: not 0, not `replacing`, not a peer's.
    static func writeNewNodeID(_ conn: SQLiteConnection, replacing stored: UInt32, preferred: UInt32? = nil) throws -> UInt32 {
        var taken: Set<UInt32> = [0, stored, MailboxReplicator.unknownPeer]
        let peers = try conn.statement("SELECT peer_node FROM sync_peers UNION SELECT peer_node FROM sync_forgotten_peers")
        while try peers.step() { taken.insert(UInt32(truncatingIfNeeded: peers.int64(0))) }
        peers.reset()
        var renewed = preferred ?? 0
        while taken.contains(renewed) { renewed = .random(in: 1...UInt32.max) }
        try SyncStore.writeMeta(conn, "node_id", String(renewed))
        return renewed
    }

    /// The node id `renewed`, committed, goes to stable storage (a power cut
    /// must not bring `old` back once a hello named it) and on new versions.
    func adoptRenewed(_ renewed: UInt32, old: UInt32) throws {
        try syncCommitted()
        let before = clock.node
        clock.adopt(node: renewed)
        if renewed != before { nodeRenewals.publish(renewed) }
        if renewed != old {
            logger.notice("this store took a new node id", metadata: ["old": "\(String(old, radix: 16))", "new": "\(String(renewed, radix: 16))"])
        }
    }
}

extension SyncMessage {
    /// The first protocol version whose phone refuses a watch that names a
    /// node id it met through another pairing (`node-id-conflict`), and whose
    /// watch then takes a new node id (`SyncStore.renewNodeID()`).
    public static let nodeRenewalProtocol: UInt16 = 6
}
