import Logging

/// How a store is opened.
public struct StoreOptions: Sendable {
    /// The wall clock used for versions. Inject a `ManualClock` in tests.
    public var clock: any PhysicalClock = SystemClock()
    /// The master key for `encrypted` keys; required when the registry has any.
    public var encryption: EncryptionKeySource?
    /// Largest value a key may hold, serialized.
    public var maxValueSize = 64 * 1024 * 1024
    /// Values larger than this are not kept in the cache.
    public var maxCachedValueSize = 64 * 1024
    /// Where the store and its sessions log (message types and codes, never values). Silent by default.
    public var logger = Logger(label: "SyncEngine.store", factory: { _ in SwiftLogNoOpLogHandler() })
    /// The node id given to a new store file (random when nil). Existing files keep theirs.
    /// The simulator sets it so that runs are reproducible.
    public var nodeID: UInt32?

    public init(clock: any PhysicalClock = SystemClock(), encryption: EncryptionKeySource? = nil) {
        self.clock = clock
        self.encryption = encryption
    }
}
