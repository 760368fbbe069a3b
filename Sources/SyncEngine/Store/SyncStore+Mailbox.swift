extension SyncStore {
    /// The peer of `role` under pairing `epoch` seen last, with its cursor.
    func queuedPeer(role: DeviceRole, epoch: String) throws -> PeerRecord? {
        let node = try database.read { conn -> Int64? in
            let stmt = try conn.statement(
                "SELECT peer_node FROM sync_peers WHERE peer_role = ?1 AND epoch = ?2 ORDER BY last_seen DESC, peer_node LIMIT 1")
            stmt.bind(1, role.rawValue)
            stmt.bind(2, epoch)
            defer { stmt.reset() }
            return try stmt.step() ? stmt.int64(0) : nil
        }
        guard let node else { return nil }
        return try database.read { conn in try SyncStore.peerRecord(conn, node: UInt32(truncatingIfNeeded: node)) }
    }

    /// Every peer of `role` under pairing `epoch`, by node id, with its cursor.
    func queuedPeers(role: DeviceRole, epoch: String) throws -> [PeerRecord] {
        try database.read { conn in
            let stmt = try conn.statement("SELECT peer_node FROM sync_peers WHERE peer_role = ?1 AND epoch = ?2 ORDER BY peer_node")
            stmt.bind(1, role.rawValue)
            stmt.bind(2, epoch)
            let nodes = try { () throws -> [UInt32] in
                defer { stmt.reset() }
                var nodes: [UInt32] = []
                while try stmt.step() { nodes.append(UInt32(truncatingIfNeeded: stmt.int64(0))) }
                return nodes
            }()
            return try nodes.compactMap { try SyncStore.peerRecord(conn, node: $0) }
        }
    }

    /// Whether `recordPeer` would refuse `node` now: it is not known, and the
    /// store keeps `StoreOptions.maxKnownPeers` others.
    func refusesNewPeer(_ node: UInt32) throws -> Bool {
        try database.read { conn in try SyncStore.peerPlace(conn, node: node, limit: options.maxKnownPeers).refused }
    }

    /// The epoch `node` was last recorded under (nil: not known), how many
    /// peers the store keeps, and whether a new one is refused: `node` not
    /// known and `limit` (at least 1) reached. `recordPeer`'s rule.
    static func peerPlace(_ conn: SQLiteConnection, node: UInt32, limit: Int) throws -> (epoch: String?, count: Int, refused: Bool) {
        let known = try conn.statement("SELECT (SELECT epoch FROM sync_peers WHERE peer_node = ?1), (SELECT count(*) FROM sync_peers)")
        known.bind(1, Int64(node))
        defer { known.reset() }
        _ = try known.step()
        let (epoch, count) = (known.isNull(0) ? nil : known.string(0), known.int(1))
        return (epoch, count, epoch == nil && count >= max(1, limit))
    }
}
