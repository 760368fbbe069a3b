import Synchronization

/// Read-through, write-through cache of entries, with cached absence and
/// statistics. Holds plaintext bytes and the last decoded value.
///
/// `@usableFromInline` with an inlinable typed lookup (`typedValue`), so that
/// a cached typed read compiles, in the app, into one dictionary lookup under
/// one lock specialized for the value's type.
@usableFromInline
final class StoreCache: Sendable {
    struct Slot {
        /// Plaintext bytes, nil when the key has no live value (absent or deleted).
        var bytes: [UInt8]?
        var encoding: String
        var version: HLCTimestamp
        var decoded: (any Sendable)?
        /// The `KeyDescriptor.declarationToken` of the last declaration a read
        /// of this slot was checked with against the registry
        /// (`KeyRegistry.governingDescriptor`): a hit through an equal one
        /// needs no check again; another is checked as a miss is.
        var checkedToken: Int? = nil
    }

    @usableFromInline
    struct State {
        var slots: [String: Slot] = [:]
        /// The decoded value of a slot again, in a box of its own type
        /// (`CachedValue`), so a typed read needs no existential cast. A box is
        /// here only while its slot holds the version it was made from: every
        /// change of a slot drops it.
        @usableFromInline var typed: [String: AnyCachedValue] = [:]
        var bytes = 0
        @usableFromInline var stats = CacheStatistics()
        /// Bumped by every change of a slot (a write or an invalidation): a
        /// slot read from a reader connection is kept only if nothing changed
        /// since before its read began (it could be older than the change).
        var epoch: UInt64 = 0
    }

    @usableFromInline let state = Mutex(State())
    /// Values larger than this are read from disk each time.
    let maxCachedValueSize: Int
    /// Total cached bytes before the cache starts again.
    let budget: Int
    let maxSlots = 100_000

    /// The keys declaring each legacy name (`KeyRegistry.keysByLegacyName`).
    /// A key with a legacy name read while neither held a value is cached as
    /// absent (its read tried the move); a value coming under the legacy name
    /// later (a write, the peer's, another process's) drops that absence, so
    /// the next read moves the value, as a read after a restart would.
    let legacyDependents: [String: [String]]

    init(maxCachedValueSize: Int = 64 * 1024, budget: Int = 8 * 1024 * 1024, legacyDependents: [String: [String]] = [:]) {
        self.maxCachedValueSize = maxCachedValueSize
        self.budget = budget
        self.legacyDependents = legacyDependents
    }

    /// Drops the cached absence (never written: version zero) of the keys
    /// whose legacy name is `key`, which has (or may have) a value now.
    private func dropAbsentDependents(of key: String, in s: inout State) {
        guard let dependents = legacyDependents[key] else { return }
        for dependent in dependents {
            if let slot = s.slots[dependent], slot.bytes == nil, slot.version == .zero { s.slots.removeValue(forKey: dependent) }
        }
    }

    /// The slot for `key`, counting a hit or a miss.
    func lookup(_ key: String) -> Slot? {
        state.withLock { s in
            if let slot = s.slots[key] {
                s.stats.hits += 1
                return slot
            }
            s.stats.misses += 1
            return nil
        }
    }

    /// The decoded value cached for `key`, its version and bytes, and the
    /// declaration its slot was checked with, counting a hit; nil (counting
    /// nothing) when the key has no live value or no decoded one.
    func decodedHit(_ key: String) -> (value: any Sendable, version: HLCTimestamp, bytes: [UInt8], checkedToken: Int?)? {
        state.withLock { s in
            guard let index = s.slots.index(forKey: key) else { return nil }
            let slot = s.slots.values[index]
            guard let bytes = slot.bytes, let decoded = slot.decoded else { return nil }
            s.stats.hits += 1
            return (decoded, slot.version, bytes, slot.checkedToken)
        }
    }

    /// The value of `type` cached for `key` in its typed box, counting a hit;
    /// nil (counting nothing) when there is no box, it holds another type, or
    /// it was checked through another declaration than the one of
    /// `declarationToken` (`KeyDescriptor.declarationToken`). Compares the
    /// box's class instead of casting, and copies nothing else.
    @inlinable
    func typedValue<Value: Sendable>(_ key: String, as type: Value.Type, declarationToken: Int) -> Value? {
        state.withLock { s -> Value? in
            guard let index = s.typed.index(forKey: key) else { return nil }
            let box = s.typed.values[index]
            guard ObjectIdentifier(Swift.type(of: box)) == ObjectIdentifier(CachedValue<Value>.self) else { return nil }
            let typed = unsafeDowncast(box, to: CachedValue<Value>.self)
            guard typed.declarationToken == declarationToken else { return nil }
            s.stats.hits += 1
            return typed.value
        }
    }

