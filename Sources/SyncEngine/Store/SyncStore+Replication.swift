import Foundation
import SyncTransport

/// A pending local change selected for sending.
struct OutboundRow: Sendable {
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
struct VersionRefusal: Sendable, Equatable {
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
    /// `local`, `remote` or `merged`.
    public let winner: String
    /// `last-writer-wins` or `resolver`.
    public let rule: String
}

extension SyncStore {
    /// Values above this size travel in checksummed chunks.
    static let inlineValueLimit = SyncPolicy.automaticLimit

    /// FROM clause of the queued changes with their entries: each outbox row
    /// `o`, then its entry `e` by primary key.
    static let queuedChanges = "sync_outbox o CROSS JOIN entries e ON e.key = o.key AND e.change_seq = o.seq"
    /// In a query over `entries e`: 1 while the entry's change waits in the outbox.
    static let isQueuedColumn = "EXISTS (SELECT 1 FROM sync_outbox o WHERE o.seq = e.change_seq AND o.key = e.key)"

    // MARK: outbound

    /// The highest change sequence a manual `sync()` has released.
    var manualFlushThrough: Int64 {
        (try? meta("manual_flush_through")).flatMap { $0.flatMap(Int64.init) } ?? 0
    }

    /// Releases every change made so far in the manual lane (and deferred
    /// automatic values) for sending. Returns how many entries that queues.
    @discardableResult
    public func requestManualSync() throws -> Int {
        try checkOpen()
        let count = try database.write { conn -> Int in
            let through = nextSeq.withLock { $0 } - 1
            try SyncStore.writeMeta(conn, "manual_flush_through", String(through))
            let stmt = try conn.statement("""
                SELECT count(*) FROM \(SyncStore.queuedChanges) WHERE e.lane = 2
                """)
            _ = try stmt.step()
            defer { stmt.reset() }
            return stmt.int(0)
        }
        localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
        localWrites.publish(())
        return count
    }

    /// Pending rows after `cursor`, in sequence order, until `maxEntries` or
    /// `maxBytes`; stops before the second large value. Values of large rows are not loaded.
    func pendingRows(after cursor: Int64, flushThrough: Int64, maxEntries: Int, maxBytes: Int,
                     skip: (String, Int64) -> Bool) throws -> (rows: [OutboundRow], scannedThrough: Int64) {
        try database.read { conn in
            // The outbox in sequence order, each row's entry found by its primary key.
            let stmt = try conn.statement("""
                SELECT e.key, o.seq, e.size, e.deleted, e.encoding, e.ver, e.node, e.base_ver, e.base_node, e.encrypted,
                       CASE WHEN e.size <= ?3 THEN e.value END, e.in_file
                FROM \(SyncStore.queuedChanges)
                WHERE o.seq > ?1 AND (e.lane = 1 OR o.seq <= ?2)
                ORDER BY o.seq
                """)
            stmt.bind(1, cursor)
            stmt.bind(2, flushThrough)
            stmt.bind(3, SyncStore.inlineValueLimit)
            defer { stmt.reset() }
            var rows: [OutboundRow] = []
            var bytes = 0
            var scanned = cursor
            while try stmt.step() {
                let key = stmt.string(0)
                let seq = stmt.int64(1)
                let size = stmt.int(2)
                let deleted = stmt.int(3) != 0
                let isLarge = !deleted && size > SyncStore.inlineValueLimit
                if skip(key, seq) {
                    scanned = seq
                    continue
                }
                if isLarge && !rows.isEmpty { break }
                var value = deleted ? nil : stmt.blob(10)
                let version = HLCTimestamp(packed: stmt.int64(5), node: UInt32(truncatingIfNeeded: stmt.int64(6)))
                if !deleted && !isLarge && stmt.int(11) != 0 {
                    value = try readValueFile(key: key, version: version, size: size, encrypted: stmt.int(9) != 0)
                } else if stmt.int(9) != 0, let sealed = value {
                    guard let cipher else { throw SyncError(.encryptionKeyMissing, "an encrypted entry cannot be sent without the master key") }
                    value = try cipher.open(sealed, keyName: key)
                }
                let entry = WireEntry(key: key, version: version,
                                      base: HLCTimestamp(packed: stmt.int64(7), node: UInt32(truncatingIfNeeded: stmt.int64(8))),
                                      deleted: deleted, encoding: stmt.string(4), value: value)
                rows.append(OutboundRow(key: key, seq: seq, entry: entry, size: size, isLarge: isLarge))
                scanned = seq
                bytes += size + key.utf8.count + 32
                if isLarge || rows.count >= maxEntries || bytes >= maxBytes { break }
            }
            return (rows, scanned)
        }
    }

