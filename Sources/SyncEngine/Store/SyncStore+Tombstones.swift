import Foundation

/// Tombstones, and peers that stay away.
///
/// A delete leaves a tombstone row (`deleted = 1`) so that the delete reaches
/// every peer and beats older values. The row is purged once it does not
/// wait for `sync()`, its version is older than `StoreOptions.tombstoneRetention`,
/// and every known peer had acknowledged it a retention before (the peer it
/// came from excepted, when it arrived here a retention before): a copy of
/// the old value that a peer sent before it learnt of the delete can then no
/// longer be on its way (over a transport that reorders, an acknowledgement
/// can overtake it). What the peers had acknowledged is recorded at each
/// purge pass (`sync_meta` 'purge_marks': a time and each peer's cursor, at
/// most `maxPurgeMarks`). `sync_meta` 'purged_through' keeps the newest purged
/// version (packed).
///
/// A watch the phone has not seen for longer than `StoreOptions.peerHorizon`
/// is forgotten (it leaves `sync_peers`, so it no longer holds tombstones
/// back). When it returns it has no cursor: the phone first sends it a
/// re-baseline notice with 'purged_through' W, and the watch removes every
/// entry of version ≤ W that the phone already knew (it came from the phone,
/// or the phone acknowledged it): what the phone still has comes back with
/// the full baseline that follows, what it deleted and purged is gone. The
/// watch's changes the phone never acknowledged stay and are sent as usual.
extension SyncStore {
    /// Purges at most this often after acknowledgements (at open and through
    /// `purgeTombstones()` whenever asked).
    static let purgeAfterAcknowledgementInterval: Int64 = 60_000

    /// Forgets watches unseen past `StoreOptions.peerHorizon`, then purges
    /// the tombstones every known peer has (see the type's documentation).
    /// Returns how many tombstones were purged. Runs at open too.
    @discardableResult
    public func purgeTombstones() throws -> Int {
        try checkOpen()
        let now = physicalClock.nowMilliseconds()
        purgeState.withLock { $0 = now }
        if let horizon = options.peerHorizon {
            let forgotten = try forgetPeers(unseenSince: now - SyncStore.milliseconds(horizon), now: now)
            if !forgotten.isEmpty {
                logger.notice("forgot watches unseen past the peer horizon; they re-baseline when they return",
                              metadata: ["peers": "\(forgotten.map { String($0, radix: 16) })"])
            }
        }
        guard let retention = options.tombstoneRetention else { return 0 }
        // A delete an app update made sync, still in the lane of a local one: not purged as one.
        guard !lanePassWaits else { return 0 }
        let retentionMilliseconds = SyncStore.milliseconds(retention)
        let cutoffMilliseconds = now - retentionMilliseconds
        let cutoff = HLCTimestamp(physicalMilliseconds: max(0, min(cutoffMilliseconds, HLCTimestamp.maxPhysicalMilliseconds)), counter: 0, node: 0).packed
        let (anyOldTombstone, marksChange) = try database.read { conn -> (Bool, Bool) in
            let changes = PurgeMark.updated(PurgeMark.list(try SyncStore.readMeta(conn)["purge_marks"]), peers: try SyncStore.waitingPeerRecords(conn, role: role),
                                            now: now, retention: retentionMilliseconds).changed
            guard cutoffMilliseconds > 0 else { return (false, changes) }
            let stmt = try conn.statement("SELECT EXISTS (SELECT 1 FROM entries WHERE deleted = 1 AND ver < ?1)")
            stmt.bind(1, cutoff)
            defer { stmt.reset() }
            _ = try stmt.step()
            return (stmt.int(0) != 0, changes)
        }
        guard anyOldTombstone || marksChange else { return 0 }
        let purged = try database.write({ conn -> [String] in
            let peers = try SyncStore.waitingPeerRecords(conn, role: role)
            let marks = PurgeMark.updated(PurgeMark.list(try SyncStore.readMeta(conn)["purge_marks"]), peers: peers, now: now,
                                          retention: retentionMilliseconds)
            if marks.changed { try SyncStore.writeMeta(conn, "purge_marks", PurgeMark.text(marks.kept)) }
            let settled = marks.settled
            // No peer yet: nobody has these deletes; keep them for the first one.
            guard !peers.isEmpty, anyOldTombstone else { return [] }
            let select = try conn.statement("""
                SELECT key, ver, node, change_seq, lane, origin_peer FROM entries
                WHERE deleted = 1 AND ver < ?1 AND written_at < ?2 AND lane != \(SyncLane.manual.rawValue)
                """)
            select.bind(1, cutoff)
            select.bind(2, cutoffMilliseconds)
            var doomed: [(key: String, version: HLCTimestamp)] = []
            while try select.step() {
                let key = select.string(0)
                let seq = select.int64(3)
                let isSent = SyncLane(rawValue: select.int(4))?.isSent ?? false
                let origin = UInt32(truncatingIfNeeded: select.int64(5))
                let name = registry.descriptor(forEntry: key)?.name
                let everyPeerHasIt = !isSent || peers.allSatisfy { peer in
                    let acknowledged = min(peer.cursor, settled?.cursors[peer.node] ?? 0)
                    return peer.node == origin || (seq <= acknowledged && !(name.map(peer.mismatched.contains) ?? false))
                }
                if everyPeerHasIt {
                    doomed.append((key, HLCTimestamp(packed: select.int64(1), node: UInt32(truncatingIfNeeded: select.int64(2)))))
                }
            }
            select.reset()
            guard !doomed.isEmpty else { return [] }
            let delete = try conn.statement("DELETE FROM entries WHERE key = ?1 AND deleted = 1")
            for tombstone in doomed {
                delete.reset()
                delete.bind(1, tombstone.key)
                try delete.run()
                try SyncStore.discardStagedChunks(conn, key: tombstone.key, through: tombstone.version)
            }
            let newest = doomed.map(\.version.packed).max()!
            let recorded = Int64(try SyncStore.readMeta(conn)["purged_through"] ?? "") ?? 0
            if newest > recorded { try SyncStore.writeMeta(conn, "purged_through", String(newest)) }
            return doomed.map(\.key)
        }, onCommit: { keys in cache.invalidate(keys) })
        if !purged.isEmpty {
            logger.info("purged tombstones every peer has", metadata: ["count": "\(purged.count)"])
        }
        return purged.count
    }

