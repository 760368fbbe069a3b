import Dispatch

/// One stored entry as a backend hands it to the typed API.
public struct BackendEntry: Sendable {
    /// Serialized bytes; nil when the key was removed (a tombstone that keeps its version).
    public var bytes: [UInt8]?
    /// The serializer identifier the bytes were written with.
    public var encoding: String
    public var version: HLCTimestamp
    /// A decoded value the backend kept beside these bytes, if any.
    public var decoded: (any Sendable)?

    public init(bytes: [UInt8]?, encoding: String, version: HLCTimestamp, decoded: (any Sendable)? = nil) {
        self.bytes = bytes
        self.encoding = encoding
        self.version = version
        self.decoded = decoded
    }
}

/// `Optional`, to tell a nested one (`BackendWrite.decodedToKeep`).
@usableFromInline
protocol OptionalWrapping {
    static var wrapsOptional: Bool { get }
}

extension Optional: OptionalWrapping {
    @usableFromInline
    static var wrapsOptional: Bool { Wrapped.self is any OptionalWrapping.Type }
}

/// One write handed to `KeyValueBackend.commit`.
public struct BackendWrite: Sendable {
    /// The full key name (a registered key or a family member), kept in
    /// Unicode NFC as every key name is.
    public var key: String {
        didSet { key = KeyName.canonical(key) }
    }
    /// Serialized bytes; nil removes the key.
    public var bytes: [UInt8]?
    /// The decoded value, kept in the cache beside the bytes.
    public var decoded: (any Sendable)?
    /// The registered declaration, when the caller already looked it up.
    var descriptor: KeyDescriptor?

    public init(key: String, bytes: [UInt8]?, decoded: (any Sendable)? = nil) {
        self.key = KeyName.canonical(key)
        self.bytes = bytes
        self.decoded = decoded
    }

    /// What a typed write keeps decoded beside its bytes: `value`, unless
    /// its type is a nested optional (`Int??`), whose `.some(nil)` is written
    /// as the one JSON `null` that reads back as `nil`; kept, reads gave
    /// `.some(nil)` until the cache let it go (a restart) and `nil` after.
    @inlinable
    static func decodedToKeep<Value: Sendable>(_ value: Value) -> (any Sendable)? {
        (Value.self as? any OptionalWrapping.Type)?.wrapsOptional == true ? nil : value
    }

    /// `key` is a typed key's name, already NFC.
    init(key: String, descriptor: KeyDescriptor, bytes: [UInt8]?, decoded: (any Sendable)?) {
        self.key = key
        self.bytes = bytes
        self.decoded = decoded
        self.descriptor = descriptor
    }
}

/// The small storage interface under the typed API (`get`, `set`, `remove`,
/// `batch`, `changes`, property wrappers). Three implementations ship:
/// `SyncStore` (SQLite, replicating; the default), `InMemoryStore` (previews
/// and tests) and `FileValueStore` (a file per value, metadata in SQLite,
/// replicating). Every one passes the same test suite.
///
/// ```swift
/// func show(_ store: any KeyValueBackend) throws -> Int { try store.value(for: steps) }
/// ```
public protocol KeyValueBackend: AnyObject, Sendable {
    /// The keys this backend accepts.
    var registry: KeyRegistry { get }
    /// The device this backend belongs to; availability is checked against it.
    var role: DeviceRole { get }

    /// The entry under `key` (nil when it was never written), read through the
    /// cache, counting a hit or a miss. On a miss `declared` (the caller's own
    /// declaration, nil for untyped access) is checked against the registry.
    func entry(forKey key: String, declaredAs declared: KeyDescriptor?) throws -> BackendEntry?

    /// The stored value of `key`, or nil when it has none. A default
    /// implementation reads through `entry(forKey:declaredAs:)`; a backend may
    /// answer from its cache more directly, with the same results.
    func storedValue<Value>(for key: Key<Value>) throws -> Value?

    /// Keeps `value`, decoded from the cached bytes of `version`, for later reads.
    func rememberDecoded(_ value: any Sendable, forKey key: String, version: HLCTimestamp)

    /// Commits `writes` in one transaction: all or none. Checks each key
    /// against the registry, its availability on this device and the size
    /// limit first. Writes of the bytes already stored are skipped.
    /// Returns the changes made, in order.
    @discardableResult
    func commit(_ writes: [BackendWrite]) throws -> [StoreChange]

