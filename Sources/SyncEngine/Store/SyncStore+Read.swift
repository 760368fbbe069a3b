import Synchronization
import SyncTransport

extension SyncStore {
    /// The entry under `key` through the cache; on a miss the row is read
    /// (and a legacy key migrated) after checking `declared` against the registry.
    public func entry(forKey key: String, declaredAs declared: KeyDescriptor?) throws -> BackendEntry? {
        try entry(forKey: KeyName.canonical(key), declaredAs: declared, counted: true)
    }

    /// `counted: false` when the caller already counted this read's cache miss.
    private func entry(forKey key: String, declaredAs declared: KeyDescriptor?, counted: Bool) throws -> BackendEntry? {
        try checkOpen()
        let slot: StoreCache.Slot
        if counted, let cached = cache.lookup(key) {
            // Only registered names are in the cache (a miss or a write checked them): a declaration
            // is checked as a miss checks it, unless this slot was read through an equal one.
            if let declared, cached.checkedToken != declared.declarationToken { try checkDeclaration(declared, forKey: key) }
            slot = cached
        } else if let loaded = try loadSlot(key, descriptor: try registry.governingDescriptor(for: key, declared: declared)) {
            if let declared { cache.noteChecked(key, declarationToken: declared.declarationToken) }
            slot = loaded
        } else {
            return nil
        }
        if slot.bytes == nil && slot.version == .zero { return nil }
        return BackendEntry(bytes: slot.bytes, encoding: slot.encoding, version: slot.version, decoded: slot.decoded)
    }

    /// The value of `key`, or its default when nothing is stored, as
    /// `KeyValueBackend.value(for:)`; inlined into the caller, so that a read
    /// answered from the cache is one lookup under one lock and a cast
    /// specialized for `Value`.
    @inlinable
    public func value<Value>(for key: Key<Value>) throws -> Value {
        if let value = cachedValue(for: key) { return value }
        return try storedValue(for: key) ?? key.defaultValue
    }

    /// The decoded value the cache holds for `name`, its version and bytes (a
    /// hit is counted), or nil: then `storedValue(for:)` reads (and counts) as
    /// usual. Nil too when the registry refuses `declared` for `name` (the
    /// read then throws what a miss throws).
    @usableFromInline
    func cachedDecodedValue(forKey name: String, declaredAs declared: KeyDescriptor, token: Int) -> (any Sendable, HLCTimestamp, [UInt8])? {
        if isClosed { return nil }
        guard let hit = cache.decodedHit(name) else { return nil }
        if hit.checkedToken != token {
            guard (try? checkDeclaration(declared, forKey: name, token: token)) != nil else { return nil }
        }
        return (hit.value, hit.version, hit.bytes)
    }

    /// Keeps `box` for the next typed reads of `name` through its
    /// declaration, if its slot still holds `bytes` at `version`.
    @usableFromInline
    func rememberTyped<Value>(_ box: CachedValue<Value>, forKey name: String, version: HLCTimestamp, bytes: [UInt8]) {
        cache.rememberTyped(name, version: version, bytes: bytes, box: box)
    }

    /// What a cache miss checks of `declared` (`KeyRegistry.governingDescriptor`),
    /// for a hit of a slot not read through an equal declaration; noted in the slot once passed.
    private func checkDeclaration(_ declared: KeyDescriptor, forKey name: String, token: Int? = nil) throws {
        _ = try registry.governingDescriptor(for: name, declared: declared)
        cache.noteChecked(name, declarationToken: token ?? declared.declarationToken)
    }

    /// The cached read path: one cache lookup and a cast when the decoded value is cached.
    public func storedValue<Value>(for key: Key<Value>) throws -> Value? {
        try checkOpen()
        if let slot = cache.lookup(key.name) {
            if slot.checkedToken != key.declarationToken { try checkDeclaration(key.descriptor, forKey: key.name, token: key.declarationToken) }
            guard let bytes = slot.bytes else { return nil }
            // Not `slot.decoded as? Value`: an absent decoded value (nil) casts to any `Optional`
            // type, and a `Key<T?>` read `nil` for a slot filled by an untyped read.
            if let decoded = slot.decoded, let value = decoded as? Value { return value }
            return try decodeKept(bytes, encoding: slot.encoding, version: slot.version, for: key)
        }
        guard let entry = try entry(forKey: key.name, declaredAs: key.descriptor, counted: false), let bytes = entry.bytes else { return nil }
        return try decodeKept(bytes, encoding: entry.encoding, version: entry.version, for: key)
    }

