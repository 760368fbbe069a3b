import CSQLite
import CWALTrim
import Foundation
import Dispatch
import Synchronization
import SyncTransport

/// Copies WAL pages into the database file on a queue of its own, with its
/// own connection, so the commit that crosses the threshold does not pay for
/// the copy and its fsync (SQLite's automatic checkpoint runs inside COMMIT).
///
/// A passive checkpoint never blocks the writer or readers. If the WAL still
/// grows past `inlineLimit` pages (checkpoints falling behind), the writer
/// checkpoints itself, as SQLite would, so the file stays bounded. On a
/// nearly full disk the writer checkpoints itself at `lowSpaceThreshold` pages.
///
/// A WAL file that grew past `Database.idleWALSizeLimit` is cut back (to
/// nothing) once the store has been idle for `trimIdleDelay`, here: a
/// commit never cuts it (`Database.walSizeLimit` sits above the steady
/// state), since freeing tens of MB of file can stall the committing
/// thread for milliseconds (synchronous discards on a disk mounted with
/// `discard`: 12–70 ms). The cut goes in steps of `trimStepBytes`, each
/// under a short hold of the writer's lock, so a write that comes in waits
/// for one step at most. On a nearly full disk it is cut back at the next
/// look, idle or not.
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
    /// How long the store stays without a commit before a grown WAL file is
    /// cut back (`StoreOptions.walTrimIdleDelay`).
    let trimIdleDelay: Duration

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
    /// Commits of the writer's connection (its WAL hook), for the idle trim.
    private let commits = Atomic<Int>(0)
    /// Whether the writer found the disk nearly full at its last look: then a
    /// grown WAL file is cut back at the trim's next look, idle or not.
    private let diskNearlyFull = Atomic<Bool>(false)
    /// Whether an idle trim is scheduled on `queue`.
    private let trimScheduled = Atomic<Bool>(false)
    /// `commits` when the scheduled idle trim last looked (or was scheduled).
    private let commitsAtTrimLook = Atomic<Int>(-1)
    /// How many times a grown WAL file was cut back (when idle, or at once on a nearly full disk).
    let trims = Atomic<Int>(0)
    /// How many steps of a cut ran, all told (tests).
    let trimSteps = Atomic<Int>(0)
    /// Each cut of a grown WAL file (for tests).
    let trimEvents: AsyncStream<Void>
    private let trimEvent: AsyncStream<Void>.Continuation
    /// The checkpoint connection, opened on first use; touched only on `queue`.
    private let connection = Mutex<OpaquePointer?>(nil)
    /// Free bytes of the store's file system (`StoreOptions.freeSpace`).
    private let freeSpace: @Sendable (String) -> Int64?
    /// The WAL pages at which the free space is looked at next, from
    /// `lowSpaceThreshold` on (every 64 pages, not every commit).
    private let nextSpaceLook = Atomic<Int32>(0)

    init(path: String, vfs: String?, corruption: CorruptionFlag,
         freeSpace: @escaping @Sendable (String) -> Int64? = BackgroundCheckpointer.freeBytes(at:),
         trimIdleDelay: Duration = .seconds(1)) {
        self.path = path
        self.vfs = vfs
        self.corruption = corruption
        self.freeSpace = freeSpace
        self.trimIdleDelay = max(.zero, trimIdleDelay)
        (trimEvents, trimEvent) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(8))
    }

    /// The WAL file's size in bytes (0 when there is none).
    private var walFileBytes: Int64 {
        var info = stat()
        return stat(path + "-wal", &info) == 0 ? Int64(info.st_size) : 0
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
        let nearlyFull = (freeSpace(path).map { $0 < BackgroundCheckpointer.lowSpaceBytes }) ?? false
        diskNearlyFull.store(nearlyFull, ordering: .relaxed)
        return nearlyFull
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
        commits.add(1, ordering: .relaxed)
        if corruption.isSet { return }
        // Inline, the copy completes (no commit lands meanwhile) and the next commit starts the WAL
        // over; in the background, commits that go on meanwhile keep it growing.
        if pages >= BackgroundCheckpointer.inlineLimit
            || (pages >= BackgroundCheckpointer.lowSpaceThreshold && checkpointsEarly(atPages: pages)) {
            _ = sqlite3_wal_checkpoint_v2(writer, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
            scheduleIdleTrim()
            return
        }
        guard pages >= BackgroundCheckpointer.threshold, !stopped.load(ordering: .relaxed),
              !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async { self.checkpointWhenDue() }
    }

    /// On `queue`: a checkpoint of `mode` through the checkpoint connection,
    /// opened on first use; its result code, nil when the connection cannot be
    /// opened (the writer's inline limit still bounds the WAL).
    @discardableResult
    private func checkpoint(mode: Int32) -> Int32? {
        withConnection { sqlite3_wal_checkpoint_v2($0, nil, mode, nil, nil) }
    }

    /// The VFS the checkpoint connection opens the store through: `base`
    /// (nil: SQLite's default), but for the truncate of `walcut_restart`
    /// (`CWALTrim`). `base` itself if it cannot be registered: the WAL is
    /// then cut at once, as SQLite's truncating checkpoint does.
    static func cutVFS(over base: String?) -> String? {
        var name = [CChar](repeating: 0, count: 256)
        guard walcut_register_vfs(base, &name, Int32(name.count)) == SQLITE_OK else { return base }
        return name.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// On `queue`: `body` with the checkpoint connection, opened on first use;
    /// nil when it cannot be opened.
    private func withConnection<T: Sendable>(_ body: @Sendable (OpaquePointer) -> T) -> T? {
        connection.withLock { conn -> T? in
            if conn == nil {
                var db: OpaquePointer?
                guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, BackgroundCheckpointer.cutVFS(over: vfs)) == SQLITE_OK,
                      let db else {
                    sqlite3_close_v2(db)
                    return nil
                }
                // The store's own connection checkpoints when it closes; this one never does.
                _ = syncengine_db_config_flag(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
                // A connection finds the WAL on its first read: until then a checkpoint through
                // it does nothing at all (it reports no WAL), so every checkpoint was left to
                // the writer's inline limit.
                _ = sqlite3_exec(db, "SELECT 1 FROM sqlite_master LIMIT 1", nil, nil, nil)
                conn = db
            }
            return conn.map(body)
        }
    }

    /// On `queue`: runs the scheduled checkpoint once `minimumInterval` has
    /// passed since the last one ended, or comes back then.
    private func checkpointWhenDue() {
        let due = lastEnded.load(ordering: .relaxed) + BackgroundCheckpointer.nanoseconds(BackgroundCheckpointer.minimumInterval)
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
        checkpoint(mode: SQLITE_CHECKPOINT_PASSIVE)
        scheduleIdleTrim()
    }

    // MARK: Idle trim

    /// Bytes cut off a grown WAL file under one hold of the writer's lock.
    /// Freeing blocks is what costs (synchronous discards on a disk mounted
    /// with `discard`): on this project's VM, 48–64 MB cut at once took
    /// 10–20 ms (up to 71 ms with both cores busy), 1 MB at most 0.7 ms.
    static let trimStepBytes: Int64 = 1 << 20
    /// The pause between two steps of a cut, in which a writer that found the
    /// lock taken gets it (the store's busy handler tries again after 50 µs,
    /// then 100, 200 and 400 µs: `syncengine_busy_wait`).
    static let trimStepPause: Duration = .milliseconds(3)

    /// What the idle trim does next.
    private enum TrimNext { case stop, lookAgain, cutAgain, done }

    /// After a checkpoint: looks, `trimIdleDelay` from now, whether the store
    /// went idle with a grown WAL file (`trimIfIdle`). One look at a time.
    private func scheduleIdleTrim() {
        guard !stopped.load(ordering: .relaxed), !trimScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // The commits so far, now: taken on `queue`, a commit made meanwhile would count as before
        // the look, and the store as idle a whole delay early.
        commitsAtTrimLook.store(commits.load(ordering: .relaxed), ordering: .relaxed)
        queue.async { self.lookAgainForIdleTrim() }
    }

    /// On `queue`: the next look, `trimIdleDelay` from now.
    private func lookAgainForIdleTrim() {
        after(trimIdleDelay) { self.advance(self.trimIfIdle()) }
    }

    /// On `queue`: runs `work` on `queue` after `delay`.
    private func after(_ delay: Duration, _ work: @escaping @Sendable () -> Void) {
        let nanoseconds = BackgroundCheckpointer.nanoseconds(delay)
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(min(nanoseconds, UInt64(Int.max)))), execute: work)
    }

    /// `duration` in whole nanoseconds (a negative one as none).
    private static func nanoseconds(_ duration: Duration) -> UInt64 {
        let parts = max(.zero, duration).cappedForSleep.components
        return UInt64(parts.seconds) * 1_000_000_000 + UInt64(parts.attoseconds / 1_000_000_000)
    }

    /// On `queue`: goes on from a look or a step of the cut.
    private func advance(_ next: TrimNext) {
        switch next {
        case .stop: trimScheduled.store(false, ordering: .releasing)
        case .lookAgain: lookAgainForIdleTrim()
        case .cutAgain: after(BackgroundCheckpointer.trimStepPause) { self.advance(self.cutStep()) }
        case .done: finishTrim()
        }
    }

    /// On `queue`: `.stop` once the checkpointer stopped or the file was
    /// found damaged; `.lookAgain` when a commit landed since the last look
    /// (which this one now is), unless the disk is nearly full; else nil.
    private func stopOrLookAgain() -> TrimNext? {
        guard !stopped.load(ordering: .relaxed), !corruption.isSet else { return .stop }
        let seen = commits.load(ordering: .relaxed)
        guard seen != commitsAtTrimLook.load(ordering: .relaxed), !diskNearlyFull.load(ordering: .relaxed) else { return nil }
        commitsAtTrimLook.store(seen, ordering: .relaxed)
        return .lookAgain
    }

    /// On `queue`: when no commit landed since the last look and the WAL
    /// file is over `Database.idleWALSizeLimit`, copies what is left of the
    /// WAL into the file (a passive checkpoint, without the writer's lock),
    /// starts the WAL over (`walcut_restart`: a truncating checkpoint
    /// without its truncate, which takes the writer's lock and the readers'
    /// marks without waiting, so a write or a read of the WAL in progress
    /// puts it off), then cuts the file back in steps (`cutStep`).
    private func trimIfIdle() -> TrimNext {
        if let next = stopOrLookAgain() { return next }
        guard walFileBytes > Int64(Database.idleWALSizeLimit), let copied = checkpoint(mode: SQLITE_CHECKPOINT_PASSIVE) else { return .stop }
        guard copied == SQLITE_OK, withConnection({ walcut_restart($0) }) == SQLITE_OK else { return .lookAgain }
        return cutStep()
    }

    /// On `queue`: one step of the cut, under a hold of the writer's lock of
    /// its own (`BEGIN IMMEDIATE`, without waiting): at most `trimStepBytes`
    /// off the file's end, never into frames a commit wrote since
    /// (`walcut_step`). A commit since the look stops the cut
    /// until the store is idle again, unless the disk is nearly full.
    private func cutStep() -> TrimNext {
        if let next = stopOrLookAgain() { return next }
        return withConnection { db -> TrimNext in
            guard sqlite3_exec(db, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK else { return .lookAgain }
            defer { _ = sqlite3_exec(db, "ROLLBACK", nil, nil, nil) }
            var left: Int64 = 0
            var inUse: Int64 = 0
            guard walcut_step(db, BackgroundCheckpointer.trimStepBytes, &left, &inUse) == SQLITE_OK else { return .stop }
            trimSteps.add(1, ordering: .relaxed)
            return left <= inUse ? .done : .cutAgain
        } ?? .stop
    }

    /// On `queue`: the cut reached the frames in use (nothing, when idle).
    private func finishTrim() {
        trims.add(1, ordering: .relaxed)
        trimScheduled.store(false, ordering: .releasing)
        trimEvent.yield()
    }

    /// Runs the idle trim's look now, as its timer would, its steps
    /// `trimStepPause` apart, with `betweenSteps` between two (tests and
    /// `syncsim bench store`): true when it cut the WAL back. A look its
    /// timer has scheduled still comes.
    func trimIfIdleNow(betweenSteps: () -> Void = {}) -> Bool {
        queue.sync {
            let before = trims.load(ordering: .relaxed)
            var next = trimIfIdle()
            while next == .cutAgain {
                betweenSteps()
                Thread.sleep(forTimeInterval: BackgroundCheckpointer.trimStepPause / .seconds(1))
                next = cutStep()
            }
            switch next {
            case .done: finishTrim()
            case .stop: trimScheduled.store(false, ordering: .releasing)
            case .lookAgain, .cutAgain: break
            }
            return trims.load(ordering: .relaxed) > before
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