    /// Commits the writes `body` collects in one transaction (`batch`). The
    /// default collects them all, then calls `commit`; a `SyncStore` saves a
    /// large batch while `body` still runs.
    func batchNow(_ body: (inout WriteBatch) throws -> Void) throws

    /// Metadata of every entry (live and removed), ordered by key; no values.
    func allEntryInfo() throws -> [EntryInfo]

    /// Changes matching `filter`, after they commit. Keeps the newest 10,000
    /// its consumer has not read; the first read after a drop tells how many
    /// were dropped before it (`StoreChange.missedBefore`).
    func changes(matching filter: ChangeFilter) -> AsyncStream<StoreChange>

    /// Calls `handler` with each change matching `filter`, synchronously on
    /// the committing thread once the transaction has committed (before the
    /// write call returns), until the observation is cancelled or released.
    /// The handler must be quick and must not write to the store.
    func observeChanges(matching filter: ChangeFilter, _ handler: @escaping @Sendable (StoreChange) -> Void) -> ChangeObservation

    var cacheStatistics: CacheStatistics { get }
    func resetCacheStatistics()

    /// Runs `work` (a commit, an `fsync`, a read from disk, a wait for the
    /// write lock) where it holds no thread of Swift concurrency's cooperative
    /// pool, suspending the caller until it returns its result or error. The
    /// `async` API calls it. The default runs `work` on a shared dispatch
    /// queue; a `SyncStore` on a serial queue of its own; `InMemoryStore`,
    /// which never blocks, in place.
    func performBlocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T

    /// The value of `key` when the cache holds it decoded (no I/O, no
    /// decoding), counting a hit; else nil, counting nothing. `get` answers
    /// from it on the caller's thread. The default is nil.
    func cachedValue<Value>(for key: Key<Value>) -> Value?

    /// Ends observation; further use throws `.closed`. What was committed stays.
    func close()
}

/// Where a backend's blocking work runs by default (`performBlocking`).
private let sharedBlockingQueue = DispatchQueue(label: "SyncEngine.blocking", attributes: .concurrent)

extension KeyValueBackend {
    /// Runs `work` on a shared concurrent dispatch queue, off the cooperative pool.
    public func performBlocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            sharedBlockingQueue.async { continuation.resume(with: Result { try work() }) }
        }
    }

    /// No value is known without reading: `get` reads through `performBlocking`.
    public func cachedValue<Value>(for key: Key<Value>) -> Value? { nil }

    /// For a backend of your own that has only `changes(matching:)`: the
    /// handler is called from a task reading that stream, so shortly after the
    /// commit rather than before the write returns (the built-in backends call
    /// it synchronously).
    public func observeChanges(matching filter: ChangeFilter, _ handler: @escaping @Sendable (StoreChange) -> Void) -> ChangeObservation {
        let changes = changes(matching: filter)
        let reader = Task {
            for await change in changes { handler(change) }
        }
        return ChangeObservation { reader.cancel() }
    }
}

extension KeyRegistry {
    /// The registered declaration for `name`, checked against `declared` (the
    /// caller's own, whose name may be a family member's).
    func governingDescriptor(for name: String, declared: KeyDescriptor?) throws -> KeyDescriptor {
        guard !KeyName.containsNUL(name) else {
            throw SyncError(.invalidKey, "key name \(KeyName.excerpt(name)) contains the NUL character (U+0000), which no key name may hold")
        }
        guard let registered = descriptor(forEntry: name) else {
            // A name of any length may be asked for: the message quotes a bounded part of it.
            let shown = name.utf8.count <= KeyName.maxBytes ? "'\(name)'" : "\(KeyName.excerpt(name))… (\(name.utf8.count) bytes)"
            throw SyncError(.unknownKey, "key \(shown) is not in this store's registry; add it to the keys given to KeyRegistry")
        }
        if var declared {
            declared.name = registered.name
            // An untyped registry (a keys file without "type") accepts any typed access.
            if registered.valueType == nil { declared.valueType = nil }
            guard declared == registered else {
                throw SyncError(.keyDeclarationMismatch, "key '\(name)' is used with a declaration that differs from the registered one (\(registered)); use the registered key")
            }
        }
        return registered
    }