    /// Decodes `bytes` of `version` for `key` and keeps the value beside the
    /// cache's slot while it still holds those bytes at that version.
    private func decodeKept<Value>(_ bytes: [UInt8], encoding: String, version: HLCTimestamp, for key: Key<Value>) throws -> Value {
        let value = try decodeChecked(bytes, encoding: encoding, for: key)
        cache.rememberDecoded(key.name, version: version, bytes: bytes, value: value)
        return value
    }

    public func rememberDecoded(_ value: any Sendable, forKey key: String, version: HLCTimestamp) {
        cache.rememberDecoded(KeyName.canonical(key), version: version, value: value)
    }

    /// Reads the row from a reader connection, never waiting for the writer,
    /// into the cache (unless the cache changed meanwhile: it never goes back
    /// in time); migrates a legacy key on first read.
    private func loadSlot(_ key: String, descriptor: KeyDescriptor) throws -> StoreCache.Slot? {
        let epoch = cache.epoch
        let slot = try readCommitted { conn -> StoreCache.Slot in
            conn.noteAppRead(ofKey: key)
            let row = try loadRow(conn, key: key)
            return StoreCache.Slot(bytes: try row.flatMap(SyncStore.liveValue(of:)), encoding: row?.encoding ?? descriptor.encoding,
                                   version: row?.version ?? .zero, decoded: nil)
        }
        if slot.bytes != nil || descriptor.legacyName == nil { cache.fill(key, slot, readSince: epoch) }
        if slot.bytes == nil, let legacy = descriptor.legacyName, slot.version == .zero {
            do {
                return try migrateLegacy(from: legacy, to: key, descriptor: descriptor)
            } catch let error as SyncError where error.code == .storageFull || error.code == .databaseCorrupt {
                // The move is a write, which a full or damaged store refuses: the read still gives
                // the value stored before (not cached; a read with room moves it).
                return try readCommitted { conn -> StoreCache.Slot? in
                    guard let old = try loadRow(conn, key: legacy), !old.deleted, let bytes = old.value else { return slot }
                    guard old.encoding == descriptor.encoding else { throw descriptor.legacySerializerMismatch(legacy: legacy, stored: old.encoding) }
                    return StoreCache.Slot(bytes: bytes, encoding: old.encoding, version: old.version, decoded: nil)
                }
            }
        }
        return slot
    }

