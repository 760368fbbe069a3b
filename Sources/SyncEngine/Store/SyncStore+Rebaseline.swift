import Foundation

/// Re-baselining a watch the phone forgot after purging tombstones.
///
/// The phone's notice names the newest purged version; the watch removes
/// what the phone already knew up to it, and the phone's baseline brings back
/// what is still alive. In a live session of protocol 2 or later, and
/// through the mailbox, the watch marks those entries instead
/// (`sync_rebaseline_marks`): the baseline's batches treat a marked row as
/// absent, and what is still marked goes when the phone says it caught up
/// (live), or when the mailbox read that carried the notice ends (queued:
/// the baseline the phone posted with it came in that read), so the app
/// never sees a value go that the baseline brings back. A phone of this
/// build ends a queued baseline with a caught-up marker, announced ahead of
/// its notice: the watch then keeps the marks until the marker comes, however
/// many reads the baseline takes.
extension SyncStore {
    /// When the entries a re-baseline notice names go.
    package enum RebaselineRemoval: Sendable {
        /// At once (a session of protocol 1, which has no caught-up notices).
        case immediately
        /// Marked; what is still marked goes at the phone's caught-up notice (a live session).
        case atCaughtUp
        /// Marked; what is still marked goes when the mailbox read ends, or at a caught-up notice.
        case afterQueuedRead
    }

    /// What ended a re-baseline's baseline: the phone's caught-up notice
    /// (every mark goes), or the end of a mailbox read (only if a queued
    /// notice marked entries).
    package enum RebaselineSweep: Sendable {
        /// The phone's caught-up notice (live).
        case caughtUp
        /// The end of a mailbox read: sweeps only marks of a queued notice
        /// whose phone did not announce a caught-up marker.
        case queuedRead
        /// The phone's queued caught-up marker: every mark goes.
        case queuedCaughtUp
    }

    static let queuedMarksMeta = "rebaseline_marks_queued"
    /// On a watch: the phone announced that its queued baseline ends with a caught-up marker.
    static let queuedCaughtUpExpectedMeta = "rebaseline_caught_up_expected"
    /// On a phone: the queued baseline for the pairing ends with a caught-up marker, not posted yet.
    static func queuedCaughtUpOwedMeta(_ pairingEpoch: String) -> String { "rebaseline_caught_up_owed:\(pairingEpoch)" }

    /// What a phone sends a watch it has no cursor for before the baseline,
    /// when it has purged tombstones: their newest version (packed), or nil.
    /// The entries the phone took from that watch join its baseline for it
    /// (the watch removes what the phone knew, and gets back what is alive).
    /// Each notice starts a new re-baseline generation for the peer
    /// (`rebaselineGeneration(for:)`), on stable storage before the notice
    /// leaves: acknowledgements of queued batches posted before it move no
    /// cursor (the notice may have removed what those batches brought).
    /// `queuedIn`: the notice goes through the mailbox of that pairing, and
    /// its baseline owes a caught-up marker (`owesQueuedCaughtUp(in:)`), on
    /// stable storage with the notice.
    func rebaselineNotice(for peer: UInt32, cursor: Int64, queuedIn pairingEpoch: String? = nil) throws -> Int64? {
        guard role == .phone, cursor == 0 else { return nil }
        let purged = Int64(try meta("purged_through") ?? "") ?? 0
        guard purged > 0 else { return nil }
        try database.write { conn in
            let stmt = try conn.statement("UPDATE entries SET origin_peer = 0 WHERE origin_peer = ?1")
            stmt.bind(1, Int64(peer))
            try stmt.run()
            // Past every generation this phone gave any watch (or a watch not known yet): batches
            // posted before, for whichever node, never pass for this baseline's, and a watch met
            // through the mailbox adopts the unknown peer's (`adoptRebaselineGeneration`).
            try SyncStore.writeMeta(conn, Self.rebaselineGenerationMeta(peer), String(try SyncStore.latestRebaselineGeneration(conn) &+ 1))
            if let pairingEpoch {
                try SyncStore.oweQueuedCaughtUp(conn, to: peer, in: pairingEpoch)
            } else {
                try SyncStore.writeMeta(conn, Self.liveCaughtUpOwedMeta(peer), "1")
            }
        }
        try syncCommitted()
        logger.notice("re-baselining a watch after purging tombstones", metadata: ["peer": "\(String(peer, radix: 16))"])
        return purged
    }

