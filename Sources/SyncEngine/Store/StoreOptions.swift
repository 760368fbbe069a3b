import Logging

/// How a store is opened.
public struct StoreOptions: Sendable {
    /// The wall clock used for versions. Inject a `ManualClock` in tests.
    public var clock: any PhysicalClock = SystemClock()
    /// The master key for `encrypted` keys; required when the registry has any.
    public var encryption: EncryptionKeySource?
    /// Largest value a key may hold, serialized.
    ///
    /// Each device's own: it is not exchanged with the peer. A value from the
    /// peer over it is refused once (`value-too-large` in the acknowledgement,
    /// an `.error` event on both sides; a chunked value's sender is not told)
    /// and not sent again; values the store already holds stay when it shrinks.
    public var maxValueSize = 64 * 1024 * 1024
    /// Values larger than this are not kept in the cache.
    public var maxCachedValueSize = 64 * 1024
    /// Where the store and its sessions log (message types and codes, never values). Silent by default.
    public var logger = SyncStore.disabledLogger
    /// The node id given to a new store file, and the one a store takes when
    /// it renews its id (found restored or copied at open with
    /// `renewsNodeIDWhenRestored`, refused by its phone with
    /// `node-id-conflict`, or `renewNodeID()`), unless it is the id being
    /// replaced or a peer's (random then, and when nil). Other existing files
    /// keep theirs. The simulator sets it so that runs are reproducible.
    public var nodeID: UInt32?
    /// Keep every value in its own file in this directory, with the metadata in
    /// SQLite (what `FileValueStore` sets). A store created with a value
    /// directory must always be opened with the same one.
    public var valueDirectory: String?
    /// How often to look for commits of other processes sharing the file (an
    /// app and its extension) after a look that found some; each look that
    /// finds none doubles the wait, up to a second (or this interval, if
    /// longer); at least 1 ms, at most 100 years. nil only checks before each write and on `checkForExternalChanges()`.
    public var externalChangePollInterval: Duration? = .milliseconds(100)
    /// How durable a local write is when it returns. Whatever this says, a
    /// batch received from the peer is on stable storage before it is
    /// acknowledged (the peer then forgets it), and so is everything
    /// committed before it.
    public var durability: Durability = .normal
    /// At open, run SQLite's `PRAGMA quick_check` (it reads every page) when
    /// the database file and its WAL together are at most this many bytes;
    /// a damaged file then throws `.databaseCorrupt` before anything is
    /// written. nil never checks at open. Damage found later, by any
    /// statement, is reported the same way, and the store stops writing.
    public var quickCheckMaxBytes: Int? = 32 << 20
    /// Read-only connections that serve reads missing the cache (`get`,
    /// `value(for:)`, `entryInfo`, …) beside the one writer, so that a read
    /// never waits behind a write transaction, such as a batch from the peer
    /// being applied and committed. Opened on first use. 0 reads on the
    /// writer's connection. 0 to 64: each is a SQLite connection of its own
    /// (a larger setting, such as `.max` for "no limit", is taken as 64).
    public var readerConnections = 2 {
        didSet { readerConnections = min(max(0, readerConnections), StoreOptions.maxReaderConnections) }
    }
    /// The most `readerConnections`.
    static let maxReaderConnections = 64
    /// The SQLite VFS to open the file with (a registered name, e.g. a
    /// `CrashVFS`); nil is SQLite's default. For tests and the simulator.
    @_spi(Testing) public var vfsName: String?
    /// false acknowledges received batches without syncing them first (the
    /// behaviour before acknowledgements were durable), for the crash tests
    /// that must see the loss, and for benchmarks measuring the sync's cost.
    @_spi(Testing) public var syncsBeforeAcknowledging = true
    /// The free bytes of the file system that holds a path (nil: unknown);
    /// the background checkpointer asks it. Tests give a nearly full disk.
    @_spi(Testing) public var freeSpace: @Sendable (_ path: String) -> Int64? = BackgroundCheckpointer.freeBytes(at:)
    /// How long the store goes without a commit before a WAL file that grew
    /// past its steady state is cut back in the background. Tests shorten or
    /// lengthen it.
    @_spi(Testing) public var walTrimIdleDelay: Duration = .seconds(1)
    /// Told each wait the timer that looks for other processes' commits
    /// (`externalChangePollInterval`) is about to sleep, the first one
    /// included, just before it sleeps. `SyncStore.timedWaits` cannot show the
    /// first: it begins while the store is being opened, before anyone can
    /// subscribe. For tests; nil by default.
    var externalLookWillWait: (@Sendable (Duration) -> Void)?

