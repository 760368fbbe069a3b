import Foundation
import SyncTransport

/// A pending local change selected for sending.
package struct OutboundRow: Sendable {
    var key: String
    var seq: Int64
    var entry: WireEntry
    var size: Int
    /// True when the value is over the inline limit and goes in chunks (value not loaded).
    var isLarge: Bool
}

/// The result of applying one batch from the peer.
struct ApplyResult: Sendable {
    var applied = 0
    var ignored = 0
    var rejected: [SyncMessage.Rejection] = []
    var conflicts: [ConflictRecord] = []
    var changes: [StoreChange] = []
    /// Entries refused for a version out of range (a subset of `rejected`).
    var versionRefusals: [VersionRefusal] = []
}

/// A remote entry refused because its version is out of range.
package struct VersionRefusal: Sendable, Equatable {
    var key: String
    /// How far the version's time is ahead of this device's clock (0 when the
    /// version is refused for another reason: negative, or base after version).
    var aheadMilliseconds: Int64
}

/// One resolved conflict, as kept in `sync_conflicts`.
public struct ConflictRecord: Sendable, Equatable, Codable {
    public let key: String
    public let localVersion: HLCTimestamp
    public let remoteVersion: HLCTimestamp
    /// Which write was kept.
    public let winner: ConflictWinner
    /// How the conflict was resolved.
    public let rule: ConflictRule
}

extension SyncStore {
    /// Values above this size travel in checksummed chunks.
    static let inlineValueLimit = SyncPolicy.automaticLimit

    // MARK: inbound

    /// Applies entries from the peer in one transaction, decided by
    /// `ApplyPlanner` (policies, version bound, merge rule) and executed by
    /// `execute`: what a replication session does with a batch, for callers
    /// without a session (benchmarks). Counts and reports nothing: that is
    /// the session driver's business.
    func applyRemote(_ entries: [WireEntry], from peer: UInt32 = 0, peerRole: DeviceRole, mismatched: Set<String>,
                     completingChunksOf chunked: (key: String, version: HLCTimestamp)? = nil,
                     lastArrivalWins: Bool = false, durableBeforeReturn: Bool = true) throws -> ApplyResult {
        let now = physicalClock.nowMilliseconds()
        let context = ApplyPlanner.Context(peerRole: peerRole, mismatched: mismatched,
                                           versionBound: SyncStore.versionBound(now: now, ahead: options.maxRemoteClockAhead), now: now,
                                           maxValueSize: options.maxValueSize, lastArrivalWins: lastArrivalWins)
        var plan = ApplyPlan()
        let outcome = try execute(entries, from: peer, completing: chunked.map { ChunkedVersion(key: $0.key, version: $0.version) },
                                  durable: durableBeforeReturn) { local in
            plan = ApplyPlanner.plan(entries, local: local, registry: registry, context: context)
            return plan
        }
        return ApplyResult(applied: plan.applied, ignored: plan.ignored, rejected: plan.rejected, conflicts: outcome.conflicts,
                           changes: outcome.changes, versionRefusals: plan.versionRefusals)
    }