    /// The generation of the last re-baseline notice this store sent `peer`
    /// (0 for a watch, and before any): queued batches for it name their
    /// stream positions in it (`QueuedStreamPosition`).
    func rebaselineGeneration(for peer: UInt32) throws -> Int64 {
        Int64(try meta(Self.rebaselineGenerationMeta(peer)) ?? "") ?? 0
    }

    static func rebaselineGenerationMeta(_ peer: UInt32) -> String { "rebaseline_generation_\(peer)" }

    /// The newest re-baseline generation this store started for any peer (0 before any).
    static func latestRebaselineGeneration(_ conn: SQLiteConnection) throws -> Int64 {
        let prefix = rebaselineGenerationMeta(0).dropLast()
        return try readMeta(conn).filter { $0.key.hasPrefix(prefix) }.values.compactMap { Int64($0) }.max() ?? 0
    }
    static func liveRebaselineGenerationMeta(_ peer: UInt32) -> String { "rebaseline_live_generation_\(peer)" }
    /// On a watch: the purged version of the last notice from `peer` acted on, while that one was live.
    static func liveRebaselineMarkMeta(_ peer: UInt32) -> String { "rebaselined_live_by_\(peer)" }

    /// On a watch: the generation the last live re-baseline notice from
    /// `peer` started, if it named one (protocol 4). The phone's queued
    /// batches of an older generation were posted before that notice, and
    /// its baseline brings what they carried that still holds.
    func liveRebaselineGeneration(from peer: UInt32) throws -> Int64? {
        Int64(try meta(Self.liveRebaselineGenerationMeta(peer)) ?? "")
    }

    /// On a phone that just met `peer` through the mailbox: a queued notice
    /// and baseline it posted before it knew the watch's node
    /// (`MailboxReplicator.unknownPeer`) were that watch's, so their
    /// generation becomes the watch's and the watch's acknowledgements of
    /// that baseline move its cursor (else the baseline would go twice), and
    /// what the phone took from the watch joins the rest of it. Only
    /// a generation newer than the watch's own is taken: an acknowledgement
    /// of its batches from before may still come, and must move nothing.
    func adoptRebaselineGeneration(for peer: UInt32) throws {
        guard role == .phone, peer != MailboxReplicator.unknownPeer else { return }
        try database.write { conn in
            let meta = try SyncStore.readMeta(conn)
            let unknown = Self.rebaselineGenerationMeta(MailboxReplicator.unknownPeer)
            guard let adopted = Int64(meta[unknown] ?? ""),
                  adopted > Int64(meta[Self.rebaselineGenerationMeta(peer)] ?? "") ?? 0 else { return }
            try SyncStore.writeMeta(conn, Self.rebaselineGenerationMeta(peer), String(adopted))
            // As the notice would have for this node: what the phone took from the watch goes
            // in the rest of the baseline too (the notice marked it on the watch).
            let origin = try conn.statement("UPDATE entries SET origin_peer = 0 WHERE origin_peer = ?1")
            origin.bind(1, Int64(peer))
            try origin.run()
            try SyncStore.deleteMeta(conn, unknown)
        }
    }

    /// On a phone: a queued re-baseline notice went through the mailbox of
    /// `pairingEpoch` and its baseline's caught-up marker was not posted yet.
    func owesQueuedCaughtUp(in pairingEpoch: String) throws -> Bool {
        try meta(Self.queuedCaughtUpOwedMeta(pairingEpoch)) != nil
    }

    /// On a phone: the caught-up marker of the mailbox of `pairingEpoch` is posted.
    func settleQueuedCaughtUp(in pairingEpoch: String) throws {
        try database.write { conn in try SyncStore.deleteMeta(conn, Self.queuedCaughtUpOwedMeta(pairingEpoch)) }
    }

