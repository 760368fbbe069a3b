import CSQLite
import Dispatch
import Synchronization

/// Puts commits on stable storage without holding the writer: an fsync of
/// the WAL through a connection of its own, on a queue of its own, so the
/// writer goes on applying (and readers reading) while the disk syncs.
///
/// Group commit: `sync(through:)` asks that every commit up to a generation
/// be durable; one fsync covers every commit written before it started, so
/// callers waiting together share it. Linux's fsync flushes the file, whichever
/// descriptor wrote it, and the crash VFS tracks unsynced writes per path, so
/// the tests' power cuts see the same thing.
final class WALSyncer: Sendable {
    let path: String
    let vfs: String?
    private let queue = DispatchQueue(label: "SyncEngine.walSync")
    private struct State {
        var connection: OpaquePointer?
        /// Whether the connection holds the WAL open (after its first read): later syncs need no read.
        var holdsWAL = false
        /// Every commit up to this generation is on stable storage.
        var synced = 0
        var stopped = false
    }
    private let state = Mutex(State())
    private let performed = Atomic<Int>(0)
    private let reads = Atomic<Int>(0)
    /// Tests only: called by `sync` on its thread before it syncs (a test blocks it there).
    let beforeSyncHook = Mutex<(@Sendable () -> Void)?>(nil)

    /// The fsyncs this syncer has run (a caller already covered by an earlier one runs none).
    var syncsPerformed: Int { performed.load(ordering: .relaxed) }
    /// The reads this syncer ran to open the WAL on its connection: one, unless SQLite let go of it.
    var walOpeningReads: Int { reads.load(ordering: .relaxed) }

    init(path: String, vfs: String?) {
        self.path = path
        self.vfs = vfs
    }

    /// Blocks until every commit up to `generation` is on stable storage;
    /// `current` reads the newest commit generation (read before the fsync:
    /// those commits are already in the WAL).
    func sync(through generation: Int, current: () -> Int) throws {
        try state.withLock { state in
            if state.synced >= generation { return }
            guard !state.stopped else { throw SyncError(.closed, "the store at \(path) is closed; its last commits may not be on stable storage") }
            beforeSyncHook.withLock { $0 }?()
            let target = current()
            let db = try openIfNeeded(&state)
            // A read opens the WAL (if any) on this connection, which keeps it open from then on;
            // then sync it. (A read per sync cost about a quarter of the sync's own CPU.)
            var rc = state.holdsWAL ? syncengine_sync_open_journal(db) : SQLITE_NOTFOUND
            if rc == SQLITE_NOTFOUND {
                reads.add(1, ordering: .relaxed)
                rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nil, nil, nil)
                if rc == SQLITE_OK { rc = syncengine_sync_open_journal(db) }
            }
            state.holdsWAL = rc == SQLITE_OK
            guard rc == SQLITE_OK else {
                throw SyncError(.database, "the store at \(path) could not be flushed to stable storage (SQLite code \(rc)); check the disk")
            }
            state.synced = max(state.synced, target)
            performed.add(1, ordering: .relaxed)
        }
    }

    /// Runs `sync(through:current:)` on the syncer's queue, suspending the caller instead of blocking it.
    func syncAsync(through generation: Int, current: @escaping @Sendable () -> Int) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            queue.async {
                continuation.resume(with: Result { try self.sync(through: generation, current: current) })
            }
        }
    }

    private func openIfNeeded(_ state: inout State) throws -> OpaquePointer {
        if let db = state.connection { return db }
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, vfs)
        guard rc == SQLITE_OK, let db else {
            sqlite3_close_v2(db)
            throw SyncError(.database, "cannot open the store at \(path) to sync it (SQLite code \(rc))")
        }
        // This connection only reads and syncs: it must never checkpoint on close.
        _ = syncengine_db_config_flag(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        sqlite3_busy_timeout(db, 5_000)
        state.connection = db
        return db
    }

    /// Closes the connection; later syncs throw `.closed`.
    func stop() {
        queue.sync {}
        state.withLock { state in
            state.stopped = true
            if let db = state.connection { sqlite3_close_v2(db) }
            state.connection = nil
        }
    }
}