    /// The full (decrypted) value of a pending large entry, if it is still at `seq`.
    func largeValue(key: String, seq: Int64) throws -> [UInt8]? {
        try database.read { conn in
            guard let row = try loadRow(conn, key: key), row.changeSeq == seq, !row.deleted else { return nil }
            return row.value
        }
    }

    /// Records that the peer durably applied these changes: their outbox rows
    /// go. A change acknowledged after its key changed again matches no row
    /// (the newer change has its own), so the newer change stays queued.
    ///
    /// One statement per group of `acknowledgeGroup` items, each a search of
    /// the outbox's integer primary key; the entries' rows are not touched.
    func acknowledge(_ items: [(key: String, seq: Int64)], peerNode: UInt32) throws {
        guard !items.isEmpty else { return }
        let highest = items.lazy.map(\.seq).max() ?? 0
        try database.write { conn in
            let group = SyncStore.acknowledgeGroup
            let stmt = try conn.statement(SyncStore.acknowledgeSQL)
            var start = 0
            while start < items.count {
                if start > 0 {
                    stmt.reset()
                    stmt.clearBindings()
                }
                // Unused pairs of the last group stay NULL: they match no row.
                for (offset, item) in items[start..<min(items.count, start + group)].enumerated() {
                    stmt.bind(Int32(2 * offset + 1), item.seq)
                    stmt.bind(Int32(2 * offset + 2), item.key)
                }
                try stmt.run()
                start += group
            }
            let peer = try conn.statement("UPDATE sync_peers SET acked_through = max(acked_through, ?2) WHERE peer_node = ?1")
            peer.bind(1, Int64(peerNode))
            peer.bind(2, highest)
            try peer.run()
        }
    }

    /// Changes acknowledged by one execution of `acknowledgeSQL`.
    static let acknowledgeGroup = 128
    /// Deletes the outbox rows of up to `acknowledgeGroup` (seq, key) pairs:
    /// `seq IN (…)` searches the primary key, the pair test checks the key.
    static let acknowledgeSQL = """
        DELETE FROM sync_outbox
        WHERE seq IN (\((0..<acknowledgeGroup).map { "?\(2 * $0 + 1)" }.joined(separator: ", ")))
          AND (seq, key) IN (VALUES \((0..<acknowledgeGroup).map { "(?\(2 * $0 + 1), ?\(2 * $0 + 2))" }.joined(separator: ", ")))
        """

    // MARK: inbound

