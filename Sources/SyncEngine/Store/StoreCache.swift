import Synchronization

/// Read-through, write-through cache of entries, with cached absence and
/// statistics. Holds plaintext bytes and the last decoded value.
final class StoreCache: Sendable {
    struct Slot {
        /// Plaintext bytes, nil when the key has no live value (absent or deleted).
        var bytes: [UInt8]?
        var encoding: String
        var version: HLCTimestamp
        var decoded: (any Sendable)?
        /// The decoded value again, in a box of its own type (`CachedValue`), so a typed read needs no existential cast.
        var typed: (any AnyObject & Sendable)? = nil
    }

    private struct State {
        var slots: [String: Slot] = [:]
        var bytes = 0
        var stats = CacheStatistics()
        /// Bumped by every change of a slot (a write or an invalidation): a
        /// slot read from a reader connection is kept only if nothing changed
        /// since before its read began (it could be older than the change).
        var epoch: UInt64 = 0
    }

    private let state = Mutex(State())
    /// Values larger than this are read from disk each time.
    let maxCachedValueSize: Int
    /// Total cached bytes before the cache starts again.
    let budget: Int
    let maxSlots = 100_000

    init(maxCachedValueSize: Int = 64 * 1024, budget: Int = 8 * 1024 * 1024) {
        self.maxCachedValueSize = maxCachedValueSize
        self.budget = budget
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

    /// The decoded value cached for `key` and its version, counting a hit;
    /// nil (counting nothing) when the key has no live value or no decoded one.
    func decodedHit(_ key: String) -> (value: any Sendable, version: HLCTimestamp)? {
        state.withLock { s in
            guard let index = s.slots.index(forKey: key) else { return nil }
            let slot = s.slots.values[index]
            guard slot.bytes != nil, let decoded = slot.decoded else { return nil }
            s.stats.hits += 1
            return (decoded, slot.version)
        }
    }

    /// The typed box cached for `key` (`Slot.typed`), counting a hit; nil (counting nothing) when there is none.
    func typedHit(_ key: String) -> (any AnyObject & Sendable)? {
        state.withLock { s in
            guard let index = s.slots.index(forKey: key), let typed = s.slots.values[index].typed else { return nil }
            s.stats.hits += 1
            return typed
        }
    }

    /// Keeps `box` beside the slot of `key` if it is still at `version`.
    func rememberTyped(_ key: String, version: HLCTimestamp, box: any AnyObject & Sendable) {
        state.withLock { s in
            guard let index = s.slots.index(forKey: key), s.slots.values[index].version == version else { return }
            s.slots.values[index].typed = box
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
        if let old = s.slots.removeValue(forKey: key) { s.bytes -= old.bytes?.count ?? 0 }
        guard (slot.bytes?.count ?? 0) <= maxCachedValueSize else { return }
        s.slots[key] = slot
        s.bytes += slot.bytes?.count ?? 0
        if s.bytes > budget || s.slots.count > maxSlots {
            // Over budget: start again (rare; amortized O(1) per write).
            s.slots.removeAll(keepingCapacity: true)
            s.slots[key] = slot
            s.bytes = slot.bytes?.count ?? 0
        }
    }

    func rememberDecoded(_ key: String, version: HLCTimestamp, value: any Sendable) {
        state.withLock { s in
            if s.slots[key]?.version == version { s.slots[key]?.decoded = value }
        }
    }

    func invalidate(_ key: String) {
        state.withLock { s in
            s.epoch &+= 1
            s.bytes -= s.slots.removeValue(forKey: key)?.bytes?.count ?? 0
        }
    }

    /// Drops `keys`, taking the lock once.
    func invalidate(_ keys: some Sequence<String>) {
        state.withLock { s in
            s.epoch &+= 1
            guard !s.slots.isEmpty else { return }
            for key in keys { s.bytes -= s.slots.removeValue(forKey: key)?.bytes?.count ?? 0 }
        }
    }

    func invalidateAll() {
        state.withLock { s in
            s.epoch &+= 1
            s.slots.removeAll()
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
