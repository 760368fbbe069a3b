import Foundation

/// A store for large blobs: each value is its own file in `directory/values`
/// (written atomically; a new version never overwrites the committed one),
/// and the metadata (versions, pending changes) lives in
/// `directory/metadata.sqlite`, so values replicate like any other, large ones
/// through the chunked path. Give `syncStore` to a `SyncPeer` to replicate it.
///
/// ```swift
/// let photos = try FileValueStore(directory: "Photos", role: .phone, registry: registry)
/// try await photos.set(jpegData, for: watchFace)
/// let peer = SyncPeer(store: photos.syncStore, configuration: configuration)
/// ```
public final class FileValueStore: KeyValueBackend {
    /// The SQLite store holding the metadata and pointing at the files.
    public let syncStore: SyncStore
    public let directory: String

    /// Opens (creating if needed) the store in `directory`.
    public init(directory: String, role: DeviceRole, registry: KeyRegistry, options: StoreOptions = StoreOptions()) throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw SyncError(.invalidConfiguration, "cannot create the store directory \(directory): \(error.localizedDescription)")
        }
        var options = options
        options.valueDirectory = directory + "/values"
        self.directory = directory
        syncStore = try SyncStore(path: directory + "/metadata.sqlite", role: role, registry: registry, options: options)
    }

    public var registry: KeyRegistry { syncStore.registry }
    public var role: DeviceRole { syncStore.role }

    public func entry(forKey key: String, declaredAs declared: KeyDescriptor?) throws -> BackendEntry? {
        try syncStore.entry(forKey: key, declaredAs: declared)
    }

    public func storedValue<Value>(for key: Key<Value>) throws -> Value? {
        try syncStore.storedValue(for: key)
    }

    public func rememberDecoded(_ value: any Sendable, forKey key: String, version: HLCTimestamp) {
        syncStore.rememberDecoded(value, forKey: key, version: version)
    }

    @discardableResult
    public func commit(_ writes: [BackendWrite]) throws -> [StoreChange] { try syncStore.commit(writes) }
    public func allEntryInfo() throws -> [EntryInfo] { try syncStore.allEntryInfo() }
    public func changes(matching filter: ChangeFilter) -> AsyncStream<StoreChange> { syncStore.changes(matching: filter) }
    public func observeChanges(matching filter: ChangeFilter, _ handler: @escaping @Sendable (StoreChange) -> Void) -> ChangeObservation {
        syncStore.observeChanges(matching: filter, handler)
    }
    public var cacheStatistics: CacheStatistics { syncStore.cacheStatistics }
    public func resetCacheStatistics() { syncStore.resetCacheStatistics() }
    public func close() { syncStore.close() }
    /// On the metadata store's serial queue, off the cooperative pool (value files are written there too).
    public func performBlocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await syncStore.performBlocking(work)
    }
    public func cachedValue<Value>(for key: Key<Value>) -> Value? { syncStore.cachedValue(for: key) }
}