    /// On a phone: a live re-baseline notice went to `peer`, and no caught-up
    /// notice of a live session with it was acknowledged since. Until one is,
    /// the watch keeps what the notice marked; a mailbox that takes over the
    /// baseline ends it with an announced caught-up marker instead
    /// (`queueLiveCaughtUp(for:in:)`).
    static func liveCaughtUpOwedMeta(_ peer: UInt32) -> String { "rebaseline_live_caught_up_owed_\(peer)" }

    /// On a phone: whether `peer` has not acknowledged a live caught-up notice
    /// since the last live re-baseline notice it was sent.
    func owesLiveCaughtUp(to peer: UInt32) throws -> Bool {
        try meta(Self.liveCaughtUpOwedMeta(peer)) != nil
    }

    /// On a phone: `peer` acknowledged a live caught-up notice, and removed
    /// what a re-baseline notice marked. (Lost to a power cut, a mailbox
    /// posts a marker that finds nothing marked.)
    func settleLiveCaughtUp(for peer: UInt32) throws {
        try database.write { conn in try SyncStore.deleteMeta(conn, Self.liveCaughtUpOwedMeta(peer)) }
    }

    /// On a phone whose mailbox of `pairingEpoch` has just been posted the
    /// announcement of a caught-up marker for `peer`: the marker is owed
    /// there, and no longer to a live session. On stable storage before it returns.
    func queueLiveCaughtUp(for peer: UInt32, in pairingEpoch: String) throws {
        try database.write { conn in try SyncStore.oweQueuedCaughtUp(conn, to: peer, in: pairingEpoch) }
        try syncCommitted()
    }

    /// The caught-up marker owed to `peer` goes through the mailbox of `pairingEpoch`, not a live session.
    private static func oweQueuedCaughtUp(_ conn: SQLiteConnection, to peer: UInt32, in pairingEpoch: String) throws {
        try writeMeta(conn, queuedCaughtUpOwedMeta(pairingEpoch), "1")
        try deleteMeta(conn, liveCaughtUpOwedMeta(peer))
    }

    /// On a watch: the phone announced that the queued baseline after its next
    /// notice ends with a caught-up marker; until the marker comes, the end of
    /// a mailbox read removes nothing marked (`sweepRebaselineMarks`). On
    /// stable storage before it returns.
    func expectQueuedCaughtUp() throws {
        guard role == .watch else {
            throw SyncError(.protocolViolation, "a \(role) does not take caught-up markers; only a phone sends them to its watches")
        }
        try setMeta(Self.queuedCaughtUpExpectedMeta, "1")
        try syncCommitted()
    }

    /// The watches this phone sent a re-baseline notice (empty on a watch).
    package func rebaselinedPeers() throws -> Set<UInt32> {
        try checkOpen()
        let prefix = Self.rebaselineGenerationMeta(0).dropLast()
        return try database.read { conn in
            Set(try SyncStore.readMeta(conn).keys.compactMap { name in
                name.hasPrefix(prefix) ? UInt32(name.dropFirst(prefix.count)) : nil
            })
        }
    }

