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
        guard !writes.isEmpty else { return [] }
        var descriptors: [KeyDescriptor] = []
        descriptors.reserveCapacity(writes.count)
        for write in writes {
            descriptors.append(try registry.checkedWrite(write.key, bytes: write.bytes, role: role, maxValueSize: options.maxValueSize, known: write.descriptor))
        }
        struct Outcome {
            var changes: [StoreChange] = []
            /// The rows written, and the decoded value of each (for the cache).
            var rows: [StoredRow] = []
            var decoded: [(any Sendable)?] = []
            var deferred: [(String, Int)] = []
            var skipped = 0
        }
        let grouped = writes.count >= SyncStore.groupedWriteThreshold
        let now = physicalClock.nowMilliseconds()
        let outcome = try database.write({ conn -> Outcome in
            var outcome = Outcome()
            outcome.rows.reserveCapacity(writes.count)
            outcome.decoded.reserveCapacity(writes.count)
            outcome.changes.reserveCapacity(writes.count)
            // What the cache knows of each key (one lock per group of keys), then the
            // keys it does not know read 128 per statement when the batch is large
            // (a single write reads its one row as before).
            let cached = cache.peekStates(count: writes.count) { writes[$0].key }
            var stored: [String: StoredRow] = [:]
            if grouped {
                // A key written twice may be read twice: harmless, and cheaper than a set.
                var missing: [String] = []
                for i in writes.indices where cached[i] == nil { missing.append(writes[i].key) }
                stored = try loadRows(conn, keys: missing, valueFile: .ifReadable)
            }
            // The row each key got earlier in this transaction (a key written twice).
            var written: [String: Int] = [:]
            written.reserveCapacity(writes.count)
            var repeated = false
            // Rows whose base is the version an earlier row of this transaction gets (row, earlier row).
            var baseFromEarlier: [(Int, Int)] = []
            var encrypted = Set<String>()
            for i in writes.indices {
                // Fields, not whole writes: no copy of each write and its declaration.
                let key = writes[i].key
                let bytes = writes[i].bytes
                let current: (version: HLCTimestamp, bytes: [UInt8]?)?
                let earlier = written.updateValue(outcome.rows.count, forKey: key)
                if let earlier {
                    repeated = true
                    current = (.zero, outcome.rows[earlier].value)
                } else if let state = cached[i] {
                    current = state
                } else if let row = grouped ? (stored.isEmpty ? nil : stored[key]) : try loadRow(conn, key: key, valueFile: .ifReadable) {
                    // A value whose file is damaged reads as [] here, so that writing or removing the key repairs it.
                    current = (row.version, row.deleted ? nil : (row.value ?? []))
                } else {
                    current = nil
                }
                let unchanged = bytes.map { new in current?.bytes.map { $0 == new } ?? false } ?? (current?.bytes == nil)
                if unchanged {
                    // No row: the key keeps the row it had before this write (if any).
                    if let earlier { written[key] = earlier } else { written.removeValue(forKey: key) }
                    if bytes != nil { outcome.skipped += 1 }
                    continue
                }
                let size = bytes?.count ?? 0
                let lane = lane(for: descriptors[i], size: size, deleted: bytes == nil)
                if let earlier { baseFromEarlier.append((outcome.rows.count, earlier)) }
                // Version and change sequence are given below, to all rows at once.
                outcome.rows.append(StoredRow(key: key, value: bytes, encoding: descriptors[i].encoding, version: .zero,
                                              base: current?.version ?? .zero, deleted: bytes == nil, encrypted: false, size: size,
                                              changeSeq: 0, lane: lane))
                outcome.decoded.append(writes[i].decoded)
                if descriptors[i].security == .encrypted { encrypted.insert(key) }
                if lane == .manual && descriptors[i].policy == .automaticSmall { outcome.deferred.append((key, size)) }
            }
            if !outcome.rows.isEmpty {
                // Consecutive versions and sequence numbers, in the order of the writes
                // (what one `clock.now()` and `takeSeq()` per row would give within a millisecond).
                let firstVersion = try clock.reserve(outcome.rows.count)
                let firstSeq = takeSeqs(outcome.rows.count)
                for i in outcome.rows.indices {
                    let version = HLCTimestamp(packed: firstVersion + Int64(i), node: clock.node)
                    outcome.rows[i].version = version
                    outcome.rows[i].changeSeq = firstSeq + Int64(i)
                    outcome.changes.append(StoreChange(key: outcome.rows[i].key, kind: outcome.rows[i].deleted ? .removed : .set,
                                                       origin: .local, version: version))
                }
                for (row, earlier) in baseFromEarlier { outcome.rows[row].base = outcome.rows[earlier].version }
            }
            if outcome.rows.count == 1 {
                try saveRow(conn, outcome.rows[0], encrypt: !encrypted.isEmpty, writtenAt: now)
            } else if !outcome.rows.isEmpty {
                // Several rows per INSERT (row by row for a store that keeps values in files).
                try saveRows(conn, outcome.rows, encrypt: { !encrypted.isEmpty && encrypted.contains($0.key) }, writtenAt: now,
                             distinctKeys: !repeated, changes: outcome.changes)
            }
            let willCommit = hooks.withLock { $0.willCommit }
            if !outcome.changes.isEmpty {
                for hook in willCommit { try hook(outcome.changes) }
            }
            return outcome
        }, onCommit: { outcome in
            // When the commit was made, not when its observers were told: a thread descheduled
            // in between must not make the next commit look like part of a burst.
            if !outcome.changes.isEmpty { noteLocalCommit() }
            cache.store(outcome.rows, decoded: outcome.decoded)
        })
        for _ in 0..<outcome.skipped { cache.countSkippedWrite() }
        if !outcome.deferred.isEmpty {
            counters.withLock { $0.deferred += outcome.deferred.count }
            for (key, size) in outcome.deferred { emit(.deferred(key: key, size: size)) }
        }
        publishCommitted(outcome.changes)
        if !outcome.changes.isEmpty {
            localGeneration.wrappingAdd(1, ordering: .sequentiallyConsistent)
            localWrites.publish(SyncStore.thisDevice)
        }
        return outcome.changes
    }

    /// Writes of at least this many keys read the current rows in groups and write several rows per statement.
    static let groupedWriteThreshold = 8
}
