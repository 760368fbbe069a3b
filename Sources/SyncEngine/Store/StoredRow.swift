import SyncTransport

/// One row of `entries`, values decrypted.
struct StoredRow: Sendable {
    var key: String
    /// Plaintext bytes; nil for a tombstone.
    var value: [UInt8]?
    var encoding: String
    var version: HLCTimestamp
    var base: HLCTimestamp
    var deleted: Bool
    var encrypted: Bool
    var size: Int
    var changeSeq: Int64
    var lane: SyncLane
    /// The peer this version came from (never sent back to it); 0 for a change made here.
    var originPeer: UInt32 = 0

    var state: EntryState { EntryState(version: version, base: base, deleted: deleted, value: value) }
}

extension SyncStore {
    static let rowColumns = "key, value, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq, lane, in_file, origin_peer"

    /// How much of a value kept in a file a read needs.
    enum ValueFileRead {
        /// The value; a missing or damaged file throws `.corruptValueFile`.
        case required
        /// The value, or nil when its file is missing or damaged (a write
        /// replacing a damaged value). A file that is there but cannot be
        /// read still throws (`.valueFileUnreadable`): it may hold the value,
        /// and a write must not replace it unseen.
        case ifReadable
        /// Metadata only: the file is not opened.
        case skip
    }

    func decodeRow(_ stmt: Statement, valueFile: ValueFileRead = .required) throws -> StoredRow {
        let key = stmt.string(0)
        let encrypted = stmt.int(8) != 0
        let version = HLCTimestamp(packed: stmt.int64(3), node: UInt32(truncatingIfNeeded: stmt.int64(4)))
        var value = stmt.blob(1)
        if stmt.int(12) != 0 && stmt.int(7) == 0 {
            switch valueFile {
            case .required: value = try readValueFile(key: key, version: version, size: stmt.byteCount(9), encrypted: encrypted)
            case .ifReadable:
                do {
                    value = try readValueFile(key: key, version: version, size: stmt.byteCount(9), encrypted: encrypted)
                } catch let error as SyncError where error.code == .valueFileUnreadable {
                    throw error
                } catch {
                    value = nil
                }
            case .skip: value = nil
            }
        } else if encrypted, let sealed = value {
            guard let cipher else {
                throw SyncError(.encryptionKeyMissing, "key '\(key)' is encrypted at rest but the store was opened without a master key; pass StoreOptions(encryption:)")
            }
            switch valueFile {
            case .ifReadable:
                // A damaged sealed value (the master key was checked at open) is replaced by the write, as a damaged file is.
                value = try? cipher.open(sealed, keyName: key)
            case .required, .skip:
                value = try cipher.open(sealed, keyName: key)
            }
        }
        return StoredRow(key: key, value: value, encoding: stmt.string(2),
                         version: version,
                         base: HLCTimestamp(packed: stmt.int64(5), node: UInt32(truncatingIfNeeded: stmt.int64(6))),
                         deleted: stmt.int(7) != 0, encrypted: encrypted, size: stmt.byteCount(9),
                         changeSeq: stmt.int64(10), lane: SyncLane(rawValue: stmt.int(11)) ?? .none,
                         originPeer: UInt32(truncatingIfNeeded: stmt.int64(13)))
    }

    static let loadRowSQL = "SELECT \(rowColumns) FROM entries WHERE key = ?"

    func loadRow(_ conn: SQLiteConnection, key: String, valueFile: ValueFileRead = .required) throws -> StoredRow? {
        let stmt = try conn.statement(SyncStore.loadRowSQL)
        stmt.bind(1, key)
        defer { stmt.reset() }
        return try stmt.step() ? decodeRow(stmt, valueFile: valueFile) : nil
    }