    /// Runs `body` on a reader connection (`Database.readCommitted`). A value
    /// file can go between the row read and the file read (a write replacing
    /// it committed meanwhile and deleted it): such a read is done again on
    /// the writer, where rows and files change together.
    func readCommitted<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        do {
            return try database.readCommitted(body)
        } catch let error as SyncError where error.code == .corruptValueFile && !valueStorage.keepsValuesInRows {
            return try database.read(body)
        }
    }

    /// Moves the legacy key's value to `key` in one transaction: the new value
    /// is written and the legacy row removed together, or neither. A value
    /// written with another serializer than `key` declares is not moved: `type-mismatch`.
    private func migrateLegacy(from legacy: String, to key: String, descriptor: KeyDescriptor) throws -> StoreCache.Slot? {
        let now = physicalClock.nowMilliseconds()
        let slot = try database.write({ conn -> StoreCache.Slot? in
            if let current = try loadRow(conn, key: key) {
                return StoreCache.Slot(bytes: try SyncStore.liveValue(of: current), encoding: current.encoding, version: current.version, decoded: nil)
            }
            guard let old = try loadRow(conn, key: legacy), !old.deleted, let bytes = old.value else {
                return StoreCache.Slot(bytes: nil, encoding: descriptor.encoding, version: .zero, decoded: nil)
            }
            // Moved as it is, it would never read as the key (`type-mismatch`), and its old name would be gone.
            guard old.encoding == descriptor.encoding else { throw descriptor.legacySerializerMismatch(legacy: legacy, stored: old.encoding) }
            let version = try clock.now()
            let lane = lane(for: descriptor, size: bytes.count, deleted: false)
            try saveRow(conn, StoredRow(key: key, value: bytes, encoding: old.encoding, version: version, base: .zero, deleted: false,
                                        encrypted: false, size: bytes.count, changeSeq: takeSeq(), lane: lane),
                        encrypt: descriptor.security == .encrypted, writtenAt: now)
            try retireLegacyRow(conn, old, writtenAt: now)
            return StoreCache.Slot(bytes: bytes, encoding: old.encoding, version: version, decoded: nil)
        }, onCommit: { slot in
            if let slot { cache.store(key, slot) }
            // Nothing moved: the legacy row is as it was (and dropping it would drop the absence just cached).
            if slot?.version != .zero { cache.invalidate(legacy) }
        })
        if let slot, slot.bytes != nil {
            publishCommitted([StoreChange(key: key, kind: .set, origin: .local, version: slot.version)])
            localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
            localWrites.publish(SyncStore.thisDevice)
        }
        return slot
    }

    /// Removes the live legacy row `old` in the open transaction: a tombstone
    /// when its key is still declared (the removal replicates), else the row goes.
    func retireLegacyRow(_ conn: SQLiteConnection, _ old: StoredRow, writtenAt now: Int64) throws {
        if let legacyDescriptor = registry.descriptor(forEntry: old.key) {
            let tombstoneVersion = try clock.now()
            let tombstone = StoredRow(key: old.key, value: nil, encoding: old.encoding, version: tombstoneVersion,
                                      base: HLCTimestamp.base(old.version, of: tombstoneVersion),
                                      deleted: true, encrypted: false, size: 0, changeSeq: takeSeq(),
                                      lane: self.lane(for: legacyDescriptor, size: 0, deleted: true))
            try saveRow(conn, tombstone, encrypt: false, writtenAt: now)
        } else {
            let delete = try conn.statement("DELETE FROM entries WHERE key = ?")
            delete.bind(1, old.key)
            try delete.run()
        }
    }

    /// Metadata of one stored entry (no value): version, size, deletion, pending state.
    /// The value is not read (a large one would be read whole for its version).
    public func entryInfo(forKey key: String) throws -> EntryInfo? {
        try checkOpen()
        let name = KeyName.canonical(key)
        return try readCommitted { conn in
            conn.noteAppRead(ofKey: name)
            let stmt = try conn.statement("SELECT \(SyncStore.infoColumns) FROM entries e WHERE e.key = ?")
            stmt.bind(1, name)
            defer { stmt.reset() }
            guard try stmt.step() else { return nil }
            let row = SyncStore.infoRow(stmt)
            let pending = try isPending(row, peers: SyncStore.waitingPeerRecords(conn, role: role)) || SyncStore.isHeld(conn, key: row.key, seq: row.changeSeq)
            return EntryInfo(row: row, isPending: pending)
        }
    }

    /// The version stored for `key` (a tombstone's too), read alone: the chunk
    /// path asks it once per chunk, and needs neither the value nor the peers.
    func storedVersion(forKey key: String) throws -> HLCTimestamp? {
        try checkOpen()
        return try readCommitted { conn in
            let stmt = try conn.statement("SELECT ver, node FROM entries WHERE key = ?")
            stmt.bind(1, key)
            defer { stmt.reset() }
            guard try stmt.step() else { return nil }
            return HLCTimestamp(packed: stmt.int64(0), node: UInt32(truncatingIfNeeded: stmt.int64(1)))
        }
    }

    /// Every stored entry's metadata, ordered by key (no values).
    public func allEntryInfo() throws -> [EntryInfo] {
        try checkOpen()
        return try readCommitted { conn in
            let peers = try SyncStore.waitingPeerRecords(conn, role: role)
            let held = try Dictionary(SyncStore.heldChanges(conn).map { ($0.key, $0.seq) }, uniquingKeysWith: max)
            let stmt = try conn.statement("SELECT \(SyncStore.infoColumns) FROM entries e ORDER BY e.key")
            defer { stmt.reset() }
            var result: [EntryInfo] = []
            while try stmt.step() {
                let row = SyncStore.infoRow(stmt)
                result.append(EntryInfo(row: row, isPending: isPending(row, peers: peers) || held[row.key] == row.changeSeq))
            }
            return result
        }
    }

    /// The columns `infoRow` reads: an entry's metadata, never its value.
    static let infoColumns = "e.key, e.encoding, e.ver, e.node, e.deleted, e.size, e.change_seq, e.lane, e.origin_peer, e.encrypted"

    /// The metadata of the row `stmt` is on (a SELECT of `infoColumns`), with no value.
    static func infoRow(_ stmt: Statement) -> StoredRow {
        StoredRow(key: stmt.string(0), value: nil, encoding: stmt.string(1),
                  version: HLCTimestamp(packed: stmt.int64(2), node: UInt32(truncatingIfNeeded: stmt.int64(3))),
                  base: .zero, deleted: stmt.int(4) != 0, encrypted: stmt.int(9) != 0, size: stmt.byteCount(5),
                  changeSeq: stmt.int64(6), lane: SyncLane(rawValue: stmt.int(7)) ?? .none,
                  originPeer: UInt32(truncatingIfNeeded: stmt.int64(8)))
    }

    /// The stored bytes of an entry (decrypted), for tools like `syncsim`;
    /// nil for no entry or a tombstone. A live row without a value (a damaged
    /// file) throws `.databaseCorrupt`, as every read of its key does.
    public func rawValue(forKey key: String) throws -> [UInt8]? {
        try checkOpen()
        let name = KeyName.canonical(key)
        return try readCommitted { conn in
            conn.noteAppRead(ofKey: name)
            guard let row = try loadRow(conn, key: name) else { return nil }
            return try SyncStore.liveValue(of: row)
        }
    }

    /// The value of `row`, nil for a tombstone. A live row without one (its
    /// `value` column NULL and no value file: the engine never writes it, a
    /// file edited by hand can hold it) throws `.databaseCorrupt` naming the
    /// key, where it read as no value (the key's default) before.
    static func liveValue(of row: StoredRow) throws -> [UInt8]? {
        if row.deleted { return nil }
        guard let value = row.value else {
            throw SyncError(.databaseCorrupt, "the store is damaged: key '\(PeerText.escaped(row.key))' has a live row without a value (entries.value is NULL); the other keys still read — write the key again, or restore a backup of the file")
        }
        return value
    }
}