    /// Executes a plan for entries from `peer` in one transaction: reads the
    /// stored state of their keys (values decrypted), asks `plan`, stores what
    /// it takes or merges, logs its conflicts. Idempotent with the planner's rule.
    ///
    /// The local rows are read with one statement per group of keys
    /// (`loadRows`) and the winners written several rows per statement (`saveRows`).
    ///
    /// An entry taken from `peer` joins the stream for the other peers (when
    /// its key replicates from this device) and is never sent back to `peer`.
    ///
    /// Returns once the commit is on stable storage (`syncCommitted()`) when
    /// `durable`, since the caller acknowledges it; otherwise the caller must
    /// sync before acknowledging.
    func execute(_ entries: [WireEntry], from peer: UInt32, completing chunked: ChunkedVersion?, durable: Bool,
                 receivedThrough: (through: Int64, anchor: Int64)? = nil, passingOver: Int64? = nil,
                 plan decide: ([String: EntryState]) -> ApplyPlan) throws -> ApplyOutcome {
        try checkOpen()
        let now = physicalClock.nowMilliseconds()
        let outcome = try database.write({ conn -> ApplyOutcome in
            var outcome = ApplyOutcome()
            // Where the stream ends as the transaction begins (other writers' sequences caught up with).
            let positionBefore = nextSeq.withLock { $0 } - 1
            var taken: Int64 = 0
            let waiting = try conn.statement("SELECT EXISTS (SELECT 1 FROM sync_chunks), EXISTS (SELECT 1 FROM sync_rebaseline_marks)")
            _ = try waiting.step()
            let hasStagedChunks = waiting.int(0) != 0
            let hasRebaselineMarks = waiting.int(1) != 0
            waiting.reset()
            // Every key of the batch (a key twice, or one the registry does not declare, loads
            // nothing more; the planner refuses the latter): no lookups or hashing per entry here.
            let stored = try loadRows(conn, keys: entries.map(\.key), valueFile: .ifReadable)
            // Rows a re-baseline notice marked count as absent, as the notice would have removed
            // them (the baseline brings back what the phone still has); the version each was marked at.
            let marked = hasRebaselineMarks ? try rebaselineMarked(conn, keys: entries.map(\.key), stored: stored) : [:]
            let local = marked.isEmpty ? stored : stored.filter { marked[$0.key] == nil }
            let plan = decide(local.mapValues(\.state))
            // Marked rows the peer sent again at the very version and value they hold: they stay as they are.
            var keptMarked: [(key: String, lane: SyncLane)] = []
            var writes: [StoredRow] = []
            var encrypted: Set<String> = []
            // Our rows that `peer` had (it sent them, or acknowledged them), which it now sends
            // older: it lost ours.
            var resend: [String] = []
            var peerCursor: Int64?
            writes.reserveCapacity(plan.steps.count)
            outcome.changes.reserveCapacity(plan.steps.count)
            for step in plan.steps {
                let incoming = step.entry
                if case .refuse = step.verdict { continue }
                guard let descriptor = (step.registered ?? registry.registered(forEntry: incoming.key))?.descriptor else { continue }
                clock.observe(incoming.version)
                if let conflict = step.verdict.conflict {
                    try logConflict(conn, &outcome, key: incoming.key, local: conflict.local, remote: incoming.version,
                                    winner: conflict.winner, rule: conflict.rule, now: now)
                }
                let row: StoredRow
                switch step.verdict {
                case .refuse:
                    continue
                case .ignore:
                    // In the lane it is in (a change released for sending, or taken from a peer, stays sendable).
                    if let local = local[incoming.key], peer != 0, incoming.version < local.version, local.lane.isSent,
                       descriptor.replicates(from: role) {
                        if peerCursor == nil, local.originPeer != peer { peerCursor = try SyncStore.peerRecord(conn, node: peer)?.cursor ?? 0 }
                        if local.originPeer == peer || local.changeSeq <= peerCursor ?? 0 { resend.append(incoming.key) }
                    }
                    continue
                case .take:
                    // The same write (a merge gives one version two values: then the phone's copy is taken).
                    if let version = marked[incoming.key], version == incoming.version, let held = stored[incoming.key],
                       held.deleted == incoming.deleted, held.deleted || held.value == incoming.value {
                        keptMarked.append((incoming.key, descriptor.replicates(from: role) ? .automatic : .none))
                        continue
                    }
                    row = StoredRow(key: incoming.key, value: incoming.deleted ? nil : (incoming.value ?? []), encoding: incoming.encoding,
                                    version: incoming.version, base: incoming.base, deleted: incoming.deleted, encrypted: false,
                                    size: incoming.deleted ? 0 : (incoming.value?.count ?? 0), changeSeq: takeSeq(),
                                    lane: descriptor.replicates(from: role) ? .automatic : .none, originPeer: peer)
                    taken += 1
                case .merge(let value, let version, let base, _):
                    // A merge is new information for the peer too: send it (the peer's
                    // re-merge of a join is a no-op, so this ends).
                    let lane = SyncStore.mergedLane(for: descriptor, on: role, size: value.count, replacing: local[incoming.key]?.lane)
                    if SyncStore.defers(descriptor, in: lane) { outcome.deferred.append((incoming.key, value.count)) }
                    row = StoredRow(key: incoming.key, value: value, encoding: incoming.encoding, version: version, base: base,
                                    deleted: false, encrypted: false, size: value.count, changeSeq: takeSeq(), lane: lane)
                }
                if descriptor.security == .encrypted { encrypted.insert(row.key) }
                writes.append(row)
                outcome.changes.append(StoreChange(key: row.key, kind: row.deleted ? .removed : .set, origin: .remote, version: row.version,
                                                   peer: peer == 0 ? nil : peer))
            }
            try saveRows(conn, writes[...], encrypt: { !encrypted.isEmpty && encrypted.contains($0.key) }, writtenAt: now)
            if !marked.isEmpty {
                try settleRebaselineMarks(conn, kept: keptMarked, written: writes.lazy.map(\.key).filter { marked[$0] != nil }, from: peer)
            }
            if !resend.isEmpty {
                // The peer holds an older version of a change it once sent us (it was re-baselined
                // after purging the tombstone, or a stale copy arrived): ours goes back to it, as a
                // change of this store, or the two would never agree again.
                let written = Set(writes.map(\.key))
                let update = try conn.statement("UPDATE entries SET origin_peer = 0, change_seq = ?1 WHERE key = ?2")
                for key in resend where !written.contains(key) {
                    update.reset()
                    update.bind(1, takeSeq())
                    update.bind(2, key)
                    try update.run()
                }
            }
            if let chunked {
                let delete = try conn.statement("DELETE FROM sync_chunks WHERE key = ? AND ver = ? AND node = ?")
                delete.bind(1, chunked.key)
                delete.bind(2, chunked.version.packed)
                delete.bind(3, Int64(chunked.version.node))
                try delete.run()
            }
            if !outcome.conflicts.isEmpty { try pruneConflictLog(conn, now: now) }
            if let receivedThrough {
                try SyncStore.recordReceived(conn, from: peer, through: receivedThrough.through, anchor: receivedThrough.anchor)
            }
            if hasStagedChunks {
                // Transfers of versions that the stored value now overtakes can never win: drop their chunks.
                // One at the very version may still bring another value (a resolver's merge): it stays.
                for row in writes { try SyncStore.discardStagedChunks(conn, key: row.key, before: row.version) }
            }
            // Every position given out here is a change taken from `peer` (no merge, nothing sent back):
            // its cursor moves past them here, instead of in a transaction of its own once read.
            let positionAfter = nextSeq.withLock { $0 } - 1
            if let passingOver, passingOver == positionBefore, positionAfter > positionBefore, positionAfter - positionBefore == taken {
                let move = try conn.statement("UPDATE sync_peers SET acked_through = ?2, last_seen = ?3 WHERE peer_node = ?1 AND acked_through = ?4")
                move.bind(1, Int64(peer))
                move.bind(2, positionAfter)
                move.bind(3, now)
                move.bind(4, passingOver)
                try move.run()
                if conn.changes == 1 { outcome.passedOverThrough = positionAfter }
            }
            return outcome
        }, onCommit: { outcome in
            // Remote values are read through on demand: a large initial sync does not fill memory.
            cache.invalidate(outcome.changes.lazy.map(\.key))
        })
        publishCommitted(outcome.changes)
        if !outcome.changes.isEmpty {
            // Sessions with the other peers have something new to send.
            localWrites.publish(peer)
        }
        // The caller acknowledges this commit and the peer then forgets the entries: on stable
        // storage first. After publishing: observers need no fsync to see the values.
        if durable { try syncCommitted() }
        if outcome.passedOverThrough != nil { purgeTombstonesIfDue() }
        return outcome
    }