    /// Applies entries from the peer in one transaction: idempotent, conflict
    /// rule applied, conflicts logged, policies enforced (a key the peer may
    /// not send is rejected, never stored).
    ///
    /// The local rows are read with one statement per group of keys
    /// (`loadRows`) and the winners written several rows per statement
    /// (`saveRows`); entries are decided in order, each seeing the ones before it.
    ///
    /// Returns once the commit is on stable storage (`syncCommitted()`), since
    /// the caller acknowledges it; `durableBeforeReturn: false` leaves that
    /// to the caller (who must sync before acknowledging).
    func applyRemote(_ entries: [WireEntry], peerRole: DeviceRole, mismatched: Set<String>,
                     completingChunksOf chunked: (key: String, version: HLCTimestamp)? = nil,
                     lastArrivalWins: Bool = false, durableBeforeReturn: Bool = true) throws -> ApplyResult {
        try checkOpen()
        let now = physicalClock.nowMilliseconds()
        let bound = SyncStore.versionBound(now: now, ahead: options.maxRemoteClockAhead)
        let result = try database.write({ conn -> ApplyResult in
            var result = ApplyResult()
            let staged = try conn.statement("SELECT EXISTS (SELECT 1 FROM sync_chunks)")
            _ = try staged.step()
            let hasStagedChunks = staged.int(0) != 0
            staged.reset()
            // Policies first: what the peer may not send never reaches the database.
            var accepted: [(entry: WireEntry, registered: KeyRegistry.Registered)] = []
            accepted.reserveCapacity(entries.count)
            for incoming in entries {
                guard let registered = registry.registered(forEntry: incoming.key) else {
                    result.rejected.append(.init(key: incoming.key, code: SyncError.Code.unknownKey.rawValue))
                    continue
                }
                let descriptor = registered.descriptor
                if !mismatched.isEmpty && mismatched.contains(descriptor.name) {
                    result.rejected.append(.init(key: incoming.key, code: SyncError.Code.keyDeclarationMismatch.rawValue))
                    continue
                }
                guard descriptor.replicates(from: peerRole), descriptor.encoding == incoming.encoding else {
                    logger.warning("rejected an entry the peer may not send", metadata: ["key": "\(incoming.key)"])
                    result.rejected.append(.init(key: incoming.key, code: "policy-violation"))
                    continue
                }
                if (incoming.value?.count ?? 0) > options.maxValueSize {
                    result.rejected.append(.init(key: incoming.key, code: SyncError.Code.valueTooLarge.rawValue))
                    continue
                }
                if let refusal = SyncStore.versionRefusal(incoming, bound: bound, now: now) {
                    result.rejected.append(.init(key: incoming.key, code: SyncError.Code.versionOutOfRange.rawValue))
                    result.versionRefusals.append(refusal)
                    continue
                }
                accepted.append((incoming, registered))
            }
            // The local state of every key, updated as entries are decided (a key may come twice).
            var current = try loadRows(conn, keys: accepted.map(\.entry.key), valueFile: .ifReadable)
            var writes: [StoredRow] = []
            var encrypted: Set<String> = []
            writes.reserveCapacity(accepted.count)
            result.changes.reserveCapacity(accepted.count)
            for (incoming, registered) in accepted {
                let descriptor = registered.descriptor
                clock.observe(incoming.version)
                let local = current[incoming.key]
                var decision = MergeRule.decide(local: local?.state, incoming: incoming.state, resolver: registered.resolver?.merge)
                if lastArrivalWins, local != nil, local?.version != incoming.version {
                    decision = MergeRule.Decision(outcome: .take)  // deliberate fault (TestingFaults)
                }
                var row: StoredRow
                switch decision.outcome {
                case .ignore:
                    result.ignored += 1
                    if let conflict = decision.conflict, let local {
                        try logConflict(conn, &result, key: incoming.key, local: local.version, remote: incoming.version, winner: conflict.winner, rule: conflict.rule, now: now)
                    }
                    continue
                case .take:
                    row = StoredRow(key: incoming.key, value: incoming.deleted ? nil : (incoming.value ?? []), encoding: incoming.encoding,
                                    version: incoming.version, base: incoming.base, deleted: incoming.deleted, encrypted: false,
                                    size: incoming.deleted ? 0 : (incoming.value?.count ?? 0), changeSeq: 0, lane: .none)
                case .merged(let value, let version):
                    // A merge is new information for the peer too: send it (the peer's
                    // re-merge of a join is a no-op, so this ends).
                    let lane = lane(for: descriptor, size: value.count, deleted: false)
                    row = StoredRow(key: incoming.key, value: value, encoding: incoming.encoding, version: version, base: version,
                                    deleted: false, encrypted: false, size: value.count, changeSeq: lane == .none ? 0 : takeSeq(),
                                    lane: lane)
                }
                if descriptor.security == .encrypted { encrypted.insert(row.key) }
                writes.append(row)
                current[row.key] = row
                if let conflict = decision.conflict, let local {
                    try logConflict(conn, &result, key: incoming.key, local: local.version, remote: incoming.version, winner: conflict.winner, rule: conflict.rule, now: now)
                }
                result.applied += 1
                result.changes.append(StoreChange(key: row.key, kind: row.deleted ? .removed : .set, origin: .remote, version: row.version))
            }
            try saveRows(conn, writes, encrypt: { !encrypted.isEmpty && encrypted.contains($0.key) }, writtenAt: now)
            if let chunked {
                let delete = try conn.statement("DELETE FROM sync_chunks WHERE key = ? AND ver = ? AND node = ?")
                delete.bind(1, chunked.key)
                delete.bind(2, chunked.version.packed)
                delete.bind(3, Int64(chunked.version.node))
                try delete.run()
            }
            if !result.conflicts.isEmpty { try pruneConflictLog(conn, now: now) }
            if hasStagedChunks {
                // Transfers of versions that the stored value now overtakes can never win: drop their chunks.
                for row in writes { try SyncStore.discardStagedChunks(conn, key: row.key, through: row.version) }
            }
            return result
        }, onCommit: { result in
            // Remote values are read through on demand: a large initial sync does not fill memory.
            cache.invalidate(result.changes.lazy.map(\.key))
        })
        counters.withLock {
            $0.entriesReceived += entries.count
            $0.entriesIgnored += result.ignored
            $0.entriesRejected += result.rejected.count
            $0.conflicts += result.conflicts.count
            $0.versionsRefused += result.versionRefusals.count
        }
        for refusal in result.versionRefusals {
            emit(.versionRefused(key: refusal.key, aheadMilliseconds: refusal.aheadMilliseconds))
        }
        if !result.versionRefusals.isEmpty {
            logger.warning("refused entries whose versions are too far ahead of this device's clock",
                           metadata: ["count": "\(result.versionRefusals.count)"])
        }
        publishCommitted(result.changes)
        // The caller acknowledges this commit and the peer then forgets the entries: on stable
        // storage first. After publishing: observers need no fsync to see the values.
        if durableBeforeReturn { try syncCommitted() }
        return result
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
    /// group of `loadRowsGroup` keys instead of one `loadRow` per key.
    func loadRows(_ conn: SQLiteConnection, keys: [String], valueFile: ValueFileRead = .required) throws -> [String: StoredRow] {
        var rows: [String: StoredRow] = [:]
        guard !keys.isEmpty else { return rows }
        let group = SyncStore.loadRowsGroup
        let stmt = try conn.statement(SyncStore.loadRowsSQL)
        defer { stmt.reset() }
        var start = 0
        while start < keys.count {
            if start > 0 {
                stmt.reset()
                stmt.clearBindings()
            }
            // Unused parameters of the last group stay NULL: they match no key.
            for (offset, key) in keys[start..<min(keys.count, start + group)].enumerated() {
                stmt.bind(Int32(offset + 1), key)
            }
            while try stmt.step() {
                let row = try decodeRow(stmt, valueFile: valueFile)
                rows[row.key] = row
            }
            start += group
        }
        return rows
    }

    static let loadRowsGroup = 128
    static let loadRowsSQL = "SELECT \(rowColumns) FROM entries WHERE key IN (\((1...loadRowsGroup).map { "?\($0)" }.joined(separator: ", ")))"

    private func logConflict(_ conn: SQLiteConnection, _ result: inout ApplyResult, key: String, local: HLCTimestamp,
                             remote: HLCTimestamp, winner: MergeRule.Winner, rule: String, now: Int64) throws {
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
        stmt.bind(7, rule)
        stmt.bind(8, now)
        try stmt.run()
        guard conn.changes > 0 else { return }
        result.conflicts.append(ConflictRecord(key: key, localVersion: local, remoteVersion: remote, winner: winner.rawValue, rule: rule))
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
                records.append(ConflictRecord(key: stmt.string(0),
                                              localVersion: HLCTimestamp(packed: stmt.int64(1), node: UInt32(truncatingIfNeeded: stmt.int64(2))),
                                              remoteVersion: HLCTimestamp(packed: stmt.int64(3), node: UInt32(truncatingIfNeeded: stmt.int64(4))),
                                              winner: stmt.string(5), rule: stmt.string(6)))
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
    func stageChunk(_ chunk: SyncMessage.Chunk, encrypted: Bool) throws -> Int {
        try checkOpen()
        let key = chunk.entry.key
        let version = chunk.entry.version
        let overhead = encrypted ? SyncStore.sealedChunkOverhead : 0
        let limit = max(options.maxStagedChunkBytes, options.maxValueSize + overhead * chunk.count)
        return try database.write { conn in
            let stale = try conn.statement("DELETE FROM sync_chunks WHERE key = ?1 AND (ver < ?2 OR (ver = ?2 AND node < ?3))")
            stale.bind(1, key)
            stale.bind(2, version.packed)
            stale.bind(3, Int64(version.node))
            try stale.run()
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
            let insert = try conn.statement("INSERT OR REPLACE INTO sync_chunks(key, ver, node, idx, data) VALUES(?, ?, ?, ?, ?)")
            insert.bind(1, key)
            insert.bind(2, version.packed)
            insert.bind(3, Int64(version.node))
            insert.bind(4, chunk.index)
            insert.bind(5, data)
            try insert.run()
            return try contiguousChunks(conn, key: key, version: version)
        }
    }

    /// Deletes staged chunks of `key` at or before `version` (a value the
    /// store now holds, or newer): they can never complete into a value that wins.
    func discardStagedChunks(key: String, through version: HLCTimestamp) throws {
        try database.write { conn in try SyncStore.discardStagedChunks(conn, key: key, through: version) }
    }

    static func discardStagedChunks(_ conn: SQLiteConnection, key: String, through version: HLCTimestamp) throws {
        let stmt = try conn.statement("DELETE FROM sync_chunks WHERE key = ?1 AND (ver < ?2 OR (ver = ?2 AND node <= ?3))")
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
    /// a version the store already holds or has overtaken are deleted first:
    /// they would never complete into a winning value.
    func partialTransfers() throws -> [PartialTransfer] {
        try database.write { conn in
            try conn.execute("""
                DELETE FROM sync_chunks WHERE EXISTS (
                    SELECT 1 FROM entries e WHERE e.key = sync_chunks.key
                      AND (e.ver > sync_chunks.ver OR (e.ver = sync_chunks.ver AND e.node >= sync_chunks.node)))
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

    // MARK: peers

    /// Records the peer of a new session. When it is not the peer (or the
    /// pairing epoch) seen last, every replicable entry is queued again so the
    /// new pair re-baselines fully. Returns true when that happened.
    @discardableResult
    func recordPeer(node: UInt32, role: DeviceRole, epoch: String) throws -> Bool {
        let now = physicalClock.nowMilliseconds()
        return try database.write { conn in
            let meta = try SyncStore.readMeta(conn)
            let upsert = try conn.statement("""
                INSERT INTO sync_peers(peer_node, peer_role, epoch, acked_through, last_seen) VALUES(?1, ?2, ?3, 0, ?4)
                ON CONFLICT(peer_node) DO UPDATE SET peer_role = excluded.peer_role, epoch = excluded.epoch, last_seen = excluded.last_seen,
                  acked_through = CASE WHEN sync_peers.epoch = excluded.epoch THEN sync_peers.acked_through ELSE 0 END
                """)
            upsert.bind(1, Int64(node))
            upsert.bind(2, role.rawValue)
            upsert.bind(3, epoch)
            upsert.bind(4, now)
            try upsert.run()
            // The current pairing is kept in sync_meta, not inferred from (skewable) wall-clock times.
            let current = "\(node)/\(epoch)"
            let previous = meta["current_peer"]
            try SyncStore.writeMeta(conn, "current_peer", current)
            guard let previous, previous != current else { return false }
            try rebaseline(conn, releasedThrough: Int64(meta["manual_flush_through"] ?? "") ?? 0)
            return true
        }
    }

    /// Queues every entry that replicates from this device with a fresh
    /// sequence number. Manual changes a `sync()` had released (or the old peer
    /// had received) stay released; those still waiting keep waiting.
    private func rebaseline(_ conn: SQLiteConnection, releasedThrough: Int64) throws {
        let select = try conn.statement("""
            SELECT e.key, e.size, e.deleted, e.lane, e.change_seq, \(SyncStore.isQueuedColumn)
            FROM entries e ORDER BY e.change_seq, e.key
            """)
        var released: [(String, SyncLane)] = []
        var waiting: [(String, SyncLane)] = []
        while try select.step() {
            let key = select.string(0)
            guard let descriptor = registry.descriptor(forEntry: key) else { continue }
            let lane = lane(for: descriptor, size: select.int(1), deleted: select.int(2) != 0)
            let oldSeq = select.int64(4)
            let wasWaiting = SyncLane(rawValue: select.int(3)) == .manual && select.int(5) != 0 && oldSeq > releasedThrough
            if wasWaiting { waiting.append((key, lane)) } else { released.append((key, lane)) }
        }
        // The outbox triggers queue each new sequence (and drop the old one).
        let update = "UPDATE entries SET change_seq = ?2, lane = ?3 WHERE key = ?1"
        var lastReleased: Int64?
        for (group, isReleased) in [(released, true), (waiting, false)] {
            for (key, lane) in group {
                let seq = lane == .none ? 0 : takeSeq()
                let stmt = try conn.statement(update)
                stmt.bind(1, key)
                stmt.bind(2, seq)
                stmt.bind(3, lane.rawValue)
                try stmt.run()
                if isReleased && seq > 0 { lastReleased = seq }
            }
        }
        if let lastReleased, lastReleased > releasedThrough {
            try SyncStore.writeMeta(conn, "manual_flush_through", String(lastReleased))
        }
    }

    // MARK: status

    /// Counts of changes waiting for the peer.
    public func pendingSummary() throws -> PendingSummary {
        try checkOpen()
        let flush = manualFlushThrough
        let now = physicalClock.nowMilliseconds()
        return try database.read { conn in
            let stmt = try conn.statement("""
                SELECT
                  coalesce(sum(e.lane = 1), 0),
                  coalesce(sum(e.lane = 2 AND o.seq <= ?1), 0),
                  coalesce(sum(e.lane = 2 AND o.seq > ?1), 0),
                  min(e.written_at)
                FROM \(SyncStore.queuedChanges)
                """)
            stmt.bind(1, flush)
            _ = try stmt.step()
            defer { stmt.reset() }
            let oldest: Int64? = stmt.isNull(3) ? nil : max(0, now - stmt.int64(3))
            return PendingSummary(automatic: stmt.int(0), manualReleased: stmt.int(1), manualWaiting: stmt.int(2), oldestPendingAgeMilliseconds: oldest)
        }
    }

    /// Whether the peer has `key` at `version` or newer, as far as this store
    /// knows (the peer wrote it, or acknowledged it).
    public func peerHas(key: String, atLeast version: HLCTimestamp) throws -> Bool {
        try checkOpen()
        return try database.read { conn in
            guard let row = try loadRow(conn, key: key, valueFile: .skip), row.version >= version else { return false }
            if row.changeSeq == 0 { return true }
            guard row.lane != .none else { return false }
            return try !isQueued(conn, row)
        }
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
