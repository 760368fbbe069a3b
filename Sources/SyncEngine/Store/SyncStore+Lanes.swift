/// Lanes kept in step with the key declarations an app update changes.
///
/// A change takes its lane when it is written: `none` for a key that stays on
/// this device (`never`, or an availability that does not replicate from it),
/// `manual` until `sync()`, `automatic`. An app update that makes a key sync
/// (`never` to `automaticSmall` or `manual`, `phoneOnly` to `all`, `manual` to
/// `automaticSmall`) would otherwise leave what was written before where it
/// was: the devices would keep different values of a key they now share until
/// it is written again. One that makes an automatic key `manual` would send
/// without `sync()` what had not gone yet.
extension SyncStore {
    /// The registry fingerprint the lanes were last assigned under.
    static let lanesRegistryMeta = "lanes_registry"
    /// The declarations (names) that synced from this device under that registry, one a line.
    static let syncingDeclarationsMeta = "lanes_syncing_declarations"

    /// At open, once per registry: entries of keys that now sync from this
    /// device but wait in a lane that does not send them move to the lane a
    /// change of theirs takes now. One that becomes `automatic` joins the stream
    /// with a new change sequence, after every peer's cursor (as `sync()`
    /// releases a change), its version unchanged: each peer applies it by its
    /// version, as any change. A key that did not sync under the registry of the
    /// last open and syncs now has every entry queued again that way: while it
    /// stayed on the device, sessions passed over what was still in the stream
    /// and moved their cursors past it. A change of this device in the stream
    /// that some peer has not acknowledged, of a key now `manual` (or over the
    /// limit), waits for `sync()` as a change of that key written now would.
    /// A key that no longer syncs keeps its lanes: every session passes over it.
    func assignLanesForCurrentDeclarations() throws {
        let fingerprint = SyncStore.hex(registry.fingerprint(for: role))
        let recorded = try database.read { conn in try SyncStore.readMeta(conn) }
        guard recorded[SyncStore.lanesRegistryMeta] != fingerprint else { return }
        let syncing = Set(registry.descriptors.filter { $0.replicates(from: role) }.map(\.name))
        let moved = try database.write { conn -> Int in
            // Read again under the write lock: a put-off pass may run from `sync()` and a session's tick at once.
            let recorded = try SyncStore.readMeta(conn)
            guard recorded[SyncStore.lanesRegistryMeta] != fingerprint else { return 0 }
            // Unknown before this build recorded them: only the lanes are set right.
            let syncedBefore = recorded[SyncStore.syncingDeclarationsMeta].map { Set($0.split(separator: "\n").map(String.init)) }
            let startsSyncing = syncedBefore.map { syncing.subtracting($0) } ?? []
            let select = try conn.statement("SELECT key, lane, size, deleted, origin_peer, encoding, change_seq FROM entries ORDER BY change_seq, key")
            let peers = try SyncStore.peerRecords(conn)
            // Whether a change of this device has not reached some peer (any peer, when none is known yet):
            // it is after that peer's cursor, or its key was declared differently there (passed over).
            func waitsForSomePeer(_ seq: Int64, _ name: String) -> Bool {
                peers.isEmpty || peers.contains { seq > $0.cursor || $0.mismatched.contains(name) }
            }
            var moves: [(key: String, lane: SyncLane)] = []
            var lookups = KeyRegistry.FamilyLookupMemo()
            while try select.step() {
                let held = SyncLane(rawValue: select.int(1)) ?? .none
                let key = select.string(0)
                // An entry of another encoding than the key's now (an update changed it) would be refused by the peer.
                guard let descriptor = registry.registered(forEntry: key, memo: &lookups)?.descriptor,
                      descriptor.replicates(from: role), select.string(5) == descriptor.encoding else { continue }
                // An entry taken from a peer goes on automatically, as `apply` files it.
                let lane = select.int64(4) != 0
                    ? SyncLane.automatic
                    : self.lane(for: descriptor, size: select.byteCount(2), deleted: select.int(3) != 0)
                let requeued = startsSyncing.contains(descriptor.name) && (held != .manual || lane != .manual)
                // A change of this device not yet with every peer, of a key now manual, waits for `sync()`.
                let heldForSync = held == .automatic && lane == .manual && waitsForSomePeer(select.int64(6), descriptor.name)
                if requeued || heldForSync || (held == .none && lane != .none) || (held == .manual && lane == .automatic) {
                    moves.append((key, held == .released && lane == .manual ? .released : lane))
                }
            }
            select.reset()
            let release = try conn.statement("UPDATE entries SET lane = ?2, change_seq = ?3 WHERE key = ?1")
            let wait = try conn.statement("UPDATE entries SET lane = ?2 WHERE key = ?1")
            for move in moves {
                let stmt = move.lane.isSent ? release : wait
                stmt.reset()
                stmt.bind(1, move.key)
                stmt.bind(2, move.lane.rawValue)
                if move.lane.isSent { stmt.bind(3, takeSeq()) }
                try stmt.run()
            }
            try SyncStore.writeMeta(conn, SyncStore.syncingDeclarationsMeta, syncing.sorted().joined(separator: "\n"))
            try SyncStore.writeMeta(conn, SyncStore.lanesRegistryMeta, fingerprint)
            return moves.count
        }
        if moved > 0 {
            logger.notice("entries moved to the lanes the updated key declarations give them", metadata: ["entries": "\(moved)"])
        }
    }

    /// Whether a lane pass a full disk put off at open still waits: the
    /// stream is held until it runs (it may move changes in it to the manual lane).
    package var lanePassWaits: Bool { deferredLanes.withLock { $0 != nil } }

    /// The lane pass a full disk put off at open, tried again from sessions'
    /// ticks and queued rounds, at most every `deferredLanesInterval`, or at
    /// once after any write transaction committed since the last try (a local
    /// write, a peer's batch, a cursor, another process's: the disk has room
    /// again): once it runs, what it moved goes as a local change does.
    func assignDeferredLanes() {
        let due = deferredLanes.withLock { last -> Bool in
            guard let tried = last else { return false }  // the common case: nothing put off, no clock or counter read
            let now = physicalClock.nowMilliseconds(), commits = commitsSeen
            guard now - tried.triedAt >= SyncStore.deferredLanesInterval || now < tried.triedAt || commits != tried.commits else { return false }
            last = (triedAt: now, commits: commits)
            return true
        }
        guard due, !closed.load(ordering: .relaxed) else { return }
        do {
            try runDeferredLanePass()
            localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
            localWrites.publish(SyncStore.thisDevice)
        } catch {
            logger.debug("moving the entries of keys the registry now syncs still waits", metadata: ["error": "\(error)"])
        }
    }

    /// Runs the lane pass a full disk put off at open, now; throws (the disk
    /// still full, say) and leaves it put off when it cannot. The caller
    /// wakes the sessions.
    func runDeferredLanePass() throws {
        try assignLanesForCurrentDeclarations()
        deferredLanes.withLock { $0 = nil }
    }

    /// Grows with every write transaction this process commits and every
    /// change it learns of otherwise (another process's commits, queued applies).
    var commitsSeen: Int { database.commitCount &+ localGeneration.load(ordering: .sequentiallyConsistent) }

    /// How often a lane pass put off at open is tried again: 5 s.
    static let deferredLanesInterval: Int64 = 5_000
}
