import Synchronization

/// A store that keeps everything in memory, for SwiftUI previews and tests:
/// the same typed API, checks, versions, observation, legacy-key migration and
/// cache statistics as `SyncStore`, without a file and without replication.
///
/// ```swift
/// let preview = try InMemoryStore(role: .phone, registry: KeyRegistry([steps]))
/// try preview.setNow(9_000, for: steps)
/// ```
public final class InMemoryStore: KeyValueBackend {
    public let registry: KeyRegistry
    public let role: DeviceRole
    /// Largest value a key may hold, serialized.
    public let maxValueSize: Int
    /// Values larger than this count as cache misses on every read, as in `SyncStore`.
    public let maxCachedValueSize: Int

    private struct Stored {
        var entry: BackendEntry
        var changeSequence: Int64
        /// The lane `SyncStore` files the change in (`SyncStore.lane(for:on:size:deleted:)`).
        var lane: SyncLane
    }

    private struct State {
        var entries: [String: Stored] = [:]
        /// Keys read or written since the store was made: reads of these are cache hits.
        var cached: Set<String> = []
        var stats = CacheStatistics()
        var sequence: Int64 = 0
        var closed = false
    }

    private let state = Mutex(State())
    private let clock: HybridLogicalClock
    private let changeHub = Broadcaster<StoreChange>()
    /// The keys declaring each legacy name: their cached absence goes when a value comes under it (as in `SyncStore`).
    private let legacyDependents: [String: [String]]

    public init(role: DeviceRole, registry: KeyRegistry, clock: any PhysicalClock = SystemClock(),
                maxValueSize: Int = 64 * 1024 * 1024, maxCachedValueSize: Int = 64 * 1024) {
        self.role = role
        self.registry = registry
        self.maxValueSize = maxValueSize
        self.maxCachedValueSize = maxCachedValueSize
        self.legacyDependents = registry.keysByLegacyName
        self.clock = HybridLogicalClock(node: UInt32.random(in: 1...UInt32.max), physical: clock, floor: 0)
    }

    /// Ends observation; further use throws `.closed`.
    public func close() {
        state.withLock { $0.closed = true }
        changeHub.finishAll()
    }

    public func entry(forKey key: String, declaredAs declared: KeyDescriptor?) throws -> BackendEntry? {
        // As `SyncStore`: the name in NFC, as every stored name is.
        let key = KeyName.canonical(key)
        let found = try state.withLock { s -> (entry: BackendEntry?, legacy: (String, KeyDescriptor)?) in
            try InMemoryStore.checkOpen(s)
            let stored = s.entries[key]
            if s.cached.contains(key) {
                s.stats.hits += 1
                return (stored?.entry, nil)
            }
            let descriptor = try registry.governingDescriptor(for: key, declared: declared)
            s.stats.misses += 1
            if (stored?.entry.bytes?.count ?? 0) <= maxCachedValueSize { s.cached.insert(key) }
            guard stored == nil, let legacy = descriptor.legacyName, s.entries[legacy]?.entry.bytes != nil else {
                return (stored?.entry, nil)
            }
            return (nil, (legacy, descriptor))
        }
        guard let (legacy, descriptor) = found.legacy else { return found.entry }
        return try migrateLegacy(from: legacy, to: key, descriptor: descriptor)
    }

    /// Moves the legacy key's value to `key` atomically, as `SyncStore` does.
    private func migrateLegacy(from legacy: String, to key: String, descriptor: KeyDescriptor) throws -> BackendEntry? {
        let moved = try state.withLock { s -> BackendEntry? in
            if let current = s.entries[key] { return current.entry }
            guard let old = s.entries[legacy]?.entry, let bytes = old.bytes else { return nil }
            guard old.encoding == descriptor.encoding else {
                s.cached.remove(key)
                throw descriptor.legacySerializerMismatch(legacy: legacy, stored: old.encoding)
            }
            // Both versions first: a clock that fails leaves both keys as they were (and the
            // key's absence uncached), as `SyncStore`'s transaction does.
            let versions: (HLCTimestamp, HLCTimestamp)
            do {
                versions = (try clock.now(), try clock.now())
            } catch {
                s.cached.remove(key)
                throw error
            }
            let entry = BackendEntry(bytes: bytes, encoding: old.encoding, version: versions.0)
            s.sequence += 1
            s.entries[key] = Stored(entry: entry, changeSequence: s.sequence, lane: SyncStore.lane(for: descriptor, on: role, size: bytes.count, deleted: false))
            s.sequence += 1
            s.entries[legacy] = Stored(entry: BackendEntry(bytes: nil, encoding: old.encoding, version: versions.1), changeSequence: s.sequence,
                                       lane: retiredLane(legacy))
            s.cached.remove(legacy)
            return entry
        }
        if let moved, moved.bytes != nil {
            changeHub.publish(StoreChange(key: key, kind: .set, origin: .local, version: moved.version))
        }
        return moved
    }

    public func rememberDecoded(_ value: any Sendable, forKey key: String, version: HLCTimestamp) {
        state.withLock { s in
            if s.entries[key]?.entry.version == version { s.entries[key]?.entry.decoded = value }
        }
    }