    /// Changes applied outside any live session (queued delivery): wakes every
    /// session (the one with the peer they came from too), and makes an idle
    /// state computed before them stale (`SyncPeer.waitUntilIdle`).
    func noteAppliedOutsideSessions() {
        localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
        localWrites.publish(SyncStore.thisDevice)
    }

    /// Why a remote entry's version cannot be accepted, if it cannot: its time
    /// is past `bound` (this device's clock plus `maxRemoteClockAhead`), it is
    /// negative, or its base (what its writer had seen) is after the version itself.
    static func versionRefusal(_ entry: WireEntry, bound: Int64, now: Int64) -> VersionRefusal? {
        let version = entry.version.packed
        guard version < 0 || version > bound || entry.base.packed < 0 || entry.base > entry.version else { return nil }
        let ahead = version > bound ? max(0, entry.version.physicalMilliseconds.subtractingReportingOverflow(now).partialValue) : 0
        return VersionRefusal(key: entry.key, aheadMilliseconds: ahead)
    }

    /// The stored rows of `keys` (those that exist), by key: one statement per
    /// group of up to `loadRowsGroup` keys instead of one `loadRow` per key,
    /// each group with the smallest statement that takes it (a batch of one
    /// entry looks up one key, not one and 127 NULLs).
    func loadRows(_ conn: SQLiteConnection, keys: [String], valueFile: ValueFileRead = .required) throws -> [String: StoredRow] {
        var rows: [String: StoredRow] = [:]
        var start = 0
        while start < keys.count {
            let group = keys[start..<min(keys.count, start + SyncStore.loadRowsGroup)]
            let size = SyncStore.loadRowsSQL.firstIndex { $0.parameters >= group.count }!
            let stmt = try conn.statement(SyncStore.loadRowsSQL[size].sql)
            defer { stmt.reset() }
            // Unused parameters stay NULL (a statement comes from the cache cleared): they match no key.
            for (offset, key) in group.enumerated() {
                stmt.bind(Int32(offset + 1), key)
            }
            while try stmt.step() {
                let row = try decodeRow(stmt, valueFile: valueFile)
                rows[row.key] = row
            }
            start += group.count
        }
        return rows
    }

