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
    /// Keep every value in its own file in this directory, with the metadata in
    /// SQLite (what `FileValueStore` sets). A store created with a value
    /// directory must always be opened with the same one.
    public var valueDirectory: String?
    /// How often to look for commits of other processes sharing the file
    /// (an app and its extension); nil only checks before each write and on
    /// `checkForExternalChanges()`.
    public var externalChangePollInterval: Duration? = .milliseconds(100)

    public init(clock: any PhysicalClock = SystemClock(), encryption: EncryptionKeySource? = nil) {
        self.clock = clock
        self.encryption = encryption
    }
}
