import CSQLite
import Foundation
import Dispatch
import Synchronization

/// Copies WAL pages into the database file on a queue of its own, with its
/// own connection, so the commit that crosses the threshold does not pay for
/// the copy and its fsync (SQLite's automatic checkpoint runs inside COMMIT).
///
/// A passive checkpoint never blocks the writer or readers. If the WAL still
/// grows past `inlineLimit` pages (checkpoints falling behind), the writer
/// checkpoints itself, as SQLite would, so the file stays bounded. On a
/// nearly full disk the writer checkpoints itself at `lowSpaceThreshold` pages.
final class BackgroundCheckpointer: Sendable {
    /// WAL pages after which a checkpoint is scheduled: four times SQLite's
    /// own default, fewer checkpoints (and fsyncs) beside the writes, a WAL
    /// of 16 MB at most in the steady state (`bench sync`: write→visible
    /// p99 a median 12× RTT over six runs, against 16× at 1,000).
    static let threshold: Int32 = 4_000
    /// WAL pages after which the committing writer checkpoints inline.
    static let inlineLimit: Int32 = 16_000
    /// The least time from the end of one background checkpoint to the start
    /// of the next. A checkpoint that caught the WAL's end leaves it to start
    /// over only when no commit landed meanwhile, so while commits came faster
    /// than a checkpoint's two fsyncs, each one scheduled another at once
    /// (20,000 single-row commits: 1,433 checkpoints, 2,500 fsyncs). The
    /// commits of an interval are copied, and synced, at most this long after.
    static let minimumInterval: Duration = .milliseconds(10)
    /// WAL pages after which the writer checkpoints inline when the disk is
    /// nearly full (`lowSpaceBytes`), so that the WAL starts over at about
    /// 1 MB: one of 16 MB (or more, while commits keep coming) would fill a
    /// device with less room than that before its data did.
    static let lowSpaceThreshold: Int32 = 256
    /// Free bytes under which the disk counts as nearly full.
    static let lowSpaceBytes: Int64 = 64 << 20

    let path: String
    /// The VFS the store's connection uses (nil: SQLite's default); the checkpoint must use the same.
    let vfs: String?
    /// No checkpoint writes to a file found damaged.
    let corruption: CorruptionFlag
    private let queue = DispatchQueue(label: "SyncEngine.checkpoint")
    private let scheduled = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    /// When the last background checkpoint ended (`DispatchTime.uptimeNanoseconds`); touched only on `queue`.
    private let lastEnded = Atomic<UInt64>(0)
    /// How many background checkpoints ran.
    let runs = Atomic<Int>(0)
    /// The checkpoint connection, opened on first use; touched only on `queue`.
    private let connection = Mutex<OpaquePointer?>(nil)
    /// Free bytes of the store's file system (`StoreOptions.freeSpace`).
    private let freeSpace: @Sendable (String) -> Int64?
    /// The WAL pages at which the free space is looked at next, from
    /// `lowSpaceThreshold` on (every 64 pages, not every commit).
    private let nextSpaceLook = Atomic<Int32>(0)

    init(path: String, vfs: String?, corruption: CorruptionFlag, freeSpace: @escaping @Sendable (String) -> Int64? = BackgroundCheckpointer.freeBytes(at:)) {
        self.path = path
        self.vfs = vfs
        self.corruption = corruption
        self.freeSpace = freeSpace
    }

    /// The free bytes (for an unprivileged process) of the file system that holds `path`.
    static func freeBytes(at path: String) -> Int64? {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    /// Whether a WAL of `pages` is worth a checkpoint by the writer now:
    /// the disk is nearly full. Looked at every 64 pages the WAL grows.
    private func checkpointsEarly(atPages pages: Int32) -> Bool {
        let next = nextSpaceLook.load(ordering: .relaxed)
        // A WAL smaller than at the last look has started over since.
        guard pages >= next || pages + 64 < next else { return false }
        nextSpaceLook.store(pages + 64, ordering: .relaxed)
        return (freeSpace(path).map { $0 < BackgroundCheckpointer.lowSpaceBytes }) ?? false
    }

    /// Installs the hook on the writer's connection (replacing SQLite's automatic checkpoint).
    func attach(to handle: OpaquePointer) {
        sqlite3_wal_hook(handle, { context, db, name, pages in
            guard let context else { return SQLITE_OK }
            let checkpointer = Unmanaged<BackgroundCheckpointer>.fromOpaque(context).takeUnretainedValue()
            checkpointer.walGrew(pages: pages, writer: db, name: name)
            return SQLITE_OK
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Removes the hook; call before this object goes away.
    func detach(from handle: OpaquePointer) {
        sqlite3_wal_hook(handle, nil, nil)
    }

    private func walGrew(pages: Int32, writer: OpaquePointer?, name: UnsafePointer<CChar>?) {
        if corruption.isSet { return }
        // Inline, the copy completes (no commit lands meanwhile) and the next commit starts the WAL
        // over; in the background, commits that go on meanwhile keep it growing.
        if pages >= BackgroundCheckpointer.inlineLimit
            || (pages >= BackgroundCheckpointer.lowSpaceThreshold && checkpointsEarly(atPages: pages)) {
            _ = sqlite3_wal_checkpoint_v2(writer, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
            return
        }
        guard pages >= BackgroundCheckpointer.threshold, !stopped.load(ordering: .relaxed),
              !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async { self.checkpointWhenDue() }
    }

    /// On `queue`: runs the scheduled checkpoint once `minimumInterval` has
    /// passed since the last one ended, or comes back then.
    private func checkpointWhenDue() {
        let interval = BackgroundCheckpointer.minimumInterval.components
        let intervalNanoseconds = UInt64(interval.seconds) * 1_000_000_000 + UInt64(interval.attoseconds / 1_000_000_000)
        let due = lastEnded.load(ordering: .relaxed) + intervalNanoseconds
        guard DispatchTime.now().uptimeNanoseconds >= due else {
            queue.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: due)) { self.checkpointWhenDue() }
            return
        }
        checkpoint()
    }

    /// On `queue`: runs the scheduled checkpoint, if one still is (`drain` may have run it).
    private func checkpoint() {
        guard scheduled.exchange(false, ordering: .acquiringAndReleasing) else { return }
        defer { lastEnded.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed) }
        guard !stopped.load(ordering: .relaxed), !corruption.isSet else { return }
        runs.add(1, ordering: .relaxed)
        connection.withLock { conn in
            if conn == nil {
                var db: OpaquePointer?
                if sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, vfs) == SQLITE_OK, let db {
                    // The store's own connection checkpoints when it closes; this one never does.
                    _ = syncengine_db_config_flag(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
                    // A connection finds the WAL on its first read: until then a checkpoint through
                    // it does nothing at all (it reports no WAL), so every checkpoint was left to
                    // the writer's inline limit.
                    _ = sqlite3_exec(db, "SELECT 1 FROM sqlite_master LIMIT 1", nil, nil, nil)
                    conn = db
                } else {
                    sqlite3_close_v2(db)  // the writer's inline limit still bounds the WAL
                    return
                }
            }
            _ = sqlite3_wal_checkpoint_v2(conn, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
        }
    }

    /// Returns once every checkpoint scheduled so far has run (one waiting
    /// out `minimumInterval` runs now).
    func drain() { queue.sync { checkpoint() } }

    /// Waits for a running checkpoint and closes the connection.
    func stop() {
        stopped.store(true, ordering: .relaxed)
        queue.sync {}
        connection.withLock { conn in
            if let db = conn { sqlite3_close_v2(db) }
            conn = nil
        }
    }
}