    /// Applies a phone's re-baseline notice on a watch: removes each entry of
    /// version ≤ `purgedThrough` that the phone already knew (taken from it,
    /// or acknowledged by it: in a sent lane at or before its cursor, a key
    /// that replicates to it and is declared alike), without new deletes in
    /// the stream; observers see the removed values go. Entries the phone
    /// never acknowledged stay. A repeated notice with the same version (a
    /// later session's: the endpoint acts on a notice once per session) only
    /// looks at the entries the watch held when the previous one was acted
    /// on; that session's phone sends its whole baseline again.
    /// `acknowledgedBefore`: the watch's cursor for the phone when the
    /// session that carries the notice began (nil: now). The phone sends the
    /// notice before it reads anything in that session, so what it
    /// acknowledges later in it, it did not know when it sent the notice, and
    /// it never sends those entries back: they stay.
    /// `removal` other than `.immediately`: the entries are marked instead
    /// (`sync_rebaseline_marks`), count as absent to the baseline's batches
    /// (`execute`), and what is still marked goes at the phone's caught-up
    /// notice or the mailbox read's end (`sweepRebaselineMarks`): the app
    /// never sees a value go that the baseline brings back. A queued notice
    /// (`.afterQueuedRead`) no newer than one already acted on does nothing
    /// (and when that one was live, the caught-up marker announced ahead of
    /// the queued one removes nothing).
    /// `generation`: the one a live notice of protocol 4 names, kept
    /// (`liveRebaselineGeneration(from:)`) with what it marks or removes.
    /// Returns how many entries were removed, or marked.
    func applyRebaseline(purgedThrough: Int64, from peer: UInt32, mismatched: Set<String>, acknowledgedBefore: Int64? = nil,
                         generation: Int64? = nil, removal: RebaselineRemoval = .immediately) throws -> Int {
        try checkOpen()
        guard role == .watch else {
            throw SyncError(.protocolViolation, "a \(role) does not take re-baseline notices; only a phone sends them to its watches")
        }
        let markName = "rebaselined_by_\(peer)"
        let liveMarkName = Self.liveRebaselineMarkMeta(peer)
        let (found, _, removed) = try database.write({ conn -> (Int, [String], [StoreChange]) in
            let meta = try SyncStore.readMeta(conn)
            var limit = Int64.max
            if let mark = meta[markName]?.split(separator: "/"), mark.count == 2, let actedOn = Int64(mark[0]) {
                // A queued notice no newer than one this watch acted on (live, or queued before) is
                // of a re-baseline that one superseded (the phone's purges only go forward): its
                // baseline may have been taken back, and what it would mark came since from the phone.
                if removal == .afterQueuedRead, actedOn >= purgedThrough {
                    // Superseded by a live notice: the caught-up marker announced ahead of this one ends
                    // its own baseline (taken back, or passed over), not the live one's.
                    if let live = Int64(meta[liveMarkName] ?? ""), live >= purgedThrough {
                        try SyncStore.deleteMeta(conn, Self.queuedCaughtUpExpectedMeta)
                    }
                    return (0, [], [])
                }
                if actedOn == purgedThrough, let seen = Int64(mark[1]) { limit = seen }
            }
            let record = try SyncStore.peerRecord(conn, node: peer)
            let cursor = min(record?.cursor ?? 0, acknowledgedBefore ?? .max)
            let skipped = mismatched.union(record?.mismatched ?? [])
            let select = try conn.statement("""
                SELECT key, ver, node, deleted, change_seq, lane, origin_peer, in_file FROM entries
                WHERE ver <= ?1 AND change_seq <= ?2
                """)
            select.bind(1, purgedThrough)
            select.bind(2, limit)
            var known: [(key: String, version: HLCTimestamp, deleted: Bool, inFile: Bool)] = []
            while try select.step() {
                let key = select.string(0)
                let isSent = SyncLane(rawValue: select.int(5))?.isSent ?? false
                let fromPeer = UInt32(truncatingIfNeeded: select.int64(6)) == peer
                var acknowledged = false
                if !fromPeer, isSent, select.int64(4) <= cursor, let descriptor = registry.descriptor(forEntry: key) {
                    acknowledged = descriptor.replicates(from: role) && !skipped.contains(descriptor.name)
                }
                guard fromPeer || acknowledged else { continue }
                known.append((key, HLCTimestamp(packed: select.int64(1), node: UInt32(truncatingIfNeeded: select.int64(2))),
                              select.int(3) != 0, select.int(7) != 0))
            }
            select.reset()
            try SyncStore.writeMeta(conn, markName, "\(purgedThrough)/\(nextSeq.withLock { $0 } - 1)")
            if let generation { try SyncStore.writeMeta(conn, Self.liveRebaselineGenerationMeta(peer), String(generation)) }
            if removal == .afterQueuedRead {
                try SyncStore.deleteMeta(conn, liveMarkName)
            } else {
                try SyncStore.writeMeta(conn, liveMarkName, String(purgedThrough))
            }
            // A queued batch read before this (live) notice is not applied after it (`MailboxReplicator`).
            if removal != .afterQueuedRead { liveRebaselines.add(1, ordering: .sequentiallyConsistent) }
            if removal != .immediately {
                if removal == .afterQueuedRead { try SyncStore.writeMeta(conn, SyncStore.queuedMarksMeta, "1") }
                let mark = try conn.statement("INSERT OR REPLACE INTO sync_rebaseline_marks(key, ver, node) VALUES (?1, ?2, ?3)")
                for entry in known {
                    mark.reset()
                    mark.bind(1, entry.key)
                    mark.bind(2, entry.version.packed)
                    mark.bind(3, Int64(entry.version.node))
                    try mark.run()
                }
                return (known.count, [], [])
            }
            try deleteRebaselineMarks(conn, known.lazy.map(\.key))
            return (known.count, known.map(\.key), try removeRebaselined(conn, known))
        }, onCommit: { _, keys, _ in cache.invalidate(keys) })
        if removal != .immediately {
            logger.notice("marked entries the phone purged or sends again (re-baseline): those it does not send go once its baseline came",
                          metadata: ["count": "\(found)"])
            return found
        }
        if found > 0 {
            logger.notice("removed entries the phone purged or sends again (re-baseline)", metadata: ["count": "\(found)"])
        }
        publishCommitted(removed)
        return found
    }