    static let loadRowsGroup = 128
    /// `loadRows`' statements by the number of keys they take, the largest `loadRowsGroup`.
    static let loadRowsSQL: [(parameters: Int, sql: String)] = [1, 8, 32, loadRowsGroup].map { count in
        (count, "SELECT \(rowColumns) FROM entries WHERE key IN (\((1...count).map { "?\($0)" }.joined(separator: ", ")))")
    }

    private func logConflict(_ conn: SQLiteConnection, _ result: inout ApplyOutcome, key: String, local: HLCTimestamp,
                             remote: HLCTimestamp, winner: ConflictWinner, rule: ConflictRule, now: Int64) throws {
        // One row per resolution: a duplicated delivery of the same pair is not logged (or counted) again.
        let stmt = try conn.statement("""
            INSERT OR IGNORE INTO sync_conflicts(key, local_ver, local_node, remote_ver, remote_node, winner, rule, resolved_at)
            VALUES(?, ?, ?, ?, ?, ?, ?, ?)
            """)
        stmt.bind(1, key)
        stmt.bind(2, local.packed)
        stmt.bind(3, Int64(local.node))
        stmt.bind(4, remote.packed)
        stmt.bind(5, Int64(remote.node))
        stmt.bind(6, winner.rawValue)
        stmt.bind(7, rule.rawValue)
        stmt.bind(8, now)
        try stmt.run()
        guard conn.changes > 0 else { return }
        if rule == .mergeTooLarge {
            logger.warning("a resolver's merge was over maxValueSize: the last writer's value was kept, the other write's lost",
                           metadata: ["key": "\(PeerText.escaped(key))", "winner": "\(winner)"])
        }
        result.conflicts.append(ConflictRecord(key: key, localVersion: local, remoteVersion: remote, winner: winner, rule: rule))
    }

    /// Keeps the conflict log within `StoreOptions.conflictLogLimit` rows and
    /// `conflictLogMaxAge` (the oldest resolutions go first).
    private func pruneConflictLog(_ conn: SQLiteConnection, now: Int64) throws {
        let rows = try conn.statement("""
            DELETE FROM sync_conflicts WHERE id <= (SELECT id FROM sync_conflicts ORDER BY id DESC LIMIT 1 OFFSET ?1)
            """)
        rows.bind(1, max(0, options.conflictLogLimit))
        try rows.run()
        if let maxAge = options.conflictLogMaxAge {
            let seconds = maxAge.components.seconds
            let ageMilliseconds = seconds >= Int64.max / 1000 ? Int64.max : max(0, seconds) * 1000
            let (cutoff, overflow) = now.subtractingReportingOverflow(ageMilliseconds)
            if !overflow {
                let old = try conn.statement("DELETE FROM sync_conflicts WHERE resolved_at < ?1")
                old.bind(1, cutoff)
                try old.run()
            }
        }
    }