/// What the store knows about one entry, without its value.
public struct EntryInfo: Sendable, Equatable, Codable {
    public let key: String
    public let encoding: String
    public let version: HLCTimestamp
    public let isDeleted: Bool
    public let size: Int
    public let changeSequence: Int64
    public let lane: SyncLane
    /// Written here and not yet acknowledged by the peer.
    public let isPending: Bool
    public let isEncrypted: Bool

    init(key: String, encoding: String, version: HLCTimestamp, isDeleted: Bool, size: Int, changeSequence: Int64, lane: SyncLane, isPending: Bool, isEncrypted: Bool) {
        self.key = key
        self.encoding = encoding
        self.version = version
        self.isDeleted = isDeleted
        self.size = size
        self.changeSequence = changeSequence
        self.lane = lane
        self.isPending = isPending
        self.isEncrypted = isEncrypted
    }

    init(row: StoredRow, isPending: Bool) {
        self.init(key: row.key, encoding: row.encoding, version: row.version, isDeleted: row.deleted, size: row.size,
                  changeSequence: row.changeSeq, lane: row.lane, isPending: isPending, isEncrypted: row.encrypted)
    }
}

/// What the cache keeps typed boxes as: a typed read compares the box's class
/// with `CachedValue<Value>` and then downcasts without a check.
@usableFromInline
typealias AnyCachedValue = AnyObject & Sendable

/// A cached decoded value in a box of its own type: a typed read checks the
/// box's class instead of casting an existential.
@usableFromInline
final class CachedValue<Value: Sendable>: Sendable {
    @usableFromInline let value: Value
    /// The `KeyDescriptor.declarationToken` of the declaration the value was
    /// read through, checked against the registry: a typed read through
    /// another one is checked again.
    @usableFromInline let declarationToken: Int
    @usableFromInline init(_ value: Value, declarationToken: Int) {
        self.value = value
        self.declarationToken = declarationToken
    }
}