    /// Notes that reads of `key` through the declaration of `declarationToken` passed the registry's check.
    func noteChecked(_ key: String, declarationToken: Int) {
        state.withLock { s in
            guard let index = s.slots.index(forKey: key) else { return }
            s.slots.values[index].checkedToken = declarationToken
        }
    }

    /// The typed box kept for `key`, if any (for tests).
    func typedBox(_ key: String) -> AnyCachedValue? { state.withLock { $0.typed[key] } }

    /// Keeps `box` (checked through its declaration) beside the slot of `key` if it
    /// still holds `bytes` at `version` (a resolver's merge gives a version other bytes).
    func rememberTyped<Value>(_ key: String, version: HLCTimestamp, bytes: [UInt8], box: CachedValue<Value>) {
        state.withLock { s in
            guard let index = s.slots.index(forKey: key), s.slots.values[index].version == version,
                  s.slots.values[index].bytes == bytes else { return }
            s.slots.values[index].checkedToken = box.declarationToken
            s.typed[key] = box
        }
    }

    /// The slot for `key` without touching the statistics.
    func peek(_ key: String) -> Slot? { state.withLock { $0.slots[key] } }

    func store(_ key: String, _ slot: Slot) {
        state.withLock { s in
            s.epoch &+= 1
            store(key, slot, in: &s)
        }
    }

    /// Stores several slots, in order, taking the lock once.
    func store(_ slots: [(String, Slot)]) {
        guard !slots.isEmpty else { return }
        state.withLock { s in
            s.epoch &+= 1
            for (key, slot) in slots { store(key, slot, in: &s) }
        }
    }

    /// Rows of one transaction from which the cache keeps only the keys it
    /// already holds (a bulk write): filling it with a bulk import would push
    /// out what the app reads; the other keys are read on first use.
    static let bulkRows = 4_096

    /// Stores a slot for each written row (its decoded value beside it), in
    /// order, taking the lock once and growing the table once. Of `bulkRows`
    /// rows or more, only keys the cache holds are updated.
    func store(_ rows: [StoredRow], decoded: [(any Sendable)?]) {
        guard !rows.isEmpty else { return }
        state.withLock { s in
            s.epoch &+= 1
            if rows.count >= StoreCache.bulkRows {
                guard !s.slots.isEmpty else { return }
                if !legacyDependents.isEmpty {
                    for row in rows where row.value != nil { dropAbsentDependents(of: row.key, in: &s) }
                }
                for (row, value) in zip(rows, decoded) where s.slots.index(forKey: row.key) != nil {
                    store(row.key, Slot(bytes: row.value, encoding: row.encoding, version: row.version, decoded: value), in: &s)
                }
                return
            }
            let wanted = min(maxSlots, s.slots.count + rows.count)
            if wanted > s.slots.capacity { s.slots.reserveCapacity(wanted) }
            for (row, value) in zip(rows, decoded) {
                store(row.key, Slot(bytes: row.value, encoding: row.encoding, version: row.version, decoded: value), in: &s)
            }
        }
    }

    /// The version, bytes and encoding cached for each of `count` keys (`key(i)`), in
    /// order, nil for a key the cache does not know; statistics untouched.
    /// Takes the lock once per 1,024 keys, so readers never wait long.
    func peekStates(count: Int, key: (Int) -> String) -> [(version: HLCTimestamp, bytes: [UInt8]?, encoding: String)?] {
        var states: [(version: HLCTimestamp, bytes: [UInt8]?, encoding: String)?] = []
        states.reserveCapacity(count)
        var start = 0
        while start < count {
            let end = min(count, start + 1024)
            state.withLock { s in
                guard !s.slots.isEmpty else {
                    states.append(contentsOf: repeatElement(nil, count: end - start))
                    return
                }
                for i in start..<end {
                    if let index = s.slots.index(forKey: key(i)) {
                        let slot = s.slots.values[index]
                        states.append((slot.version, slot.bytes, slot.encoding))
                    } else {
                        states.append(nil)
                    }
                }
            }
            start = end
        }
        return states
    }

    /// The epoch to pass to `fill` (read it before the read that fills).
    var epoch: UInt64 { state.withLock { $0.epoch } }