    /// The conflict log, newest first.
    public func conflictLog(limit: Int = 1000) throws -> [ConflictRecord] {
        try checkOpen()
        return try database.read { conn in
            let stmt = try conn.statement("SELECT key, local_ver, local_node, remote_ver, remote_node, winner, rule FROM sync_conflicts ORDER BY id DESC LIMIT ?")
            stmt.bind(1, limit)
            var records: [ConflictRecord] = []
            while try stmt.step() {
                // Rows are written only by this engine; one it cannot read is passed over.
                guard let winner = ConflictWinner(rawValue: stmt.string(5)), let rule = ConflictRule(rawValue: stmt.string(6)) else { continue }
                records.append(ConflictRecord(key: stmt.string(0),
                                              localVersion: HLCTimestamp(packed: stmt.int64(1), node: UInt32(truncatingIfNeeded: stmt.int64(2))),
                                              remoteVersion: HLCTimestamp(packed: stmt.int64(3), node: UInt32(truncatingIfNeeded: stmt.int64(4))),
                                              winner: winner, rule: rule))
            }
            return records
        }
    }

    // MARK: chunks

    /// AES-GCM's combined box adds a 12-byte nonce and a 16-byte tag to a sealed chunk.
    static let sealedChunkOverhead = 28

    /// Stages one chunk (sealed when the key is encrypted); returns how many
    /// chunks from index 0 are now staged without a gap.
    ///
    /// Bounded: staged chunks of older versions of the key go first; the
    /// chunks of one transfer may never add up to more than its announced
    /// total (throws `.malformedMessage`); and when all staged transfers would
    /// exceed `StoreOptions.maxStagedChunkBytes`, the other transfers are
    /// dropped (they are resent from their start when their turn comes).
    /// Chunks staged for another value of the version (another total size or
    /// CRC-32: a resolver's merge) go first, and the result says so.
    func stageChunk(_ chunk: SyncMessage.Chunk, encrypted: Bool) throws -> StagedChunks {
        try checkOpen()
        let key = chunk.entry.key
        let version = chunk.entry.version
        let overhead = encrypted ? SyncStore.sealedChunkOverhead : 0
        // Saturating: `maxValueSize = .max` (no limit of the app's own) must not overflow.
        let (sealing, overflowA) = overhead.multipliedReportingOverflow(by: chunk.count)
        let (room, overflowB) = options.maxValueSize.addingReportingOverflow(sealing)
        let limit = max(options.maxStagedChunkBytes, overflowA || overflowB ? .max : room)
        return try database.write { conn in
            let stale = try conn.statement("DELETE FROM sync_chunks WHERE key = ?1 AND (ver < ?2 OR (ver = ?2 AND node < ?3))")
            stale.bind(1, key)
            stale.bind(2, version.packed)
            stale.bind(3, Int64(version.node))
            try stale.run()
            let otherValue = try conn.statement("""
                DELETE FROM sync_chunks WHERE key = ?1 AND ver = ?2 AND node = ?3 AND (total_size != ?4 OR total_crc != ?5)
                """)
            otherValue.bind(1, key)
            otherValue.bind(2, version.packed)
            otherValue.bind(3, Int64(version.node))
            otherValue.bind(4, chunk.totalSize)
            otherValue.bind(5, Int64(chunk.totalChecksum))
            try otherValue.run()
            let replaced = conn.changes > 0
            let mine = try conn.statement("""
                SELECT coalesce(sum(length(data)), 0), count(*) FROM sync_chunks WHERE key = ?1 AND ver = ?2 AND node = ?3 AND idx != ?4
                """)
            mine.bind(1, key)
            mine.bind(2, version.packed)
            mine.bind(3, Int64(version.node))
            mine.bind(4, chunk.index)
            _ = try mine.step()
            let mineSealed = mine.int(0)
            let stagedBytes = mineSealed - overhead * mine.int(1)
            mine.reset()
            guard stagedBytes + chunk.bytes.count <= chunk.totalSize else {
                throw SyncError(.malformedMessage, "the chunks of \(key) add up to more than the \(chunk.totalSize) bytes announced for the value")
            }
            let all = try conn.statement("SELECT coalesce(sum(length(data)), 0) FROM sync_chunks WHERE NOT (key = ?1 AND ver = ?2 AND node = ?3)")
            all.bind(1, key)
            all.bind(2, version.packed)
            all.bind(3, Int64(version.node))
            _ = try all.step()
            let others = all.int(0)
            all.reset()
            if others + mineSealed + chunk.bytes.count + overhead > limit {
                let drop = try conn.statement("DELETE FROM sync_chunks WHERE NOT (key = ?1 AND ver = ?2 AND node = ?3)")
                drop.bind(1, key)
                drop.bind(2, version.packed)
                drop.bind(3, Int64(version.node))
                try drop.run()
                logger.notice("staged chunks of other large values were dropped to stay within maxStagedChunkBytes; they will be sent again")
            }
            let data = encrypted ? try cipherOrThrow().seal(chunk.bytes, keyName: key) : chunk.bytes
            let insert = try conn.statement("""
                INSERT OR REPLACE INTO sync_chunks(key, ver, node, idx, data, total_size, total_crc) VALUES(?, ?, ?, ?, ?, ?, ?)
                """)
            insert.bind(1, key)
            insert.bind(2, version.packed)
            insert.bind(3, Int64(version.node))
            insert.bind(4, chunk.index)
            insert.bind(5, data)
            insert.bind(6, chunk.totalSize)
            insert.bind(7, Int64(chunk.totalChecksum))
            try insert.run()
            return StagedChunks(contiguous: try contiguousChunks(conn, key: key, version: version), replacedAnotherValue: replaced)
        }
    }

