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

    /// Remote versions whose time is more than this ahead of this device's
    /// wall clock are refused (entry by entry, with a `versionRefused` event
    /// and counter), so a buggy or hostile peer cannot drag the clock into the
    /// future and win every later conflict. Well above the ±10 min skew the
    /// engine tolerates. Rows already stored beyond it do not raise the clock.
    public var maxRemoteClockAhead: Duration = .seconds(3600)

    /// Bytes of partly received large values kept for resuming (all transfers
    /// from the peer together). Past it, other transfers' chunks are dropped
    /// and sent again; never less than one value of `maxValueSize`.
    public var maxStagedChunkBytes = 128 * 1024 * 1024

    /// The conflict log (`SyncStore.conflictLog()`, table `sync_conflicts`)
    /// keeps at most this many resolutions, the newest.
    public var conflictLogLimit = 1_000
    /// Resolutions older than this leave the conflict log; nil keeps them
    /// until `conflictLogLimit` pushes them out.
    public var conflictLogMaxAge: Duration? = .seconds(30 * 24 * 3600)

    public init(clock: any PhysicalClock = SystemClock(), encryption: EncryptionKeySource? = nil) {
        self.clock = clock
        self.encryption = encryption
    }
}