    /// Writes `row` (encrypting when its key is declared encrypted). Its
    /// change joins the stream the peers read when its lane is sent.
    /// With value files the bytes go to a new file first and the replaced
    /// version's file is deleted after the commit (see `ValueFiles`).
    func saveRow(_ conn: SQLiteConnection, _ row: StoredRow, encrypt: Bool, writtenAt: Int64) throws {
        var stored = row.value
        if encrypt, let plain = row.value {
            guard let cipher else {
                throw SyncError(.encryptionKeyMissing, "key '\(row.key)' is declared encrypted but the store has no master key")
            }
            stored = try cipher.seal(plain, keyName: row.key)
        }
        let placed = try valueStorage.place(stored, deleted: row.deleted, key: row.key, version: row.version, in: conn)
        let stmt = try conn.statement("""
            INSERT INTO entries(key, value, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq, lane, written_at, in_file, origin_peer)
            VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
            ON CONFLICT(key) DO UPDATE SET value = excluded.value, encoding = excluded.encoding, ver = excluded.ver,
              node = excluded.node, base_ver = excluded.base_ver, base_node = excluded.base_node, deleted = excluded.deleted,
              encrypted = excluded.encrypted, size = excluded.size, change_seq = excluded.change_seq, lane = excluded.lane,
              written_at = excluded.written_at, in_file = excluded.in_file, origin_peer = excluded.origin_peer
            """)
        stmt.bind(1, row.key)
        stmt.bind(2, placed.column)
        stmt.bind(3, row.encoding)
        stmt.bind(4, row.version.packed)
        stmt.bind(5, Int64(row.version.node))
        stmt.bind(6, row.base.packed)
        stmt.bind(7, Int64(row.base.node))
        stmt.bind(8, row.deleted ? 1 : 0)
        stmt.bind(9, encrypt && row.value != nil ? 1 : 0)
        stmt.bind(10, row.size)
        stmt.bind(11, row.changeSeq)
        stmt.bind(12, row.lane.rawValue)
        stmt.bind(13, writtenAt)
        stmt.bind(14, placed.inFile ? 1 : 0)
        stmt.bind(15, Int64(row.originPeer))
        try stmt.run()
        logWrite(row)
    }

    /// Writes `rows` in order, as `saveRow` writes each (encrypting the rows
    /// `encrypt` names), several rows per `INSERT`: the one
    /// other place values are written, for applying a batch from the peer.
    /// A store that keeps values in files writes row by row through `saveRow`.
    ///
    /// `distinctKeys`: the caller knows no key occurs twice in `rows` (then no
    /// run is checked for repeats). `changes`: the rows' changes as `logWrite`
    /// would make them (the caller made them already), logged in one step.
    func saveRows(_ conn: SQLiteConnection, _ rows: ArraySlice<StoredRow>, encrypt: (StoredRow) -> Bool, writtenAt: Int64,
                  distinctKeys: Bool = false, changes: ArraySlice<StoreChange>? = nil) throws {
        guard valueStorage.keepsValuesInRows else {
            for row in rows { try saveRow(conn, row, encrypt: encrypt(row), writtenAt: writtenAt) }
            return
        }
        var start = rows.startIndex
        var keys = Set<String>()
        // One prepared statement per group size, reused without a lookup by its SQL.
        var statements = [Statement?](repeating: nil, count: SyncStore.saveRowsSQL.count)
        while start < rows.endIndex {
            // A run without a repeated key, so one statement never writes a key twice.
            var end = start
            if distinctKeys {
                end = min(rows.endIndex, start + SyncStore.saveRowsGroup)
            } else {
                keys.removeAll(keepingCapacity: true)
                while end < rows.endIndex, end - start < SyncStore.saveRowsGroup, keys.insert(rows[end].key).inserted { end += 1 }
            }
            while start < end {
                var count = SyncStore.saveRowsGroup
                while count > end - start { count /= 2 }
                let power = count.trailingZeroBitCount
                let stmt: Statement
                if let reused = statements[power] {
                    // Every parameter is bound again below: no need to clear them.
                    reused.reset()
                    stmt = reused
                } else {
                    stmt = try conn.statement(SyncStore.saveRowsSQL[power])
                    statements[power] = stmt
                }
                for (offset, row) in rows[start..<start + count].enumerated() {
                    let encrypted = encrypt(row) && row.value != nil
                    var stored = row.value
                    if encrypted, let plain = row.value {
                        guard let cipher else {
                            throw SyncError(.encryptionKeyMissing, "key '\(row.key)' is declared encrypted but the store has no master key")
                        }
                        stored = try cipher.seal(plain, keyName: row.key)
                    }
                    let p = Int32(offset * 14)
                    stmt.bind(p + 1, row.key)
                    stmt.bind(p + 2, stored)
                    stmt.bind(p + 3, row.encoding)
                    stmt.bind(p + 4, row.version.packed)
                    stmt.bind(p + 5, Int64(row.version.node))
                    stmt.bind(p + 6, row.base.packed)
                    stmt.bind(p + 7, Int64(row.base.node))
                    stmt.bind(p + 8, row.deleted ? 1 : 0)
                    stmt.bind(p + 9, encrypted ? 1 : 0)
                    stmt.bind(p + 10, row.size)
                    stmt.bind(p + 11, row.changeSeq)
                    stmt.bind(p + 12, row.lane.rawValue)
                    stmt.bind(p + 13, writtenAt)
                    stmt.bind(p + 14, Int64(row.originPeer))
                }
                try stmt.run()
                start += count
            }
        }
        if let changes {
            logWrites(changes)
        } else {
            for row in rows { logWrite(row) }
        }
    }