    /// Checks a write of `bytes` (nil = removal) under `name` from `role`; returns its declaration.
    func checkedWrite(_ name: String, bytes: [UInt8]?, role: DeviceRole, maxValueSize: Int, known: KeyDescriptor?) throws -> KeyDescriptor {
        let descriptor = try known ?? governingDescriptor(for: name, declared: nil)
        let nameBytes = name.utf8.count
        if nameBytes > KeyName.maxBytes, descriptor.replicates(from: .phone) || descriptor.replicates(from: .watch) {
            throw SyncError(.invalidKey, "key name \(KeyName.excerpt(name))… has \(nameBytes) bytes, more than the \(KeyName.maxBytes) a replicated key's name may have (what a peer accepts)")
        }
        guard descriptor.availability.canWrite(on: role) else {
            throw SyncError(.writeNotAllowed, "key '\(name)' is \(descriptor.availability.rawValue) and cannot be written on the \(role); write it on the \(role.counterpart)")
        }
        if let bytes, bytes.count > maxValueSize {
            throw SyncError(.valueTooLarge, "a value of \(bytes.count) bytes for key '\(name)' exceeds the store's limit of \(maxValueSize) bytes")
        }
        return descriptor
    }
}

/// Writes collected for one transaction with `batch`. Collect them through
/// the batch passed to the body only: a copy of it commits nothing.
public struct WriteBatch: Sendable {
    let registry: KeyRegistry
    /// The writes collected and not yet handed to `pipeline`.
    private var writes: [BackendWrite] = []
    /// Where a large batch's full chunks go while its body still runs (a store's helper thread).
    private var pipeline: BulkWritePipeline?
    /// Shared by copies of the batch: a copy stops the hand-off (only the batch passed to the body commits).
    private var identity = Identity()
    /// How many writes went to `pipeline`.
    private var handedOff = 0

    init(registry: KeyRegistry, pipeline: BulkWritePipeline? = nil) {
        self.registry = registry
        self.pipeline = pipeline
    }

    /// Adds a write of `value` under `key`. Inlined into the caller, so that
    /// encoding runs specialized for `Value` (no generic metadata look-ups).
    @inlinable
    public mutating func set<Value>(_ value: Value, for key: Key<Value>) throws {
        let descriptor = try governingDescriptor(for: key.name, declared: key.descriptor)
        append(key.name, descriptor: descriptor, bytes: try key.serializer.encode(value), decoded: BackendWrite.decodedToKeep(value))
    }

    /// The registered declaration of `name`, checked against `declared`.
    @usableFromInline
    func governingDescriptor(for name: String, declared: KeyDescriptor) throws -> KeyDescriptor {
        try registry.governingDescriptor(for: name, declared: declared)
    }

    @usableFromInline
    mutating func append(_ name: String, descriptor: KeyDescriptor, bytes: [UInt8]?, decoded: (any Sendable)?) {
        writes.append(BackendWrite(key: name, descriptor: descriptor, bytes: bytes, decoded: decoded))
        if writes.count >= BulkWritePipeline.chunkSize, pipeline != nil { handOff() }
    }

    /// Adds a write collected before (an `async` batch's, committed off the pool).
    mutating func append(_ write: BackendWrite) {
        writes.append(write)
        if writes.count >= BulkWritePipeline.chunkSize, pipeline != nil { handOff() }
    }

    /// Adds a removal of `key` (a tombstone that replicates).
    public mutating func remove<Value>(_ key: Key<Value>) throws {
        let descriptor = try registry.governingDescriptor(for: key.name, declared: key.descriptor)
        append(key.name, descriptor: descriptor, bytes: nil, decoded: nil)
    }

    /// How many writes the batch holds.
    var count: Int { handedOff + writes.count }

    /// The writes not handed off, leaving none.
    mutating func takeWrites() -> [BackendWrite] {
        defer { writes = [] }
        return writes
    }

    private mutating func handOff() {
        guard let pipeline else { return }
        guard isKnownUniquelyReferenced(&identity) else {
            // A copy of the batch exists: which one is the body's cannot be told, so nothing
            // more goes early, and the batch commits as a whole when the body returns.
            pipeline.stop()
            self.pipeline = nil
            return
        }
        handedOff += writes.count
        let chunk = writes
        writes = []
        writes.reserveCapacity(BulkWritePipeline.chunkSize)
        pipeline.handOff(chunk)
    }

    private final class Identity: Sendable {}
}

// MARK: the typed API, written once for every backend

extension KeyValueBackend {
    /// The value of `key`, or its default when nothing is stored. Answered
    /// on the caller's thread when the cache holds the value decoded; else
    /// read off Swift concurrency's cooperative pool (`performBlocking`).
    public func get<Value>(_ key: Key<Value>) async throws -> Value {
        if let cached = cachedValue(for: key) { return cached }
        return try await performBlocking { try self.value(for: key) }
    }