    /// Deletes staged chunks of `key` at or before `version` (a value the
    /// store now holds, or newer): they can never complete into a value that wins.
    func discardStagedChunks(key: String, through version: HLCTimestamp) throws {
        try database.write { conn in try SyncStore.discardStagedChunks(conn, key: key, through: version) }
    }

    func discardStagedChunks(key: String, before version: HLCTimestamp) throws {
        try database.write { conn in try SyncStore.discardStagedChunks(conn, key: key, before: version) }
    }

    static func discardStagedChunks(_ conn: SQLiteConnection, key: String, through version: HLCTimestamp) throws {
        try discardStagedChunks(conn, key: key, upTo: version, including: true)
    }

    /// Drops the staged chunks of `key`'s versions older than `version` (those
    /// of `version` itself may carry another value of it: a resolver's merge).
    static func discardStagedChunks(_ conn: SQLiteConnection, key: String, before version: HLCTimestamp) throws {
        try discardStagedChunks(conn, key: key, upTo: version, including: false)
    }

    private static func discardStagedChunks(_ conn: SQLiteConnection, key: String, upTo version: HLCTimestamp, including: Bool) throws {
        let stmt = try conn.statement("DELETE FROM sync_chunks WHERE key = ?1 AND (ver < ?2 OR (ver = ?2 AND node \(including ? "<=" : "<") ?3))")
        stmt.bind(1, key)
        stmt.bind(2, version.packed)
        stmt.bind(3, Int64(version.node))
        try stmt.run()
    }

    /// Bytes of staged chunks in the store (sealed size for encrypted keys).
    public func stagedChunkBytes() throws -> Int {
        try checkOpen()
        return try database.read { conn in
            let stmt = try conn.statement("SELECT coalesce(sum(length(data)), 0) FROM sync_chunks")
            defer { stmt.reset() }
            _ = try stmt.step()
            return stmt.int(0)
        }
    }

    private func contiguousChunks(_ conn: SQLiteConnection, key: String, version: HLCTimestamp) throws -> Int {
        let stmt = try conn.statement("SELECT idx FROM sync_chunks WHERE key = ? AND ver = ? AND node = ? ORDER BY idx")
        stmt.bind(1, key)
        stmt.bind(2, version.packed)
        stmt.bind(3, Int64(version.node))
        var expected = 0
        while try stmt.step() {
            if stmt.int(0) != expected { break }
            expected += 1
        }
        try stmt.run()
        return expected
    }

    /// The staged chunks of one transfer, joined.
    func assembleChunks(key: String, version: HLCTimestamp, encrypted: Bool) throws -> [UInt8] {
        try database.read { conn in
            let stmt = try conn.statement("SELECT data FROM sync_chunks WHERE key = ? AND ver = ? AND node = ? ORDER BY idx")
            stmt.bind(1, key)
            stmt.bind(2, version.packed)
            stmt.bind(3, Int64(version.node))
            var bytes: [UInt8] = []
            while try stmt.step() {
                let data = stmt.blob(0) ?? []
                bytes += encrypted ? try cipherOrThrow().open(data, keyName: key) : data
            }
            return bytes
        }
    }