    /// Rows per statement of `saveRows` (a power of two).
    static let saveRowsGroup = 32
    /// `saveRowsSQL[n]` inserts 2ⁿ rows.
    static let saveRowsSQL: [String] = (0...saveRowsGroup.trailingZeroBitCount).map { power in
        // Parameters 1...12 of a row are key...lane, 13 is written_at, 14 origin_peer; in_file is 0.
        let values = (0..<(1 << power)).map { row in
            let p = (1...14).map { "?\(row * 14 + $0)" }
            return "(\(p[0..<12].joined(separator: ", ")), \(p[12]), 0, \(p[13]))"
        }
        return """
            INSERT INTO entries(key, value, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq, lane, written_at, in_file, origin_peer)
            VALUES \(values.joined(separator: ", "))
            ON CONFLICT(key) DO UPDATE SET value = excluded.value, encoding = excluded.encoding, ver = excluded.ver,
              node = excluded.node, base_ver = excluded.base_ver, base_node = excluded.base_node, deleted = excluded.deleted,
              encrypted = excluded.encrypted, size = excluded.size, change_seq = excluded.change_seq, lane = excluded.lane,
              written_at = excluded.written_at, in_file = excluded.in_file, origin_peer = excluded.origin_peer
            """
    }

    /// The plaintext bytes of a value kept in a file, checked against the row's size.
    func readValueFile(key: String, version: HLCTimestamp, size: Int, encrypted: Bool) throws -> [UInt8] {
        var bytes = try valueStorage.readFile(key: key, version: version)
        if encrypted {
            guard let cipher else {
                throw SyncError(.encryptionKeyMissing, "key '\(key)' is encrypted at rest but the store was opened without a master key; pass StoreOptions(encryption:)")
            }
            do { bytes = try cipher.open(bytes, keyName: key) } catch {
                throw SyncError(.corruptValueFile, "the value file of key '\(PeerText.escaped(key))' does not decrypt (damaged or replaced); restore the file or write the key again")
            }
        }
        guard bytes.count == size else { throw ValueFiles.sizeMismatch(key: key, found: bytes.count, expected: size) }
        return bytes
    }

    /// The lane a local change of `descriptor` with `size` bytes waits in on this device.
    func lane(for descriptor: KeyDescriptor, size: Int, deleted: Bool) -> SyncLane {
        SyncStore.lane(for: descriptor, on: role, size: size, deleted: deleted)
    }

    /// The lane a change of `descriptor` with `size` bytes made on a device of `role` waits in.
    static func lane(for descriptor: KeyDescriptor, on role: DeviceRole, size: Int, deleted: Bool) -> SyncLane {
        guard descriptor.replicates(from: role) else { return .none }
        switch descriptor.policy {
        case .never: return .none
        case .manual: return .manual
        case .automaticSmall: return deleted || size <= SyncPolicy.automaticLimit ? .automatic : .manual
        }
    }

    /// The lane of a resolver's merge of `size` bytes that replaces a row in
    /// lane `replaced`: that of a change of this device, except that a change
    /// `sync()` released stays released (the sync covered the key's change,
    /// which the merge carries on).
    static func mergedLane(for descriptor: KeyDescriptor, on role: DeviceRole, size: Int, replacing replaced: SyncLane?) -> SyncLane {
        let lane = lane(for: descriptor, on: role, size: size, deleted: false)
        return lane == .manual && replaced == .released ? .released : lane
    }

    /// Whether a merge in `lane` is a value deferred to the next `sync()` for its size.
    static func defers(_ descriptor: KeyDescriptor, in lane: SyncLane) -> Bool {
        lane == .manual && descriptor.policy == .automaticSmall
    }

    /// `later - earlier`, saturating (a time read from a damaged file may be anything).
    static func milliseconds(from earlier: Int64, to later: Int64) -> Int64 {
        let (difference, overflow) = later.subtractingReportingOverflow(earlier)
        return overflow ? (earlier < later ? .max : .min) : difference
    }

