import CCrashVFS
import CSQLite

/// A SQLite VFS that simulates power loss, for crash tests and the simulator
/// (after SQLite's own crash tests). It runs over the real "unix" VFS and
/// keeps every write no `xSync` has covered yet in memory, per file (the
/// database, its `-wal`, a `-journal`), so the files on disk always hold
/// exactly what was synced; the `-shm` wal-index is memory and passes through
/// (the first connection after a cut rebuilds it, as after a reboot).
///
/// ```swift
/// let vfs = try CrashVFS.register(name: "crash")
/// var options = StoreOptions()
/// options.vfsName = vfs.name
/// options.externalChangePollInterval = nil
/// var store: SyncStore? = try SyncStore(path: path, role: .watch, registry: registry, options: options)
/// vfs.armPowerCut(afterOperations: 40)   // or vfs.powerCut() between two calls
/// …                                      // the 40th write/truncate/sync fails; SQLite sees an I/O error
/// store = nil                            // drop every store opened before the cut
/// vfs.powerOn()
/// store = try SyncStore(path: path, …)   // what was synced, and nothing else
/// ```
///
/// A cut kills every file open at that moment: their reads, writes, syncs
/// and deletes fail from then on, so a store from before the cut changes
/// nothing more; close it (release it) before `powerOn()`. Opening fails
/// while the power is off. Not modelled: directory entries (creating and
/// deleting files is durable at once) and torn writes within one write call.
@_spi(Testing) public struct CrashVFS: Sendable, Hashable {
    /// The name to open files with (`StoreOptions.vfsName`, `sqlite3_open_v2`).
    public let name: String

    /// Registers (once per name and process) a crash VFS called `name`; it
    /// never becomes SQLite's default.
    public static func register(name: String = "syncengine-crash") throws -> CrashVFS {
        let rc = crashvfs_register(name)
        guard rc == SQLITE_OK else {
            throw SyncError(.database, "cannot register the crash VFS \(name) (SQLite code \(rc))")
        }
        return CrashVFS(name: name)
    }

    /// Which unsynced writes a power cut lets reach the disk.
    public enum Survivors: Sendable, Hashable {
        /// None: the disk holds exactly what was synced.
        case none
        /// Each unsynced write (a whole write call) survives with probability
        /// `percent`/100, drawn from `seed`, as a disk may have written some.
        case random(seed: UInt64, percent: Int)

        var arguments: (seed: UInt64, percent: Int32) {
            switch self {
            case .none: (0, 0)
            case .random(let seed, let percent): (seed, Int32(clamping: max(0, min(100, percent))))
            }
        }
    }

    /// The power fails now. Returns how many unsynced writes were dropped.
    @discardableResult
    public func powerCut(keeping survivors: Survivors = .none) -> Int {
        let (seed, percent) = survivors.arguments
        return Int(crashvfs_power_cut(name, seed, percent))
    }

    /// The power is back: files can be opened again (those from before the cut stay dead).
    public func powerOn() {
        _ = crashvfs_power_on(name)
    }

    /// Cuts the power inside the `operations`-th write, truncate or sync from
    /// now (1 is the next one): that operation fails with an I/O error and has no effect.
    public func armPowerCut(afterOperations operations: Int, keeping survivors: Survivors = .none) {
        let (seed, percent) = survivors.arguments
        _ = crashvfs_arm(name, Int64(max(1, operations)), seed, percent)
    }

    /// Cancels an armed cut.
    public func disarm() {
        _ = crashvfs_arm(name, 0, 0, 0)
    }

    /// Whether the disk is full: while it is, a write that would make a file
    /// longer fails (`SQLITE_FULL`, as a full file system gives), unless
    /// truncates and deletes made since gave back as many bytes; writes within a file pass.
    public func setDiskFull(_ full: Bool) {
        _ = crashvfs_set_full(name, full ? 1 : 0)
    }

    /// Writes every unsynced write to disk without syncing: the process dies,
    /// the machine does not (the kernel keeps what it was given). Returns how many.
    @discardableResult
    public func writeBack() -> Int {
        Int(crashvfs_write_back(name))
    }

    /// Counters since registration.
    public struct Statistics: Sendable, Equatable {
        public var writes: Int
        public var syncs: Int
        /// Writes, truncates and syncs: what `armPowerCut(afterOperations:)` counts.
        public var operations: Int
        public var unsyncedBytes: Int
        public var cuts: Int
        public var droppedWrites: Int
        public var keptWrites: Int
        /// Writes refused while the disk was full (`setDiskFull`).
        public var fullWrites: Int
        /// The most bytes one truncate took off the end of a file.
        public var largestTruncation: Int
        public var isPowered: Bool
        public var isArmed: Bool
    }

    public var statistics: Statistics {
        var raw = crashvfs_stats()
        _ = crashvfs_get_stats(name, &raw)
        return Statistics(writes: Int(raw.writes), syncs: Int(raw.syncs), operations: Int(raw.operations),
                          unsyncedBytes: Int(raw.unsynced_bytes), cuts: Int(raw.cuts), droppedWrites: Int(raw.dropped_writes),
                          keptWrites: Int(raw.kept_writes), fullWrites: Int(raw.full_writes),
                          largestTruncation: Int(raw.largest_truncation), isPowered: raw.powered != 0, isArmed: raw.armed != 0)
    }
}