    /// The lane of the tombstone that retires a legacy key's value: that of
    /// its declaration when it is still declared (`SyncStore` keeps such a
    /// tombstone so the removal replicates), else `none`.
    private func retiredLane(_ legacy: String) -> SyncLane {
        registry.descriptor(forEntry: legacy).map { SyncStore.lane(for: $0, on: role, size: 0, deleted: true) } ?? .none
    }

    /// Writes all of `writes` or none, as `SyncStore`'s transaction does: a
    /// closed store throws `.closed` before any write is checked, and a clock
    /// that fails partway (`clock-out-of-range`) leaves the store as it was.
    @discardableResult
    public func commit(_ writes: [BackendWrite]) throws -> [StoreChange] {
        try state.withLock { try InMemoryStore.checkOpen($0) }
        let checked = try writes.map { write in
            (write, try registry.checkedWrite(write.key, bytes: write.bytes, role: role, maxValueSize: maxValueSize, known: write.descriptor))
        }
        let changes = try state.withLock { s -> [StoreChange] in
            try InMemoryStore.checkOpen(s)
            // Staged apart, and applied only once every version was issued.
            var staged: [String: Stored] = [:]
            var cacheMoves: [(key: String, cached: Bool)] = []
            var sequence = s.sequence
            var skipped = 0
            func stored(_ key: String) -> Stored? { staged[key] ?? s.entries[key] }
            func stage(_ key: String, _ entry: BackendEntry, lane: SyncLane) {
                sequence += 1
                staged[key] = Stored(entry: entry, changeSequence: sequence, lane: lane)
            }
            var changes: [StoreChange] = []
            var written = Set<String>()
            for (write, descriptor) in checked {
                defer { written.insert(write.key) }
                let current = stored(write.key)?.entry
                if let bytes = write.bytes, let existing = current?.bytes, existing == bytes {
                    skipped += 1
                    continue
                }
                // A key with a legacy name and no entry of its own keeps the removal (else a read moves the legacy value in).
                if write.bytes == nil && current?.bytes == nil && !(current == nil && descriptor.legacyName != nil) { continue }
                let version = try clock.now()
                let size = write.bytes?.count ?? 0
                stage(write.key, BackendEntry(bytes: write.bytes, encoding: descriptor.encoding, version: version, decoded: write.decoded),
                      lane: SyncStore.lane(for: descriptor, on: role, size: size, deleted: write.bytes == nil))
                cacheMoves.append((write.key, size <= maxCachedValueSize))
                // A key that names this one as its legacy name and was read as absent: its next read moves this value.
                if write.bytes != nil, let dependents = legacyDependents[write.key] {
                    for dependent in dependents where stored(dependent) == nil { cacheMoves.append((dependent, false)) }
                }
                // The key's first entry retires a value still under its legacy name, as `SyncStore` does.
                if current == nil, let legacy = descriptor.legacyName, !written.contains(legacy), let old = stored(legacy)?.entry, old.bytes != nil {
                    stage(legacy, BackendEntry(bytes: nil, encoding: old.encoding, version: try clock.now()), lane: retiredLane(legacy))
                    cacheMoves.append((legacy, false))
                }
                changes.append(StoreChange(key: write.key, kind: write.bytes == nil ? .removed : .set, origin: .local, version: version))
            }
            s.entries.merge(staged) { _, new in new }
            s.sequence = sequence
            s.stats.skippedWrites += skipped
            for move in cacheMoves {
                if move.cached { s.cached.insert(move.key) } else { s.cached.remove(move.key) }
            }
            return changes
        }
        for change in changes { changeHub.publish(change) }
        return changes
    }

    /// Every entry's metadata, ordered by key: its lane, and pending as in a
    /// `SyncStore` that has no peer yet (this one never has one): a change in
    /// a lane that sends, or waiting for `sync()` (`manual`), is pending.
    public func allEntryInfo() throws -> [EntryInfo] {
        try state.withLock { s in
            try InMemoryStore.checkOpen(s)
            return s.entries.sorted { $0.key < $1.key }.map { key, stored in
                EntryInfo(key: key, encoding: stored.entry.encoding, version: stored.entry.version, isDeleted: stored.entry.bytes == nil,
                          size: stored.entry.bytes?.count ?? 0, changeSequence: stored.changeSequence, lane: stored.lane,
                          isPending: stored.lane.isSent || stored.lane == .manual, isEncrypted: false)
            }
        }
    }

    public func changes(matching filter: ChangeFilter) -> AsyncStream<StoreChange> {
        changeHub.subscribe(where: { filter.matches($0.key) }, marking: StoreChange.marking)
    }

    public func observeChanges(matching filter: ChangeFilter, _ handler: @escaping @Sendable (StoreChange) -> Void) -> ChangeObservation {
        changeHub.observe(where: { filter.matches($0.key) }, handler)
    }

    public var cacheStatistics: CacheStatistics { state.withLock { $0.stats } }
    public func resetCacheStatistics() { state.withLock { $0.stats = CacheStatistics() } }

    /// Runs `work` in place: this store does no I/O and holds its lock only briefly.
    public func performBlocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try work()
    }

    private static func checkOpen(_ state: State) throws {
        if state.closed { throw SyncError(.closed, "the in-memory store is closed; make a new one") }
    }
}
