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
        let limit = max(1, options.maxKnownPeers)
        return try database.read { conn in
            let stmt = try conn.statement("SELECT EXISTS (SELECT 1 FROM sync_peers WHERE peer_node = ?1), (SELECT count(*) FROM sync_peers)")
            stmt.bind(1, Int64(node))
            defer { stmt.reset() }
            _ = try stmt.step()
            return stmt.int(0) == 0 && stmt.int(1) >= limit
        }
    }
}