    /// The phones whose re-baseline notices this watch acted on (node ids).
    @_spi(Benchmarks)
    public func rebaselinedBy() throws -> Set<UInt32> {
        try checkOpen()
        return try database.read { conn in
            Set(try SyncStore.readMeta(conn).keys.compactMap { name in
                name.hasPrefix("rebaselined_by_") ? UInt32(name.dropFirst("rebaselined_by_".count)) : nil
            })
        }
    }

    /// The newest version (packed) of a purged tombstone; 0 when none was purged.
    public func purgedThrough() throws -> Int64 {
        try checkOpen()
        return Int64(try meta("purged_through") ?? "") ?? 0
    }

    /// Purges after an acknowledgement, at most once a minute; a failure is
    /// logged (the acknowledgement itself stands).
    func purgeTombstonesIfDue() {
        let now = physicalClock.nowMilliseconds()
        let due = purgeState.withLock { last -> Bool in
            guard now - last >= SyncStore.purgeAfterAcknowledgementInterval || now < last else { return false }
            last = now
            return true
        }
        guard due, options.tombstoneRetention != nil || options.peerHorizon != nil else { return }
        do {
            try purgeTombstones()
        } catch {
            logger.warning("purging tombstones failed", metadata: ["error": "\(error)"])
        }
    }

    /// A session with `peer` was established (`live`) or ended.
    func noteSession(with peer: UInt32, live: Bool) {
        livePeers.withLock { sessions in
            let count = (sessions[peer] ?? 0) + (live ? 1 : -1)
            sessions[peer] = count > 0 ? count : nil
        }
    }