    /// The largest change sequence (or cursor) a store holds: 2^62, far
    /// beyond any number of writes. Only a damaged file holds more.
    static let maxSequence: Int64 = 1 << 62

    /// A damaged file's change sequences beyond `maxSequence` (the next change
    /// would overflow; a peer that acknowledged one would never be sent
    /// another) are numbered afresh above the others, and cursors beyond it
    /// or below 0 start over (the peer is sent everything again, which it
    /// applies idempotently). Returns the highest sequence now held.
    static func repairSequences(_ conn: SQLiteConnection) throws -> Int64 {
        let top = try conn.integer("""
            SELECT max(coalesce((SELECT max(change_seq) FROM entries WHERE change_seq <= \(maxSequence)), 0),
                       coalesce((SELECT max(acked_through) FROM sync_peers WHERE acked_through <= \(maxSequence)), 0))
            """)
        try conn.execute("UPDATE sync_peers SET acked_through = 0 WHERE acked_through > \(maxSequence) OR acked_through < 0")
        let damaged = try conn.statement("SELECT rowid FROM entries WHERE change_seq > \(maxSequence) ORDER BY change_seq, rowid")
        var rowids: [Int64] = []
        while try damaged.step() { rowids.append(damaged.int64(0)) }
        damaged.reset()
        let renumber = try conn.statement("UPDATE entries SET change_seq = ?2 WHERE rowid = ?1")
        for (offset, rowid) in rowids.enumerated() {
            renumber.reset()
            renumber.bind(1, rowid)
            renumber.bind(2, top + 1 + Int64(offset))
            try renumber.run()
        }
        return top + Int64(rowids.count)
    }

    /// In one pass over the entries: the highest version in the file up to
    /// the bound `?1` (a row further in the future, e.g. from a peer before
    /// versions were bounded, does not drag the clock); the highest change
    /// sequence an entry holds or a peer acknowledged (queued changes are
    /// entries' own sequences): a reopened store numbers its next change above
    /// both; and 1 when node `?2` (this device) wrote a row past the bound
    /// (its wall clock ran far ahead), else 0.
    static let sequenceFloorSQL = """
        SELECT coalesce(max(CASE WHEN ver <= ?1 THEN ver END), 0),
               max(coalesce((SELECT max(change_seq) FROM entries), 0),
                   coalesce((SELECT max(acked_through) FROM sync_peers), 0)),
               coalesce(max(ver > ?1 AND node = ?2), 0)
        FROM entries
        """

    /// The largest packed version this device accepts now: its wall clock plus
    /// `StoreOptions.maxRemoteClockAhead`, within `HLCTimestamp.maxPacked`.
    func versionBound() -> Int64 {
        SyncStore.versionBound(now: physicalClock.nowMilliseconds(), ahead: options.maxRemoteClockAhead)
    }

    /// The most `StoreOptions.maxRemoteClockAhead` counts for: ten years. With
    /// more (`.seconds(.max)`, meant as "no limit"), a peer's version at
    /// `HLCTimestamp.maxPacked` was taken, and the clock that observed it could
    /// issue no later version: every local write failed with `clock-out-of-range`, for good.
    static let maxClockAheadMilliseconds: Int64 = 10 * 365 * 86_400_000

    static func versionBound(now: Int64, ahead: Duration) -> Int64 {
        let (seconds, attoseconds) = ahead.components
        let aheadMilliseconds = seconds >= maxClockAheadMilliseconds / 1000 ? maxClockAheadMilliseconds
            : min(maxClockAheadMilliseconds, max(0, seconds) * 1000 + max(0, attoseconds) / 1_000_000_000_000_000)
        let (limit, overflow) = now.addingReportingOverflow(aheadMilliseconds)
        if overflow || limit > HLCTimestamp.maxPhysicalMilliseconds { return HLCTimestamp.maxPacked }
        if limit < 0 { return 0 }
        return (limit << 16) | 0xFFFF
    }

    /// `count` consecutive change sequence numbers; returns the first.
    func takeSeqs(_ count: Int) -> Int64 {
        nextSeq.withLock { seq in
            defer { seq += Int64(count) }
            return seq
        }
    }

    func takeSeq() -> Int64 {
        nextSeq.withLock { seq in
            defer { seq += 1 }
            return seq
        }
    }
}
