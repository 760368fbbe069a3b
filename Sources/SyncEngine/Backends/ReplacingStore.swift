import Foundation
import Synchronization

extension KeyValueBackend {
    /// This store, taking over keys from `old` (another backend or file, e.g.
    /// a plain store being replaced by an encrypted one): the first read of a
    /// key that this store has never held copies the old value here, commits
    /// it, and only then removes it from `old`. A crash in between leaves the
    /// value in both; the next read finishes the removal. Nothing is lost.
    /// Given this store itself, or another store on the same file, there is
    /// nothing to move: it reads and writes that store and removes nothing.
    ///
    /// ```swift
    /// let store = try SyncStore(path: "secure.sqlite", role: .phone, registry: registry, options: encrypted)
    ///     .replacing(try SyncStore(path: "plain.sqlite", role: .phone, registry: oldRegistry))
    /// ```
    public func replacing(_ old: any KeyValueBackend) -> ReplacingStore {
        ReplacingStore(store: self, replacing: old)
    }
}

/// A backend that moves keys from a replaced backend on first read; made by `replacing(_:)`.
/// Writes, observation and statistics are the new store's.
public final class ReplacingStore: KeyValueBackend {
    /// Where values live from now on.
    public let store: any KeyValueBackend
    /// Where they come from.
    public let old: any KeyValueBackend
    /// Keys whose old copy is known to be gone (or not ours to remove) in this process.
    private let settled = Mutex<Set<String>>([])
    /// `old` is `store`, or a store on the same file: a "move" would remove what it just read.
    private let sharesStorage: Bool

    init(store: any KeyValueBackend, replacing old: any KeyValueBackend) {
        self.store = store
        self.old = old
        sharesStorage = Self.sameStorage(store, old)
    }

    /// Whether two backends keep their entries in one place: the same object,
    /// or stores whose SQLite files are one file (by device and inode).
    static func sameStorage(_ a: any KeyValueBackend, _ b: any KeyValueBackend) -> Bool {
        if a === b { return true }
        guard let first = databaseFile(of: a), let second = databaseFile(of: b) else { return false }
        var one = stat(), other = stat()
        guard stat(first, &one) == 0, stat(second, &other) == 0 else { return first == second }
        return one.st_dev == other.st_dev && one.st_ino == other.st_ino
    }

    /// The SQLite file a backend keeps its entries in, when it has one.
    private static func databaseFile(of backend: any KeyValueBackend) -> String? {
        switch backend {
        case let store as SyncStore: store.path
        case let store as FileValueStore: store.syncStore.path
        case let store as ReplacingStore: databaseFile(of: store.store)
        default: nil
        }
    }

    public var registry: KeyRegistry { store.registry }
    public var role: DeviceRole { store.role }

    public func entry(forKey key: String, declaredAs declared: KeyDescriptor?) throws -> BackendEntry? {
        let current = try store.entry(forKey: key, declaredAs: declared)
        if sharesStorage || settled.withLock({ $0.contains(key) }) { return current }
        guard let oldDescriptor = old.registry.descriptor(forEntry: key), oldDescriptor.availability.canWrite(on: old.role),
              let previous = try old.entry(forKey: key, declaredAs: nil), let bytes = previous.bytes else {
            settled.withLock { _ = $0.insert(key) }
            return current
        }
        if current == nil {
            let descriptor = try registry.governingDescriptor(for: key, declared: declared)
            guard previous.encoding == descriptor.encoding else {
                throw SyncError(.typeMismatch, "key '\(key)' in the replaced store was written with the \(previous.encoding) serializer, but this store declares \(descriptor.encoding); migrate it by hand")
            }
            // 1. the new copy commits …
            try store.commit([BackendWrite(key: key, bytes: bytes)])
        }
        // 2. … and only then does the old one go (also finishing a move a crash interrupted).
        try old.commit([BackendWrite(key: key, bytes: nil)])
        settled.withLock { _ = $0.insert(key) }
        return try store.entry(forKey: key, declaredAs: declared)
    }

    /// On the new store's `performBlocking`, off the cooperative pool.
    public func performBlocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await store.performBlocking(work)
    }

    public func rememberDecoded(_ value: any Sendable, forKey key: String, version: HLCTimestamp) {
        store.rememberDecoded(value, forKey: key, version: version)
    }

    @discardableResult
    public func commit(_ writes: [BackendWrite]) throws -> [StoreChange] {
        let changes = try store.commit(writes)
        guard !sharesStorage else { return changes }
        // A key written here never needs its old value again: drop it after the commit.
        for write in writes where !settled.withLock({ $0.contains(write.key) }) {
            if let oldDescriptor = old.registry.descriptor(forEntry: write.key), oldDescriptor.availability.canWrite(on: old.role),
               try old.entry(forKey: write.key, declaredAs: nil)?.bytes != nil {
                try old.commit([BackendWrite(key: write.key, bytes: nil)])
            }
            settled.withLock { _ = $0.insert(write.key) }
        }
        return changes
    }

    /// The new store's entries, and the live values of the replaced store
    /// that a first read would move here (with the replaced store's
    /// metadata), ordered by key: `clear()` removes those too (else the next
    /// read brought them back) and `members(of:)` lists them.
    public func allEntryInfo() throws -> [EntryInfo] {
        let current = try store.allEntryInfo()
        guard !sharesStorage else { return current }
        let held = Set(current.map(\.key))
        let settledKeys = settled.withLock { $0 }
        let moving = try old.allEntryInfo().filter { info in
            guard !info.isDeleted, !held.contains(info.key), !settledKeys.contains(info.key),
                  registry.descriptor(forEntry: info.key) != nil,
                  let oldDescriptor = old.registry.descriptor(forEntry: info.key) else { return false }
            return oldDescriptor.availability.canWrite(on: old.role)
        }
        guard !moving.isEmpty else { return current }
        return (current + moving).sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
    }
    public func changes(matching filter: ChangeFilter) -> AsyncStream<StoreChange> { store.changes(matching: filter) }
    public func observeChanges(matching filter: ChangeFilter, _ handler: @escaping @Sendable (StoreChange) -> Void) -> ChangeObservation {
        store.observeChanges(matching: filter, handler)
    }
    public var cacheStatistics: CacheStatistics { store.cacheStatistics }
    public func resetCacheStatistics() { store.resetCacheStatistics() }
    public func close() { store.close() }
}
