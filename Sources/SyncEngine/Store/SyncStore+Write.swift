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
        let started = ContinuousClock.now
        // Every write is checked before the transaction begins.
        let descriptors = try checkedDescriptors(writes)
        return try commitLocalRows(writtenAt: physicalClock.nowMilliseconds(), startedAt: started) { _ in (writes, descriptors) }
    }

    /// Commits, in one transaction, the writes `collect` makes under the
    /// write lock (each with its checked declaration), each as a new row even
    /// where it keeps the value the key holds (`reissueWritesFromAClockAhead`:
    /// a new version for the same value).
    func commitLocal(rewriting collect: (SQLiteConnection) throws -> (writes: [BackendWrite], descriptors: [KeyDescriptor]),
                     writtenAt now: Int64) throws -> [StoreChange] {
        try commitLocalRows(writtenAt: now, startedAt: .now, rewritesUnchanged: true, collect)
    }

    private func commitLocalRows(writtenAt now: Int64, startedAt started: ContinuousClock.Instant, rewritesUnchanged: Bool = false,
                                 _ collect: (SQLiteConnection) throws -> (writes: [BackendWrite], descriptors: [KeyDescriptor])) throws -> [StoreChange] {
        let outcome = try database.write({ conn -> LocalCommitOutcome in
            var outcome = LocalCommitOutcome(writtenAt: now, startedAt: started)
            let (writes, descriptors) = try collect(conn)
            var preparation = LocalRowPreparation()
            preparation.rewritesUnchanged = rewritesUnchanged
            let prepared = try prepareLocalRows(writes, descriptors: descriptors, preparation: &preparation,
                                                loadRows: { try loadRows(conn, keys: $0, valueFile: .ifReadable) },
                                                loadRow: { try loadRow(conn, key: $0, valueFile: .ifReadable) })
            try saveLocalRows(prepared, into: &outcome, conn)
            try runWillCommitHooks(outcome)
            return outcome
        }, onCommit: localCommitDidCommit)
        return finishLocalCommit(outcome)
    }

    /// Commits the writes `body` collects, in one transaction: a batch of
    /// 2,048 writes or more is saved chunk by chunk while `body` still runs,
    /// holding the write lock from its 2,048th write (`BulkWritePipeline`); a
    /// smaller one as `commit` does.
    public func batchNow(_ body: (inout WriteBatch) throws -> Void) throws {
        try checkOpen()
        // A batch inside a large batch's body: the outer one stops saving early (this one needs the writer).
        database.releaseWriterClaimedForThisThread()
        // Without reader connections the chunks could only be prepared on the writer.
        let pipeline = database.hasReaders ? BulkWritePipeline(store: self) : nil
        var batch = WriteBatch(registry: registry, pipeline: pipeline)
        do {
            try body(&batch)
        } catch {
            pipeline?.stop()
            throw error
        }
        guard let pipeline else {
            try commitLocal(batch.takeWrites())
            return
        }
        switch try pipeline.finish(rest: batch.takeWrites()) {
        case .committed(let outcome): finishLocalCommit(outcome)
        case .commitTogether(let writes): try commitLocal(writes)
        }
    }

    /// The helper thread's part of `batchNow`: one transaction, which
    /// calls `began` once it holds the write lock, saves the chunks `next`
    /// hands over, and commits when it says so.
    func commitLocalInChunks(began: () -> Void, next: () -> BulkWritePipeline.Step) throws -> LocalCommitOutcome {
        try checkOpen()
        let now = physicalClock.nowMilliseconds()
        let started = ContinuousClock.now
        return try database.write({ conn -> LocalCommitOutcome in
            began()
            var outcome = LocalCommitOutcome(writtenAt: now, startedAt: started)
            while true {
                switch next() {
                case .write(let prepared):
                    try saveLocalRows(prepared, into: &outcome, conn)
                    bulkChunksSaved.add(1, ordering: .relaxed)
                case .rollBack:
                    throw BulkWritePipeline.Stopped()
                case .commit:
                    try runWillCommitHooks(outcome)
                    return outcome
                }
            }
        }, onCommit: localCommitDidCommit)
    }

    /// Each write checked against the registry, this device's role and the size limit.
    func checkedDescriptors(_ writes: [BackendWrite]) throws -> [KeyDescriptor] {
        var descriptors: [KeyDescriptor] = []
        descriptors.reserveCapacity(writes.count)
        for write in writes {
            descriptors.append(try registry.checkedWrite(write.key, bytes: write.bytes, role: role, maxValueSize: options.maxValueSize, known: write.descriptor))
        }
        return descriptors
    }

    /// The rows `writes` make after those `preparation` has seen, without
    /// versions or sequence numbers (`saveLocalRows` gives them). The current
    /// state of each key comes from the cache, else from `loadRows` (128 keys
    /// per statement, for a large batch) or `loadRow`; it must be what the
    /// transaction that saves the rows sees, apart from this batch's own rows.
    func prepareLocalRows(_ writes: [BackendWrite], descriptors: [KeyDescriptor], preparation: inout LocalRowPreparation,
                          loadRows: ([String]) throws -> [String: StoredRow],
                          loadRow: (String) throws -> StoredRow?) throws -> PreparedLocalRows {
        let grouped = writes.count >= SyncStore.groupedWriteThreshold
        var prepared = PreparedLocalRows()
        prepared.rows.reserveCapacity(writes.count)
        prepared.decoded.reserveCapacity(writes.count)
        if preparation.values.isEmpty {
            // Later chunks grow it as inserts do (reserving each chunk's exact size would copy it every time).
            preparation.written.reserveCapacity(writes.count)
        }
        // What the cache knows of each key (one lock per group of keys), then the
        // keys it does not know read 128 per statement when the batch is large
        // (a single write reads its one row as before).
        let cached = cache.peekStates(count: writes.count) { writes[$0].key }
        var stored: [String: StoredRow] = [:]
        if grouped {
            // A key written twice may be read twice: harmless, and cheaper than a set.
            var missing: [String] = []
            for i in writes.indices where cached[i] == nil { missing.append(writes[i].key) }
            stored = try loadRows(missing)
        }
        for i in writes.indices {
            // Fields, not whole writes: no copy of each write and its declaration.
            let key = writes[i].key
            let bytes = writes[i].bytes
            let current: (version: HLCTimestamp, bytes: [UInt8]?)?
            // The stored value may be kept as the write would keep it: not when it is damaged (a file or
            // sealed bytes that no longer read), or written with another serializer (an app update).
            var keptAlike = true
            let rowIndex = preparation.values.count
            let earlier = preparation.written.updateValue(rowIndex, forKey: key)
            if let earlier {
                prepared.repeated = true
                current = (.zero, preparation.values[earlier])
            } else if let state = cached[i] {
                current = (state.version, state.bytes)
                keptAlike = state.bytes == nil || state.encoding == descriptors[i].encoding
            } else if let row = grouped ? (stored.isEmpty ? nil : stored[key]) : try loadRow(key) {
                // A value whose file is damaged reads as [] here, and is never kept alike: writing or removing the key repairs it.
                current = (row.version, row.deleted ? nil : (row.value ?? []))
                keptAlike = row.deleted || (row.value != nil && row.encoding == descriptors[i].encoding)
            } else {
                current = nil
            }
            // A removal of a key with a legacy name and no row of its own leaves a tombstone: else the next
            // read moves the legacy value in, and the removed value comes back.
            let shadowsLegacy = bytes == nil && earlier == nil && descriptors[i].legacyName != nil && (current?.version ?? .zero) == .zero
            let unchanged = !shadowsLegacy && keptAlike && (bytes.map { new in current?.bytes.map { $0 == new } ?? false } ?? (current?.bytes == nil))
            if unchanged && !preparation.rewritesUnchanged {
                // No row: the key keeps the row it had before this write (if any).
                if let earlier { preparation.written[key] = earlier } else { preparation.written.removeValue(forKey: key) }
                if bytes != nil { prepared.skipped += 1 }
                continue
            }
            // The key gets a row of its own: a value still under its legacy name goes in the same transaction
            // (else it stays live beside the key's row, and moves back once that row is purged).
            if earlier == nil, (current?.version ?? .zero) == .zero, let legacy = descriptors[i].legacyName {
                prepared.retiredLegacy.append(legacy)
            }
            let size = bytes?.count ?? 0
            let lane = lane(for: descriptors[i], size: size, deleted: bytes == nil)
            if let earlier { prepared.baseFromEarlier.append((rowIndex, earlier)) }
            preparation.values.append(bytes)
            // Version and change sequence are given when the rows are saved, to all rows at once.
            prepared.rows.append(StoredRow(key: key, value: bytes, encoding: descriptors[i].encoding, version: .zero,
                                           base: current?.version ?? .zero, deleted: bytes == nil, encrypted: false, size: size,
                                           changeSeq: 0, lane: lane))
            prepared.decoded.append(writes[i].decoded)
            if descriptors[i].security == .encrypted { prepared.encrypted.insert(key) }
            if lane == .manual && descriptors[i].policy == .automaticSmall { prepared.deferred.append((key, size)) }
        }
        return prepared
    }

    /// Saves `prepared` in the open transaction after the rows `outcome`
    /// holds, giving them versions and change sequence numbers.
    func saveLocalRows(_ prepared: PreparedLocalRows, into outcome: inout LocalCommitOutcome, _ conn: SQLiteConnection) throws {
        outcome.skipped += prepared.skipped
        outcome.deferred.append(contentsOf: prepared.deferred)
        guard !prepared.rows.isEmpty else { return }
        let firstRow = outcome.rows.count
        if firstRow == 0 {
            outcome.rows = prepared.rows
            outcome.decoded = prepared.decoded
            outcome.changes.reserveCapacity(prepared.rows.count)
        } else {
            outcome.rows.append(contentsOf: prepared.rows)
            outcome.decoded.append(contentsOf: prepared.decoded)
        }
        let newRows = firstRow..<outcome.rows.count
        // Consecutive versions and sequence numbers, in the order of the writes
        // (what one `clock.now()` and `takeSeq()` per row would give within a millisecond).
        // After the versions they replace (within the bound): see `HybridLogicalClock.reserve`.
        let replaced = outcome.rows[newRows].reduce(Int64(0)) { max($0, $1.base.packed) }
        let firstVersion = try clock.reserve(newRows.count, replacing: replaced)
        let firstSeq = takeSeqs(newRows.count)
        for (offset, i) in newRows.enumerated() {
            let version = HLCTimestamp(packed: firstVersion + Int64(offset), node: clock.node)
            outcome.rows[i].version = version
            // What the write replaced may carry a later version (written while the wall clock ran
            // past the bound, which the clock no longer follows): its base is this version then.
            outcome.rows[i].base = HLCTimestamp.base(outcome.rows[i].base, of: version)
            outcome.rows[i].changeSeq = firstSeq + Int64(offset)
            outcome.changes.append(StoreChange(key: outcome.rows[i].key, kind: outcome.rows[i].deleted ? .removed : .set,
                                               origin: .local, version: version))
        }
        for (row, earlier) in prepared.baseFromEarlier { outcome.rows[row].base = outcome.rows[earlier].version }
        let encrypted = prepared.encrypted
        if newRows.count == 1 && firstRow == 0 {
            try saveRow(conn, outcome.rows[0], encrypt: !encrypted.isEmpty, writtenAt: outcome.writtenAt)
        } else {
            // Several rows per INSERT (row by row for a store that keeps values in files).
            try saveRows(conn, outcome.rows[newRows], encrypt: { !encrypted.isEmpty && encrypted.contains($0.key) },
                         writtenAt: outcome.writtenAt, distinctKeys: !prepared.repeated, changes: outcome.changes[newRows])
        }
        // Not a legacy key this transaction wrote itself (a later chunk's write replaces the tombstone anyway).
        let written = prepared.retiredLegacy.isEmpty ? [] : Set(outcome.rows.lazy.map(\.key))
        for legacy in prepared.retiredLegacy where !written.contains(legacy) {
            guard let old = try loadRow(conn, key: legacy, valueFile: .ifReadable), !old.deleted else { continue }
            try retireLegacyRow(conn, old, writtenAt: outcome.writtenAt)
            outcome.retiredLegacy.append(legacy)
        }
    }

    private func runWillCommitHooks(_ outcome: LocalCommitOutcome) throws {
        let willCommit = hooks.withLock { $0.willCommit }
        if !outcome.changes.isEmpty {
            for hook in willCommit { try hook(outcome.changes) }
        }
    }

    /// Under the lock, right after COMMIT.
    private func localCommitDidCommit(_ outcome: LocalCommitOutcome) {
        // When the commit was made, not when its observers were told: a thread descheduled
        // in between must not make the next commit look like part of a burst.
        if !outcome.changes.isEmpty { noteLocalCommit(startedAt: outcome.startedAt) }
        cache.store(outcome.rows, decoded: outcome.decoded)
        for legacy in outcome.retiredLegacy { cache.invalidate(legacy) }
    }

    /// After the lock: counters, events, observers, the session's wake-up.
    @discardableResult
    private func finishLocalCommit(_ outcome: LocalCommitOutcome) -> [StoreChange] {
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

/// What a local commit wrote, gathered in its transaction.
struct LocalCommitOutcome: Sendable {
    var changes: [StoreChange] = []
    /// The rows written, and the decoded value of each (for the cache).
    var rows: [StoredRow] = []
    var decoded: [(any Sendable)?] = []
    var deferred: [(String, Int)] = []
    var skipped = 0
    /// Legacy names whose live row the commit removed (out of the cache after it).
    var retiredLegacy: [String] = []
    /// The wall-clock milliseconds every row is marked as written at.
    let writtenAt: Int64
    /// When the write began (burst coalescing times the writer's pause from the commit before to it).
    let startedAt: ContinuousClock.Instant

    init(writtenAt: Int64, startedAt: ContinuousClock.Instant) {
        self.writtenAt = writtenAt
        self.startedAt = startedAt
    }
}

/// What `prepareLocalRows` keeps from one chunk of a transaction's writes to the next.
struct LocalRowPreparation: Sendable {
    /// The row each key got (a key written twice keeps its last).
    var written: [String: Int] = [:]
    /// The value of each row prepared so far, by row.
    var values: [[UInt8]?] = []
    /// Whether a write of the value its key holds still makes a row (a new version).
    var rewritesUnchanged = false
}

/// Rows of one chunk of local writes, ready to save but for their versions and sequence numbers.
struct PreparedLocalRows: Sendable {
    var rows: [StoredRow] = []
    var decoded: [(any Sendable)?] = []
    /// Rows whose base is the version an earlier row of the transaction gets (row, earlier row), by row of the transaction.
    var baseFromEarlier: [(Int, Int)] = []
    var deferred: [(String, Int)] = []
    /// Keys among the rows declared encrypted.
    var encrypted = Set<String>()
    var skipped = 0
    /// Whether a key of the chunk was written earlier in the transaction (in this chunk or before).
    var repeated = false
    /// Legacy names of keys that get their first row: a live row under one is retired when the rows are saved.
    var retiredLegacy: [String] = []
}
