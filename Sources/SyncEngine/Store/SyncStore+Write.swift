/// Writes collected for one transaction with `SyncStore.batch`.
public struct WriteBatch: Sendable {
    struct Operation: Sendable {
        let key: String
        let descriptor: KeyDescriptor
        let bytes: [UInt8]?
        let decoded: (any Sendable)?
    }

    let store: SyncStore
    var operations: [Operation] = []

    /// Adds a write of `value` under `key`.
    public mutating func set<Value>(_ value: Value, for key: Key<Value>) throws {
        let descriptor = try store.governingDescriptor(for: key)
        operations.append(Operation(key: key.name, descriptor: descriptor, bytes: try key.serializer.encode(value), decoded: value))
    }

    /// Adds a removal of `key` (a tombstone that replicates).
    public mutating func remove<Value>(_ key: Key<Value>) throws {
        operations.append(Operation(key: key.name, descriptor: try store.governingDescriptor(for: key), bytes: nil, decoded: nil))
    }
}

extension SyncStore {
    /// Stores `value` under `key`. Writing the bytes already stored is skipped
    /// (no disk write, no new version, no event). Throws `.writeNotAllowed`
    /// when the key's availability forbids writes on this device.
    public func set<Value>(_ value: Value, for key: Key<Value>) async throws {
        try setNow(value, for: key)
    }

    /// Synchronous form of `set`, for property wrappers and benchmarks.
    public func setNow<Value>(_ value: Value, for key: Key<Value>) throws {
        let descriptor = try governingDescriptor(for: key)
        _ = try commitLocal([WriteBatch.Operation(key: key.name, descriptor: descriptor, bytes: try key.serializer.encode(value), decoded: value)])
    }

    /// Removes `key`'s value, leaving a tombstone that replicates the delete.
    public func remove<Value>(_ key: Key<Value>) async throws {
        _ = try commitLocal([WriteBatch.Operation(key: key.name, descriptor: try governingDescriptor(for: key), bytes: nil, decoded: nil)])
    }

    /// Runs several writes in one transaction: all commit or none do.
    public func batch(_ body: (inout WriteBatch) throws -> Void) async throws {
        try batchNow(body)
    }

    /// Synchronous form of `batch`.
    public func batchNow(_ body: (inout WriteBatch) throws -> Void) throws {
        var batch = WriteBatch(store: self)
        try body(&batch)
        _ = try commitLocal(batch.operations)
    }

    /// Removes every value this device may write, in one transaction.
    /// Read-only copies (`phoneWithWatchSync` on the watch) stay.
    public func clear() async throws {
        try checkOpen()
        let keys = try database.read { conn -> [String] in
            let stmt = try conn.statement("SELECT key FROM entries WHERE deleted = 0")
            var keys: [String] = []
            while try stmt.step() { keys.append(stmt.string(0)) }
            return keys
        }
        let operations = keys.compactMap { key -> WriteBatch.Operation? in
            guard let descriptor = registry.descriptor(forEntry: key), descriptor.availability.canWrite(on: role) else { return nil }
            return WriteBatch.Operation(key: key, descriptor: descriptor, bytes: nil, decoded: nil)
        }
        _ = try commitLocal(operations)
    }

    /// The registered declaration governing `key`, checked against the key's own.
    func governingDescriptor<Value>(for key: Key<Value>) throws -> KeyDescriptor {
        guard let registered = registry.descriptor(forEntry: key.name) else {
            throw SyncError(.unknownKey, "key '\(key.name)' is not in this store's registry; add it to the keys given to KeyRegistry")
        }
        var declared = key.descriptor
        declared.name = registered.name
        guard declared == registered else {
            throw SyncError(.keyDeclarationMismatch, "key '\(key.name)' is used with a declaration that differs from the registered one (\(registered)); use the registered key")
        }
        return registered
    }

    /// Commits local writes in one transaction with their versions, change
    /// sequence numbers and pending markers; then updates the cache and tells observers.
    @discardableResult
    func commitLocal(_ operations: [WriteBatch.Operation]) throws -> [StoreChange] {
        try checkOpen()
        for op in operations {
            guard op.descriptor.availability.canWrite(on: role) else {
                throw SyncError(.writeNotAllowed, "key '\(op.key)' is \(op.descriptor.availability.rawValue) and cannot be written on the \(role); write it on the \(role.counterpart)")
            }
            if let bytes = op.bytes, bytes.count > options.maxValueSize {
                throw SyncError(.valueTooLarge, "a value of \(bytes.count) bytes for key '\(op.key)' exceeds the store's limit of \(options.maxValueSize) bytes")
            }
        }
        guard !operations.isEmpty else { return [] }
        struct Outcome {
            var changes: [StoreChange] = []
            var slots: [(String, StoreCache.Slot)] = []
            var deferred: [(String, Int)] = []
            var skipped = 0
        }
        let now = physicalClock.nowMilliseconds()
        let outcome = try database.write({ conn -> Outcome in
            var outcome = Outcome()
            var inTransaction: [String: (version: HLCTimestamp, bytes: [UInt8]?)] = [:]
            for op in operations {
                let current: (version: HLCTimestamp, bytes: [UInt8]?)?
                if let seen = inTransaction[op.key] {
                    current = seen
                } else if let slot = cache.peek(op.key) {
                    current = (slot.version, slot.bytes)
                } else if let row = try loadRow(conn, key: op.key) {
                    current = (row.version, row.deleted ? nil : row.value)
                } else {
                    current = nil
                }
                if let bytes = op.bytes, let existing = current?.bytes, existing == bytes {
                    outcome.skipped += 1
                    continue
                }
                if op.bytes == nil && current?.bytes == nil { continue }
                let version = clock.now()
                let size = op.bytes?.count ?? 0
                let lane = lane(for: op.descriptor, size: size, deleted: op.bytes == nil)
                let row = StoredRow(key: op.key, value: op.bytes, encoding: op.descriptor.encoding, version: version,
                                    base: current?.version ?? .zero, deleted: op.bytes == nil, encrypted: false, size: size,
                                    changeSeq: takeSeq(), lane: lane, ackedSeq: 0)
                try saveRow(conn, row, encrypt: op.descriptor.security == .encrypted, writtenAt: now)
                inTransaction[op.key] = (version, op.bytes)
                outcome.changes.append(StoreChange(key: op.key, kind: op.bytes == nil ? .removed : .set, origin: .local, version: version))
                outcome.slots.append((op.key, StoreCache.Slot(bytes: op.bytes, encoding: op.descriptor.encoding, version: version, decoded: op.decoded)))
                if lane == .manual && op.descriptor.policy == .automaticSmall { outcome.deferred.append((op.key, size)) }
            }
            let willCommit = hooks.withLock { $0.willCommit }
            if !outcome.changes.isEmpty {
                for hook in willCommit { try hook(outcome.changes) }
            }
            return outcome
        }, onCommit: { outcome in
            for (key, slot) in outcome.slots { cache.store(key, slot) }
        })
        for _ in 0..<outcome.skipped { cache.countSkippedWrite() }
        if !outcome.deferred.isEmpty {
            counters.withLock { $0.deferred += outcome.deferred.count }
            for (key, size) in outcome.deferred { emit(.deferred(key: key, size: size)) }
        }
        publishCommitted(outcome.changes)
        if !outcome.changes.isEmpty {
            localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
            localWrites.publish(())
        }
        return outcome.changes
    }
}