    /// Removes the watches last seen before `cutoff` from `sync_peers` and
    /// remembers them in `sync_forgotten_peers`. A watch with a live session
    /// is being seen: its last sighting becomes now, whatever it last
    /// acknowledged (a connected watch with nothing to acknowledge, or a
    /// clock that jumped, must not lose the tombstones it has not received). A watch never forgets its
    /// phone: its cursor is what tells, when the phone re-baselines it, the
    /// values the phone knew from the watch's own unsent writes.
    private func forgetPeers(unseenSince cutoff: Int64, now: Int64) throws -> [UInt32] {
        guard role == .phone else { return [] }
        let due = try database.read { conn -> Bool in
            let stmt = try conn.statement("SELECT EXISTS (SELECT 1 FROM sync_peers WHERE last_seen < ?1)")
            stmt.bind(1, cutoff)
            defer { stmt.reset() }
            _ = try stmt.step()
            return stmt.int(0) != 0
        }
        guard due else { return [] }
        return try database.write { conn in
            // A peer whose last sighting is unknown (a file from before v6 may say 0) starts its horizon now.
            let unknown = try conn.statement("UPDATE sync_peers SET last_seen = ?1 WHERE last_seen <= 0")
            unknown.bind(1, now)
            try unknown.run()
            let seen = try conn.statement("UPDATE sync_peers SET last_seen = max(last_seen, ?2) WHERE peer_node = ?1")
            for node in livePeers.withLock({ Array($0.keys) }) {
                seen.reset()
                seen.bind(1, Int64(node))
                seen.bind(2, now)
                try seen.run()
            }
            let select = try conn.statement("SELECT peer_node FROM sync_peers WHERE last_seen < ?1")
            select.bind(1, cutoff)
            var nodes: [UInt32] = []
            while try select.step() { nodes.append(UInt32(truncatingIfNeeded: select.int64(0))) }
            select.reset()
            try SyncStore.forget(nodes, conn, now: now)
            return nodes
        }
    }

    /// Moves `nodes` from `sync_peers` to `sync_forgotten_peers`, keeping what
    /// a returning peer needs (its keys declared differently, the registries compared).
    private static func forget(_ nodes: [UInt32], _ conn: SQLiteConnection, now: Int64) throws {
        guard !nodes.isEmpty else { return }
        let remember = try conn.statement("""
            INSERT INTO sync_forgotten_peers(peer_node, peer_role, forgotten_at, last_seen)
            SELECT peer_node, peer_role, ?2, last_seen FROM sync_peers WHERE peer_node = ?1
            ON CONFLICT(peer_node) DO UPDATE SET forgotten_at = excluded.forgotten_at, last_seen = excluded.last_seen
            """)
        let forget = try conn.statement("DELETE FROM sync_peers WHERE peer_node = ?1")
        // A new re-baseline generation for each: an acknowledgement of a queued batch posted
        // before it was forgotten (read after) moves no cursor, so a returning watch starts at
        // 0 and gets its re-baseline notice. (It moved the new cursor past 0: no notice came,
        // and the watch kept values whose deletes were purged meanwhile.)
        var generation = try latestRebaselineGeneration(conn)
        for node in nodes {
            generation &+= 1
            try writeMeta(conn, rebaselineGenerationMeta(node), String(generation))
            remember.reset()
            remember.bind(1, Int64(node))
            remember.bind(2, now)
            try remember.run()
            // Its keys declared differently: changes of them that messages already posted passed
            // over are sent once the registries agree, even after it returns (`recordPeer`).
            let record = try SyncStore.peerRecord(conn, node: node)
            if let mismatched = record?.mismatched, !mismatched.isEmpty {
                try SyncStore.writeMeta(conn, SyncStore.forgottenMismatchedMeta(node), mismatched.sorted().joined(separator: "\n"))
            }
            // And the comparison of the two registries: its queued messages are not refused for it.
            if let registries = record?.registries {
                try SyncStore.writeMeta(conn, SyncStore.forgottenRegistriesMeta(node), SyncStore.hex(registries))
            }
            forget.reset()
            forget.bind(1, Int64(node))
            try forget.run()
        }
    }