    /// Synchronous read: from the cache when possible; the default when nothing is stored.
    public func value<Value>(for key: Key<Value>) throws -> Value {
        try storedValue(for: key) ?? key.defaultValue
    }

    /// The stored value, or nil when the key has none. For `Key<T?>` a stored
    /// `nil` comes back as `.some(nil)`, distinct from absent.
    public func storedValue<Value>(for key: Key<Value>) throws -> Value? {
        guard let entry = try entry(forKey: key.name, declaredAs: key.descriptor), let bytes = entry.bytes else { return nil }
        // Not `entry.decoded as? Value`: an absent decoded value (nil) casts to any `Optional` type.
        if let decoded = entry.decoded, let value = decoded as? Value { return value }
        return try decode(bytes, encoding: entry.encoding, version: entry.version, for: key)
    }

    /// Decodes stored bytes for `key` (checking the serializer) and keeps the result.
    func decode<Value>(_ bytes: [UInt8], encoding: String, version: HLCTimestamp, for key: Key<Value>) throws -> Value {
        let value = try decodeChecked(bytes, encoding: encoding, for: key)
        rememberDecoded(value, forKey: key.name, version: version)
        return value
    }

    /// Decodes stored bytes for `key`, checking that its serializer wrote them.
    func decodeChecked<Value>(_ bytes: [UInt8], encoding: String, for key: Key<Value>) throws -> Value {
        // A read the cache answers skips the registry check of a miss: a key declared otherwise
        // (`Key<Double>` for a registered `Key<Int>`) would decode the bytes as its own type
        // while the value is cached, and throw once it is not. Checked here, before any decode.
        _ = try registry.governingDescriptor(for: key.name, declared: key.descriptor)
        guard encoding == key.serializer.identifier else {
            throw SyncError(.typeMismatch, "key '\(key.name)' holds a value written with the \(encoding) serializer, but is read as \(Value.self) with \(key.serializer.identifier)")
        }
        return try key.serializer.decode(bytes)
    }

    /// Whether `key` has a live value.
    public func contains<Value>(_ key: Key<Value>) throws -> Bool {
        try entry(forKey: key.name, declaredAs: key.descriptor)?.bytes != nil
    }

    /// Stores `value` under `key`. Writing the bytes already stored is skipped
    /// (no disk write, no new version, no event). Throws `.writeNotAllowed`
    /// when the key's availability forbids writes on this device. The value
    /// is encoded on the caller's thread and committed off Swift concurrency's
    /// cooperative pool (`performBlocking`); the call returns once the write
    /// committed (or failed). Cancelling the calling task does not stop it.
    public func set<Value>(_ value: Value, for key: Key<Value>) async throws {
        let descriptor = try registry.governingDescriptor(for: key.name, declared: key.descriptor)
        let write = BackendWrite(key: key.name, descriptor: descriptor, bytes: try key.serializer.encode(value), decoded: BackendWrite.decodedToKeep(value))
        _ = try await performBlocking { try self.commit([write]) }
    }

    /// Synchronous form of `set`, for property wrappers and benchmarks.
    public func setNow<Value>(_ value: Value, for key: Key<Value>) throws {
        let descriptor = try registry.governingDescriptor(for: key.name, declared: key.descriptor)
        try commit([BackendWrite(key: key.name, descriptor: descriptor, bytes: try key.serializer.encode(value), decoded: BackendWrite.decodedToKeep(value))])
    }

    /// Removes `key`'s value, leaving a tombstone that replicates the delete.
    /// Committed off the cooperative pool, as `set` is.
    public func remove<Value>(_ key: Key<Value>) async throws {
        let descriptor = try registry.governingDescriptor(for: key.name, declared: key.descriptor)
        let write = BackendWrite(key: key.name, descriptor: descriptor, bytes: nil, decoded: nil)
        _ = try await performBlocking { try self.commit([write]) }
    }

    /// Synchronous form of `remove`.
    public func removeNow<Value>(_ key: Key<Value>) throws {
        let descriptor = try registry.governingDescriptor(for: key.name, declared: key.descriptor)
        try commit([BackendWrite(key: key.name, descriptor: descriptor, bytes: nil, decoded: nil)])
    }

