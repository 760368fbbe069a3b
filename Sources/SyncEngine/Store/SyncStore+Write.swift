extension SyncStore {
    /// Commits `writes` in one transaction with their versions, change
    /// sequence numbers and pending markers; then updates the cache and tells observers.
    @discardableResult
    public func commit(_ writes: [BackendWrite]) throws -> [StoreChange] {
        try commitLocal(writes)
    }

    /// Commits local writes in one transaction with their versions, change
    /// sequence numbers and pending markers; then updates the cache and tells observers.
    @discardableResult
    func commitLocal(_ writes: [BackendWrite]) throws -> [StoreChange] {
        try checkOpen()
        let operations = try writes.map { write in
            (write, try registry.checkedWrite(write.key, bytes: write.bytes, role: role, maxValueSize: options.maxValueSize, known: write.descriptor))
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
            // Keys the cache does not know, read 128 per statement when the batch is large
            // (a single write reads its one row as before).
            var stored: [String: StoredRow] = [:]
            if operations.count >= SyncStore.groupedWriteThreshold {
                var missing: [String] = []
                var seen = Set<String>()
                for (op, _) in operations where cache.peek(op.key) == nil && seen.insert(op.key).inserted { missing.append(op.key) }
                stored = try loadRows(conn, keys: missing, valueFile: .ifReadable)
            }
            var rows: [StoredRow] = []
            var encrypted = Set<String>()
            rows.reserveCapacity(operations.count)
            for (op, descriptor) in operations {
                let current: (version: HLCTimestamp, bytes: [UInt8]?)?
                if let seen = inTransaction[op.key] {
                    current = seen
                } else if let slot = cache.peek(op.key) {
                    current = (slot.version, slot.bytes)
                } else if let row = operations.count >= SyncStore.groupedWriteThreshold ? stored[op.key]
                            : try loadRow(conn, key: op.key, valueFile: .ifReadable) {
                    // A value whose file is damaged reads as [] here, so that writing or removing the key repairs it.
                    current = (row.version, row.deleted ? nil : (row.value ?? []))
                } else {
                    current = nil
                }
                if let bytes = op.bytes, let existing = current?.bytes, existing == bytes {
                    outcome.skipped += 1
                    continue
                }
                if op.bytes == nil && current?.bytes == nil { continue }
                let version = try clock.now()
                let size = op.bytes?.count ?? 0
                let lane = lane(for: descriptor, size: size, deleted: op.bytes == nil)
                rows.append(StoredRow(key: op.key, value: op.bytes, encoding: descriptor.encoding, version: version,
                                      base: current?.version ?? .zero, deleted: op.bytes == nil, encrypted: false, size: size,
                                      changeSeq: takeSeq(), lane: lane))
                if descriptor.security == .encrypted { encrypted.insert(op.key) }
                inTransaction[op.key] = (version, op.bytes)
                outcome.changes.append(StoreChange(key: op.key, kind: op.bytes == nil ? .removed : .set, origin: .local, version: version))
                outcome.slots.append((op.key, StoreCache.Slot(bytes: op.bytes, encoding: descriptor.encoding, version: version, decoded: op.decoded)))
                if lane == .manual && descriptor.policy == .automaticSmall { outcome.deferred.append((op.key, size)) }
            }
            if rows.count == 1 {
                try saveRow(conn, rows[0], encrypt: !encrypted.isEmpty, writtenAt: now)
            } else {
                // Several rows per INSERT (row by row for a store that keeps values in files).
                try saveRows(conn, rows, encrypt: { !encrypted.isEmpty && encrypted.contains($0.key) }, writtenAt: now)
            }
            let willCommit = hooks.withLock { $0.willCommit }
            if !outcome.changes.isEmpty {
                for hook in willCommit { try hook(outcome.changes) }
            }
            return outcome
        }, onCommit: { outcome in
            cache.store(outcome.slots)
        })
        for _ in 0..<outcome.skipped { cache.countSkippedWrite() }
        if !outcome.deferred.isEmpty {
            counters.withLock { $0.deferred += outcome.deferred.count }
            for (key, size) in outcome.deferred { emit(.deferred(key: key, size: size)) }
        }
        publishCommitted(outcome.changes)
        if !outcome.changes.isEmpty {
            noteLocalCommit()
            localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
            localWrites.publish(SyncStore.thisDevice)
        }
        return outcome.changes
    }

    /// Writes of at least this many keys read the current rows in groups and write several rows per statement.
    static let groupedWriteThreshold = 8
}