    /// Remote versions whose time is more than this ahead of this device's
    /// wall clock are refused (entry by entry, with a `versionRefused` event
    /// and counter), so a buggy or hostile peer cannot drag the clock into the
    /// future and win every later conflict. Well above the ±10 min skew the
    /// engine tolerates. Rows already stored beyond it do not raise the clock.
    /// At most ten years count: a larger value is taken as ten years.
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

    /// A tombstone (what a delete leaves) is purged once it does not wait
    /// for `sync()`, its version is older than this, and every known peer had
    /// acknowledged it this long before (a delete from a peer: arrived this
    /// long before). nil never purges.
    /// A peer that comes back after its tombstones were purged is
    /// re-baselined (see the README, "Tombstones and peers that stay away").
    public var tombstoneRetention: Duration? = .seconds(30 * 24 * 3600)
    /// A watch the phone has not seen (no session, no acknowledgement) for
    /// longer than this is forgotten: it no longer holds tombstones back, and
    /// when it returns it starts again from a full baseline. A watch with a
    /// session running is being seen: never forgotten. nil never forgets. A
    /// watch never forgets its phone.
    public var peerHorizon: Duration? = .seconds(90 * 24 * 3600)
    /// The most peers this store keeps a cursor for (`sync_peers`). A
    /// session, or a queued message, from one node more is refused with
    /// `.tooManyPeers`: a paired peer that names a new node id in each hello
    /// cannot grow the store, or the tombstones it holds back, without bound.
    /// A watch forgotten past `peerHorizon` frees its place, and a phone's
    /// `SyncStore.forgetPeer(_:)` frees one at once.
    public var maxKnownPeers = 32
    /// Keep a marker beside the store file (`<path>.device`, excluded from
    /// backups on Apple platforms) that names it; a store opened without its
    /// marker was restored from a backup or copied from another device, and
    /// takes a new node id (`SyncStore.renewNodeID()`) before any session,
    /// so that its peers meet it as the new device it is. A store that had
    /// no marker yet (this option newly on) gets one without a new node id.
    /// A new marker is written in steps that a crash or power cut cannot
    /// leave disagreeing with the store (an fsync or two, only on that open).
    public var renewsNodeIDWhenRestored = false

    public init(clock: any PhysicalClock = SystemClock(), encryption: EncryptionKeySource? = nil) {
        self.clock = clock
        self.encryption = encryption
    }

    /// How far a committed local write survives (SQLite WAL `synchronous`).
    public enum Durability: Sendable, Equatable, Codable {
        /// `synchronous=NORMAL`, the default: a commit survives the app
        /// crashing or being killed as soon as the write returns. A power
        /// loss or OS crash may roll back the latest commits (whole
        /// transactions; the file stays consistent) until the WAL is synced:
        /// at the next checkpoint, or when this store next acknowledges a
        /// batch from the peer. A local write the peer already has may so be
        /// lost here while the peer keeps it. No fsync per commit.
        case normal
        /// `synchronous=FULL`: every commit is on stable storage when the
        /// write returns and survives power loss too. One fsync per commit
        /// (milliseconds on most disks, against tens of microseconds for a
        /// commit without one).
        case full
    }
}