    /// Runs several writes in one transaction: all commit or none do. `body`
    /// runs on the caller's thread and only collects the writes (nothing is
    /// committed while it runs; when it throws, nothing is); they then commit
    /// off Swift concurrency's cooperative pool (`performBlocking`), as `set`
    /// does, through `batchNow` (a `SyncStore` saves a large batch in chunks).
    public func batch(_ body: (inout WriteBatch) throws -> Void) async throws {
        var batch = WriteBatch(registry: registry)
        try body(&batch)
        let writes = batch.takeWrites()
        try await performBlocking {
            try self.batchNow { batch in
                for write in writes { batch.append(write) }
            }
        }
    }

    /// Synchronous form of `batch`.
    public func batchNow(_ body: (inout WriteBatch) throws -> Void) throws {
        var batch = WriteBatch(registry: registry)
        try body(&batch)
        try commit(batch.takeWrites())
    }

    /// Removes every value this device may write, in one transaction.
    /// Read-only copies (`phoneWithWatchSync` on the watch) stay. A value
    /// still under a key's legacy name is moved first (as a read moves it),
    /// then removed: a later read does not bring it back. One that cannot move
    /// (written with another serializer) is removed with the key. Runs off
    /// Swift concurrency's cooperative pool (`performBlocking`).
    public func clear() async throws {
        try await performBlocking { try self.clearNow() }
    }

    /// Synchronous form of `clear`.
    func clearNow() throws {
        var unmoved: [BackendWrite] = []
        for descriptor in registry.descriptors where descriptor.legacyName != nil && !descriptor.isFamily
            && descriptor.availability.canWrite(on: role) {
            do {
                _ = try entry(forKey: descriptor.name, declaredAs: nil)
            } catch let error as SyncError where error.code == .typeMismatch {
                // The key's removal leaves a tombstone, which stops the move.
                unmoved.append(BackendWrite(key: descriptor.name, descriptor: descriptor, bytes: nil, decoded: nil))
            }
        }
        let writes = try allEntryInfo().compactMap { info -> BackendWrite? in
            guard !info.isDeleted, let descriptor = registry.descriptor(forEntry: info.key),
                  descriptor.availability.canWrite(on: role) else { return nil }
            return BackendWrite(key: info.key, descriptor: descriptor, bytes: nil, decoded: nil)
        }
        try commit(writes + unmoved)
    }

    /// The ids of `family`'s members that hold a value (removed ones left
    /// out), sorted: which days have a step count. Only entries the family
    /// governs: not a key or a nested family whose name starts with its own
    /// (`day:total`, `day:hours:<id>` are not members of `day`). Reads the
    /// entries' metadata, no values.
    public func members<Value>(of family: KeyFamily<Value>) throws -> [String] {
        // By UTF-8 bytes (names are NFC): a member id may start with a combining mark, which a
        // Character-wise prefix would join to the ':'.
        let prefix = Array((family.descriptor.name + ":").utf8)
        return try allEntryInfo().filter { info in
            guard !info.isDeleted, info.key.utf8.starts(with: prefix),
                  let governing = registry.descriptor(forEntry: info.key) else { return false }
            return governing.isFamily && governing.name == family.descriptor.name
        }.map { String(decoding: $0.key.utf8.dropFirst(prefix.count), as: UTF8.self) }.sorted()
    }

    /// Changes of one key, local and remote, after they commit.
    public func changes<Value>(for key: Key<Value>) -> AsyncStream<StoreChange> { changes(matching: .key(key.name)) }
    /// Changes of every key in a namespace.
    public func changes(in namespace: Namespace) -> AsyncStream<StoreChange> { changes(matching: .namespace(namespace.name)) }
    /// Every change.
    public func changes() -> AsyncStream<StoreChange> { changes(matching: .all) }

    // MARK: untyped access, for tools and registries loaded from files

    /// Stores already-serialized bytes under `name` (a registered key or a
    /// family member), with the same checks and effects as a typed `set`.
    public func setEncoded(_ bytes: [UInt8], forKey name: String) throws {
        try commit([BackendWrite(key: name, bytes: bytes)])
    }

    /// Removes the value stored under `name`, leaving a tombstone.
    public func removeValue(forKey name: String) throws {
        try commit([BackendWrite(key: name, bytes: nil)])
    }

    /// The serialized bytes stored under `name`, or nil when absent. Read through the cache.
    public func encodedValue(forKey name: String) throws -> [UInt8]? {
        try entry(forKey: name, declaredAs: nil)?.bytes
    }
}