    /// Keeps `slot`, read from the file, unless a slot changed since `epoch`
    /// (then the read may predate that change, and the next miss reads again).
    func fill(_ key: String, _ slot: Slot, readSince epoch: UInt64) {
        state.withLock { s in
            guard s.epoch == epoch else { return }
            store(key, slot, in: &s)
        }
    }

    /// A fill does not move the epoch: it only copies what is committed.
    private func store(_ key: String, _ slot: Slot, in s: inout State) {
        if !s.typed.isEmpty { s.typed.removeValue(forKey: key) }
        if !legacyDependents.isEmpty, slot.bytes != nil { dropAbsentDependents(of: key, in: &s) }
        let size = slot.bytes?.count ?? 0
        guard size <= maxCachedValueSize else {
            if let old = s.slots.removeValue(forKey: key) { s.bytes -= old.bytes?.count ?? 0 }
            return
        }
        if let old = s.slots.updateValue(slot, forKey: key) { s.bytes -= old.bytes?.count ?? 0 }
        s.bytes += size
        if s.bytes > budget || s.slots.count > maxSlots {
            // Over budget: start again (rare; amortized O(1) per write).
            s.slots.removeAll(keepingCapacity: true)
            s.typed.removeAll()
            s.slots[key] = slot
            s.bytes = slot.bytes?.count ?? 0
        }
    }

    /// Keeps `value` beside the slot of `key` if it still holds `bytes` (when
    /// given) at `version` (a resolver's merge gives a version other bytes).
    func rememberDecoded(_ key: String, version: HLCTimestamp, bytes: [UInt8]? = nil, value: any Sendable) {
        state.withLock { s in
            guard let slot = s.slots[key], slot.version == version, bytes == nil || slot.bytes == bytes else { return }
            s.slots[key]?.decoded = value
        }
    }

    func invalidate(_ key: String) {
        state.withLock { s in
            s.epoch &+= 1
            if !legacyDependents.isEmpty { dropAbsentDependents(of: key, in: &s) }
            s.typed.removeValue(forKey: key)
            s.bytes -= s.slots.removeValue(forKey: key)?.bytes?.count ?? 0
        }
    }

    /// Keys dropped under one hold of the lock by `invalidate(_:)`.
    static let invalidationChunk = 128

    /// Drops `keys`, `invalidationChunk` at a time: reads (cache hits)
    /// come in between. A batch applied from the peer drops all its keys
    /// here; under one hold, its 2,000 keys held cache hits back during an
    /// initial sync (a hit's p99 128–167 µs there, against 2–3 µs idle; in
    /// chunks 42–47 µs). Each chunk moves the epoch, so a read that began
    /// before the commit these keys changed in never fills the cache afterwards.
    func invalidate(_ keys: some Sequence<String>) {
        var remaining = keys.makeIterator()
        var chunk: [String] = []
        repeat {
            chunk.removeAll(keepingCapacity: true)
            while chunk.count < StoreCache.invalidationChunk, let key = remaining.next() { chunk.append(key) }
            state.withLock { s in
                s.epoch &+= 1
                guard !s.slots.isEmpty else { return }
                for key in chunk {
                    if !legacyDependents.isEmpty { dropAbsentDependents(of: key, in: &s) }
                    s.typed.removeValue(forKey: key)
                    s.bytes -= s.slots.removeValue(forKey: key)?.bytes?.count ?? 0
                }
            }
            if chunk.count == StoreCache.invalidationChunk { betweenInvalidationChunks.withLock { $0 }?() }
        } while chunk.count == StoreCache.invalidationChunk
    }

    /// Runs between two chunks of `invalidate(_:)`, outside the lock (tests).
    let betweenInvalidationChunks = Mutex<(@Sendable () -> Void)?>(nil)

    func invalidateAll() {
        state.withLock { s in
            s.epoch &+= 1
            s.slots.removeAll()
            s.typed.removeAll()
            s.bytes = 0
        }
    }

    func countSkippedWrite() { state.withLock { $0.stats.skippedWrites += 1 } }

    var statistics: CacheStatistics { state.withLock { $0.stats } }
    func resetStatistics() { state.withLock { $0.stats = CacheStatistics() } }
}

/// Cache counters of one store.
public struct CacheStatistics: Sendable, Equatable, Codable {
    public var hits = 0
    public var misses = 0
    /// Writes of bytes identical to the stored ones: no disk write, no new version, no event.
    public var skippedWrites = 0

    public init() {}

    /// hits ÷ (hits + misses), 0 when nothing was read.
    public var hitRate: Double { hits + misses == 0 ? 0 : Double(hits) / Double(hits + misses) }
}
