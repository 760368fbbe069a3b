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
    var ackedSeq: Int64

    var state: EntryState { EntryState(version: version, base: base, deleted: deleted, value: value) }
    var isPending: Bool { lane != .none && changeSeq > ackedSeq }
}

extension SyncStore {
    static let rowColumns = "key, value, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq, lane, acked_seq"

    func decodeRow(_ stmt: Statement) throws -> StoredRow {
        let key = stmt.string(0)
        let encrypted = stmt.int(8) != 0
        var value = stmt.blob(1)
        if encrypted, let sealed = value {
            guard let cipher else {
                throw SyncError(.encryptionKeyMissing, "key '\(key)' is encrypted at rest but the store was opened without a master key; pass StoreOptions(encryption:)")
            }
            value = try cipher.open(sealed, keyName: key)
        }
        return StoredRow(key: key, value: value, encoding: stmt.string(2),
                         version: HLCTimestamp(packed: stmt.int64(3), node: UInt32(truncatingIfNeeded: stmt.int64(4))),
                         base: HLCTimestamp(packed: stmt.int64(5), node: UInt32(truncatingIfNeeded: stmt.int64(6))),
                         deleted: stmt.int(7) != 0, encrypted: encrypted, size: stmt.int(9),
                         changeSeq: stmt.int64(10), lane: SyncLane(rawValue: stmt.int(11)) ?? .none, ackedSeq: stmt.int64(12))
    }

    func loadRow(_ conn: SQLiteConnection, key: String) throws -> StoredRow? {
        let stmt = try conn.statement("SELECT \(SyncStore.rowColumns) FROM entries WHERE key = ?")
        stmt.bind(1, key)
        defer { stmt.reset() }
        return try stmt.step() ? decodeRow(stmt) : nil
    }

    /// Writes `row` (encrypting when its key is declared encrypted); keeps `acked_seq`.
    func saveRow(_ conn: SQLiteConnection, _ row: StoredRow, encrypt: Bool, writtenAt: Int64) throws {
        var stored = row.value
        if encrypt, let plain = row.value {
            guard let cipher else {
                throw SyncError(.encryptionKeyMissing, "key '\(row.key)' is declared encrypted but the store has no master key")
            }
            stored = try cipher.seal(plain, keyName: row.key)
        }
        let stmt = try conn.statement("""
            INSERT INTO entries(key, value, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq, lane, acked_seq, written_at)
            VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, ?13)
            ON CONFLICT(key) DO UPDATE SET value = excluded.value, encoding = excluded.encoding, ver = excluded.ver,
              node = excluded.node, base_ver = excluded.base_ver, base_node = excluded.base_node, deleted = excluded.deleted,
              encrypted = excluded.encrypted, size = excluded.size, change_seq = excluded.change_seq, lane = excluded.lane,
              written_at = excluded.written_at
            """)
        stmt.bind(1, row.key)
        stmt.bind(2, stored)
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
        try stmt.run()
    }

    /// The lane a local change of `descriptor` with `size` bytes waits in on this device.
    func lane(for descriptor: KeyDescriptor, size: Int, deleted: Bool) -> SyncLane {
        guard descriptor.replicates(from: role) else { return .none }
        switch descriptor.policy {
        case .never: return .none
        case .manual: return .manual
        case .automaticSmall: return deleted || size <= SyncPolicy.automaticLimit ? .automatic : .manual
        }
    }

    func takeSeq() -> Int64 {
        nextSeq.withLock { seq in
            defer { seq += 1 }
            return seq
        }
    }
}