    /// Forgets the watch `node` now, as `StoreOptions.peerHorizon` would: it no
    /// longer holds tombstones back or takes one of `StoreOptions.maxKnownPeers`
    /// places, and if it returns it starts again from a full baseline (a
    /// re-baseline when tombstones were purged). For a watch that was unpaired
    /// or replaced. Returns false when the phone did not know it. Throws
    /// `.invalidConfiguration` on a watch (a watch never forgets its phone) and
    /// `.writeNotAllowed` while a session with `node` runs.
    @discardableResult
    public func forgetPeer(_ node: UInt32) throws -> Bool {
        try checkOpen()
        guard role == .phone else {
            throw SyncError(.invalidConfiguration, "forgetPeer(_:) is for the phone: a watch never forgets its phone (its cursor tells a re-baseline which of its writes the phone knew)")
        }
        let forgotten = try forgetWatches(ending: "the watch") { conn in
            // A live one is named even before its session records it: refused as running.
            let live = livePeers.withLock { $0[node] != nil }
            return try live || SyncStore.peerRecord(conn, node: node) != nil ? [node] : []
        }
        if !forgotten.isEmpty { logger.notice("forgot a watch on request; it re-baselines if it returns", metadata: ["peer": "\(String(node, radix: 16))"]) }
        return !forgotten.isEmpty
    }

    /// `forgetPeers(ofPairing:)`: every watch of `epoch` in one transaction,
    /// none while a session with one of them runs (it threw after forgetting
    /// those before it, which then re-baselined although the call failed).
    func forgetAllPeers(ofPairing epoch: String) throws -> [UInt32] {
        try checkOpen()
        let forgotten = try forgetWatches(ending: "the watches of its pairing (none was forgotten)") { conn in
            let select = try conn.statement("SELECT peer_node FROM sync_peers WHERE epoch = ?1 ORDER BY peer_node")
            select.bind(1, epoch)
            defer { select.reset() }
            var nodes: [UInt32] = []
            while try select.step() { nodes.append(UInt32(truncatingIfNeeded: select.int64(0))) }
            if !nodes.isEmpty, role != .phone {
                throw SyncError(.invalidConfiguration, "forgetPeers(ofPairing:) is for the phone: a watch never forgets its phone (its cursor tells a re-baseline which of its writes the phone knew)")
            }
            return nodes
        } also: { conn in try SyncStore.deleteMeta(conn, Self.queuedRenewalMeta(epoch)) }
        if !forgotten.isEmpty {
            logger.notice("forgot the watches of a pairing on request; they re-baseline if they return",
                          metadata: ["peers": "\(forgotten.map { String($0, radix: 16) })"])
        }
        return forgotten
    }

    /// Forgets the watches `select` names in one write transaction (with
    /// `also`), or none while a session with one of them runs (`.writeNotAllowed`,
    /// "end it before forgetting" `what`).
    private func forgetWatches(ending what: String, _ select: (SQLiteConnection) throws -> [UInt32],
                               also: (SQLiteConnection) throws -> Void = { _ in }) throws -> [UInt32] {
        let now = physicalClock.nowMilliseconds()
        return try database.write { conn -> [UInt32] in
            let nodes = try select(conn)
            // Under the write lock: a session marks its peer live before it records it (`recordPeer`).
            if let live = livePeers.withLock({ sessions in nodes.first { sessions[$0] != nil } }) {
                throw SyncError(.writeNotAllowed, "the watch with node \(String(live, radix: 16)) has a session running; end it before forgetting \(what)")
            }
            try SyncStore.forget(nodes, conn, now: now)
            try also(conn)
            return nodes
        }
    }

    /// The peers this store keeps a cursor for (node ids, ascending): at most
    /// `StoreOptions.maxKnownPeers`.
    public func knownPeers() throws -> [UInt32] {
        try peerNodes("SELECT peer_node FROM sync_peers ORDER BY peer_node")
    }