    /// Deletes `entries` (a re-baseline's) in this transaction: value files
    /// released after the commit, a `.removed` change for each live value.
    private func removeRebaselined(_ conn: SQLiteConnection,
                                   _ entries: [(key: String, version: HLCTimestamp, deleted: Bool, inFile: Bool)]) throws -> [StoreChange] {
        let delete = try conn.statement("DELETE FROM entries WHERE key = ?1")
        var changes: [StoreChange] = []
        for entry in entries {
            delete.reset()
            delete.bind(1, entry.key)
            try delete.run()
            if entry.inFile { valueStorage.release(key: entry.key, version: entry.version) }
            guard !entry.deleted else { continue }
            let change = StoreChange(key: entry.key, kind: .removed, origin: .remote, version: entry.version)
            changes.append(change)
            shared.withLock { $0.transactionChanges.append(change) }
        }
        return changes
    }

    /// The phone's baseline came after a re-baseline notice that marked
    /// entries (`applyRebaseline(removal:)`): it caught up, or the mailbox
    /// read that carried a queued notice ended (`after`; `.queuedRead` does
    /// nothing unless a queued notice marked entries). Removes the entries
    /// still at their marked version (the baseline did not send them again:
    /// the phone purged them, or may not send them), observers see them go,
    /// and clears every mark. Returns how many entries were removed.
    func sweepRebaselineMarks(after sweep: RebaselineSweep) throws -> Int {
        try checkOpen()
        guard role == .watch else { return 0 }
        switch sweep {
        case .caughtUp: guard try database.read({ try $0.integer("SELECT EXISTS (SELECT 1 FROM sync_rebaseline_marks)") }) != 0 else { return 0 }
        case .queuedRead:
            guard try meta(SyncStore.queuedMarksMeta) != nil, try meta(SyncStore.queuedCaughtUpExpectedMeta) == nil else { return 0 }
        case .queuedCaughtUp:
            // A marker no announcement came before (its re-baseline was taken back) ends nothing.
            guard try meta(SyncStore.queuedCaughtUpExpectedMeta) != nil else { return 0 }
        }
        let (removedKeys, removed) = try database.write({ conn -> ([String], [StoreChange]) in
            let select = try conn.statement("""
                SELECT e.key, e.ver, e.node, e.deleted, e.in_file FROM sync_rebaseline_marks m
                JOIN entries e ON e.key = m.key AND e.ver = m.ver AND e.node = m.node
                """)
            var marked: [(key: String, version: HLCTimestamp, deleted: Bool, inFile: Bool)] = []
            while try select.step() {
                marked.append((select.string(0), HLCTimestamp(packed: select.int64(1), node: UInt32(truncatingIfNeeded: select.int64(2))),
                               select.int(3) != 0, select.int(4) != 0))
            }
            select.reset()
            let changes = try removeRebaselined(conn, marked)
            try conn.execute("DELETE FROM sync_rebaseline_marks")
            try SyncStore.deleteMeta(conn, SyncStore.queuedMarksMeta)
            if case .queuedCaughtUp = sweep { try SyncStore.deleteMeta(conn, SyncStore.queuedCaughtUpExpectedMeta) }
            return (marked.map(\.key), changes)
        }, onCommit: { keys, _ in cache.invalidate(keys) })
        if !removedKeys.isEmpty {
            logger.notice("removed entries the phone purged or does not send (re-baseline, its baseline came)", metadata: ["count": "\(removedKeys.count)"])
        }
        publishCommitted(removed)
        return removedKeys.count
    }