    /// Transfers staged here and not complete, for the hello. Staged chunks of
    /// a version the store has overtaken are deleted first: they would never
    /// complete into a winning value (those of the very version held stay: a
    /// resolver's merge may give it another value, which the apply joins).
    func partialTransfers() throws -> [PartialTransfer] {
        try database.write { conn in
            try conn.execute("""
                DELETE FROM sync_chunks WHERE EXISTS (
                    SELECT 1 FROM entries e WHERE e.key = sync_chunks.key
                      AND (e.ver > sync_chunks.ver OR (e.ver = sync_chunks.ver AND e.node > sync_chunks.node)))
                """)
            let stmt = try conn.statement("SELECT DISTINCT key, ver, node FROM sync_chunks")
            var found: [(String, HLCTimestamp)] = []
            while try stmt.step() {
                found.append((stmt.string(0), HLCTimestamp(packed: stmt.int64(1), node: UInt32(truncatingIfNeeded: stmt.int64(2)))))
            }
            return try found.map { PartialTransfer(key: $0.0, version: $0.1, received: try contiguousChunks(conn, key: $0.0, version: $0.1)) }
        }
    }

    private func cipherOrThrow() throws -> AtRestCipher {
        guard let cipher else { throw SyncError(.encryptionKeyMissing, "an encrypted key needs the store's master key") }
        return cipher
    }

}

/// What waits to be sent, by lane.
public struct PendingSummary: Sendable, Equatable, Codable {
    /// Automatic changes not yet acknowledged.
    public let automatic: Int
    /// Manual changes released by `sync()` and not yet acknowledged.
    public let manualReleased: Int
    /// Manual and deferred changes waiting for the next `sync()`.
    public let manualWaiting: Int
    public let oldestPendingAgeMilliseconds: Int64?

    public var total: Int { automatic + manualReleased + manualWaiting }
}

extension SyncStore {
    /// The `sync_meta` name of how far `peer`'s stream was received (kept when the peer is forgotten).
    static func receivedThroughName(_ peer: UInt32) -> String { "received_through_\(peer)" }

    /// How far this store received and applied `peer`'s stream without a
    /// gap (protocol 3), and the newest anchor there ("through/anchor" in
    /// `sync_meta`); zeros when unknown.
    func receivedThrough(from peer: UInt32) throws -> (through: Int64, anchor: Int64) {
        let parts = (try meta(SyncStore.receivedThroughName(peer)) ?? "").split(separator: "/")
        guard parts.count == 2, let through = Int64(parts[0]), let anchor = Int64(parts[1]) else { return (0, 0) }
        return (through, anchor)
    }

    /// Records that `peer`'s stream is received through `through` (never back), in its own transaction.
    func recordReceived(from peer: UInt32, through: Int64, anchor: Int64) throws {
        try checkOpen()
        try database.write { conn in try SyncStore.recordReceived(conn, from: peer, through: through, anchor: anchor) }
    }

    /// Writes "through/anchor" for `peer` in `sync_meta` unless it holds a position as far already.
    static func recordReceived(_ conn: SQLiteConnection, from peer: UInt32, through: Int64, anchor: Int64) throws {
        let record = try conn.statement("""
            INSERT INTO sync_meta(name, value) VALUES(?1, ?2)
            ON CONFLICT(name) DO UPDATE SET value = excluded.value WHERE CAST(value AS INTEGER) < CAST(excluded.value AS INTEGER)
            """)
        record.bind(1, receivedThroughName(peer))
        record.bind(2, "\(through)/\(anchor)")
        try record.run()
    }

    /// The first change sent to `peer` after `cursor` and through `position`
    /// whose version is newer than `anchor` (packed), if any.
    func firstChangeNewer(than anchor: Int64, for peer: UInt32, after cursor: Int64, through position: Int64) throws -> Int64? {
        try checkOpen()
        return try database.read { conn in
            let stmt = try conn.statement("""
                SELECT min(e.change_seq) FROM entries e
                WHERE e.change_seq > ?1 AND e.change_seq <= ?2 AND \(SyncStore.isSentCondition) AND e.origin_peer != ?3 AND e.ver > ?4
                """)
            defer { stmt.reset() }
            stmt.bind(1, cursor)
            stmt.bind(2, position)
            stmt.bind(3, Int64(peer))
            stmt.bind(4, anchor)
            guard try stmt.step(), !stmt.isNull(0) else { return nil }
            return stmt.int64(0)
        }
    }
}