    /// The peers this store forgot (node ids), oldest first.
    public func forgottenPeers() throws -> [UInt32] {
        try peerNodes("SELECT peer_node FROM sync_forgotten_peers ORDER BY forgotten_at, peer_node")
    }

    /// The node ids `query` selects, in its order.
    private func peerNodes(_ query: String) throws -> [UInt32] {
        try checkOpen()
        return try database.read { conn in
            let stmt = try conn.statement(query)
            defer { stmt.reset() }
            var nodes: [UInt32] = []
            while try stmt.step() { nodes.append(UInt32(truncatingIfNeeded: stmt.int64(0))) }
            return nodes
        }
    }

    /// A duration in whole milliseconds, saturating.
    static func milliseconds(_ duration: Duration) -> Int64 {
        let seconds = duration.components.seconds
        guard seconds < Int64.max / 1000 else { return Int64.max / 2 }
        return max(0, seconds) * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }
}

/// What every known peer had acknowledged (its cursor) at a purge pass.
struct PurgeMark: Equatable, Sendable {
    /// Physical milliseconds of the pass.
    var at: Int64
    var cursors: [UInt32: Int64]

    init(at: Int64, cursors: [UInt32: Int64]) {
        self.at = at
        self.cursors = cursors
    }

    init(at: Int64, cursors peers: [PeerRecord]) {
        self.init(at: at, cursors: Dictionary(peers.map { ($0.node, $0.cursor) }, uniquingKeysWith: max))
    }

    /// The marks after a pass at `now` (this pass's added when the peers'
    /// cursors differ from the newest's, those older than the one a retention
    /// old dropped, thinned), whether they changed, and the newest mark at
    /// least a retention old (with no retention, the cursors now).
    static func updated(_ recorded: [PurgeMark], peers: [PeerRecord], now: Int64, retention: Int64)
        -> (kept: [PurgeMark], changed: Bool, settled: PurgeMark?) {
        // Marks from the future (the clock went back) say nothing.
        var marks = recorded.filter { $0.at <= now }
        let current = PurgeMark(at: now, cursors: peers)
        let settled = retention == 0 ? current : marks.last { SyncStore.milliseconds(from: $0.at, to: now) >= retention }
        if let settled { marks.removeAll { $0.at < settled.at } }
        if marks.last.map({ $0.cursors != current.cursors }) ?? true { marks.append(current) }
        thin(&marks)
        return (marks, marks != recorded, settled)
    }

    /// The most marks a store keeps; beyond, the one closest to its neighbours goes.
    static let maxPurgeMarks = 16

    /// `at:node=cursor,node=cursor;…`, oldest first. Text that does not read
    /// (it is only ever written here) counts as no marks: tombstones then wait longer.
    static func list(_ text: String?) -> [PurgeMark] {
        guard let text, !text.isEmpty else { return [] }
        var marks: [PurgeMark] = []
        for item in text.split(separator: ";") {
            let parts = item.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, let at = Int64(parts[0]) else { return [] }
            var cursors: [UInt32: Int64] = [:]
            for pair in parts[1].split(separator: ",") {
                let fields = pair.split(separator: "=")
                guard fields.count == 2, let node = UInt32(fields[0]), let cursor = Int64(fields[1]) else { return [] }
                cursors[node] = cursor
            }
            marks.append(PurgeMark(at: at, cursors: cursors))
        }
        return marks.sorted { $0.at < $1.at }
    }

    static func text(_ marks: [PurgeMark]) -> String {
        marks.map { mark in
            "\(mark.at):" + mark.cursors.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        }.joined(separator: ";")
    }

    /// At most `maxPurgeMarks`, the oldest and the newest kept: the marks
    /// left are spread over the time they span.
    static func thin(_ marks: inout [PurgeMark]) {
        while marks.count > maxPurgeMarks {
            // Without overflow: a damaged file's marks may be at any time.
            func gap(_ i: Int) -> Int64 { SyncStore.milliseconds(from: marks[i - 1].at, to: marks[i + 1].at) }
            let closest = (1..<(marks.count - 1)).min { gap($0) < gap($1) }!
            marks.remove(at: closest)
        }
    }
}