    /// Of `keys` (a batch's), the rows a re-baseline notice marked that
    /// still hold the marked version, with it. A mark whose row has changed
    /// since (a local write, or the row is gone) says nothing more: it goes.
    func rebaselineMarked(_ conn: SQLiteConnection, keys: [String], stored: [String: StoredRow]) throws -> [String: HLCTimestamp] {
        let select = try conn.statement("SELECT ver, node FROM sync_rebaseline_marks WHERE key = ?1")
        var marked: [String: HLCTimestamp] = [:]
        var stale: Set<String> = []
        for key in keys where marked[key] == nil {
            select.reset()
            select.bind(1, key)
            guard try select.step() else { continue }
            let version = HLCTimestamp(packed: select.int64(0), node: UInt32(truncatingIfNeeded: select.int64(1)))
            if stored[key]?.version == version { marked[key] = version } else { stale.insert(key) }
        }
        select.reset()
        try deleteRebaselineMarks(conn, stale)
        return marked
    }

    /// After a batch from `peer` met marked rows: those it sent again at the
    /// version they hold (`kept`) take `peer` as their origin and a new place
    /// in the stream, as the entry taken anew would; their marks go, and so do
    /// the marks of the rows it replaced (`written`). A marked row whose entry
    /// was refused keeps its mark and goes at the caught-up notice, as the
    /// notice alone would have removed it.
    func settleRebaselineMarks(_ conn: SQLiteConnection, kept: [(key: String, lane: SyncLane)], written: some Sequence<String>,
                               from peer: UInt32) throws {
        let update = try conn.statement("UPDATE entries SET origin_peer = ?1, change_seq = ?2, lane = ?3 WHERE key = ?4")
        for row in kept {
            update.reset()
            update.bind(1, Int64(peer))
            update.bind(2, takeSeq())
            update.bind(3, row.lane.rawValue)
            update.bind(4, row.key)
            try update.run()
        }
        try deleteRebaselineMarks(conn, kept.map(\.key) + written)
    }

    /// The version a re-baseline notice marked `key` at, while its row still
    /// holds it (nil: not marked). The chunks of that version, sent again by
    /// the baseline, are staged and applied (which keeps the row and settles
    /// the mark) rather than taken as already held.
    func rebaselineMark(forKey key: String) throws -> HLCTimestamp? {
        try checkOpen()
        return try database.read { conn in
            let select = try conn.statement("""
                SELECT m.ver, m.node FROM sync_rebaseline_marks m
                JOIN entries e ON e.key = m.key AND e.ver = m.ver AND e.node = m.node WHERE m.key = ?1
                """)
            select.bind(1, key)
            defer { select.reset() }
            return try select.step() ? HLCTimestamp(packed: select.int64(0), node: UInt32(truncatingIfNeeded: select.int64(1))) : nil
        }
    }

    /// How many entries a re-baseline notice marked that wait for the phone's caught-up notice.
    func rebaselineMarkCount() throws -> Int {
        try checkOpen()
        return Int(try database.read { try $0.integer("SELECT count(*) FROM sync_rebaseline_marks") })
    }

    private func deleteRebaselineMarks(_ conn: SQLiteConnection, _ keys: some Sequence<String>) throws {
        let delete = try conn.statement("DELETE FROM sync_rebaseline_marks WHERE key = ?1")
        for key in keys {
            delete.reset()
            delete.bind(1, key)
            try delete.run()
        }
    }
}
