import CSQLite
import Foundation
import Synchronization

/// The store's SQLite file: one writer connection in WAL mode, guarded by a
/// mutex; work happens in closures (`read`, `write`) that the connection never
/// escapes, GRDB-style.
final class Database: Sendable {
    private let connection: Mutex<SQLiteConnection>
    /// Weak: the observer (the store) owns this database.
    private let observer = Mutex(WeakObserver())
    private let checkpointer: BackgroundCheckpointer
    /// Threads for which another thread holds (or is about to take) the
    /// writer: each one's own use of the connection first calls `stop`
    /// (`BulkWritePipeline`), which must release the writer before it returns.
    private let writerClaims = Mutex<[WriterClaim]>([])
    private let writerClaimCount = Atomic<Int>(0)
    let path: String

    /// Set once SQLite reports the file damaged; every write checks it.
    let corruption: CorruptionFlag
    /// Whether `syncCommitted()` must sync the WAL itself (not under `.full`, where every commit does).
    private let syncsDurableWrites: Bool
    /// Whether every COMMIT is on stable storage when it returns (`.full`).
    private let commitsAreDurable: Bool
    /// Bumped after every COMMIT, so a sync knows which commits it covers.
    private let commitGeneration = Atomic<Int>(0)
    /// Write transactions committed through this database since it opened.
    var commitCount: Int { commitGeneration.load(ordering: .acquiring) }
    private let walSyncer: WALSyncer
    /// Read-only connections for `readCommitted`; nil reads on the writer.
    private let readers: ReaderPool?

    /// The bytes the WAL file keeps once a checkpoint has copied it all and
    /// the next commit starts it over (`PRAGMA journal_size_limit`): above
    /// the writer's inline limit (16,000 frames of 4,120 bytes, 66 MB), so
    /// that no commit of the steady state cuts the file back. Cutting it
    /// frees its blocks in the committing thread (an app's write), which took
    /// 12–70 ms on a disk mounted with `discard`; a larger WAL (one large
    /// transaction) is still cut back to this at once.
    static let walSizeLimit = 72 << 20
    /// A WAL file over this (the steady state's 4,000 pages,
    /// `BackgroundCheckpointer.threshold`) is cut back to nothing once the
    /// store is idle (`StoreOptions.walTrimIdleDelay` without a commit), or
    /// soon on a nearly full disk, by the background checkpointer: it does not
    /// keep its largest size on disk while the store stays open.
    static let idleWALSizeLimit = 16 << 20

    /// Opens (or creates) the file and checks, before anything is written,
    /// that it is SQLite, that it is a SyncEngine store (`Schema.applicationID`,
    /// or an empty file, or a store made before the id existed) and, when
    /// small enough, that it is not damaged (`PRAGMA quick_check`). Then
    /// switches to WAL and migrates the schema forward.
    ///
    /// Throws `.notADatabase` for a file that is not a store and
    /// `.databaseCorrupt` for a damaged one; both are left untouched.
    init(path: String, options: StoreOptions) throws {
        try Database.checkHeader(path: path)
        if CorruptionFlag.wasFoundDamaged(path) { throw CorruptionFlag.error(path: path) }
        let conn = try SQLiteConnection(path: path, vfs: options.vfsName)
        // Until the file is known to be a healthy store of ours, closing it must not checkpoint.
        conn.setCheckpointOnClose(false)
        // The first read: SQLITE_NOTADB gives `.notADatabase`, SQLITE_CORRUPT `.databaseCorrupt` (`SQLiteConnection.error`).
        _ = try conn.integer("SELECT count(*) FROM sqlite_master")
        try Database.checkOwnership(conn)
        // A newer build's store is refused before anything here writes (the switch to WAL, a checkpoint at close).
        try Schema.refuseNewer(conn)
        if let limit = options.quickCheckMaxBytes, Database.fileSize(path) + Database.fileSize(path + "-wal") <= Int64(limit) {
            try Database.quickCheck(conn)
        }
        conn.setCheckpointOnClose(true)
        try conn.execute("PRAGMA journal_mode=WAL")
        try conn.execute(options.durability == .full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL")
        try conn.execute("PRAGMA cache_size=-8192")
        try conn.execute("PRAGMA journal_size_limit=\(Database.walSizeLimit)")
        try conn.execute("PRAGMA foreign_keys=ON")
        try Schema.migrate(conn)
        do {
            try Schema.checkShape(conn)
        } catch {
            conn.setCheckpointOnClose(false)
            throw error
        }
        self.path = path
        corruption = conn.corruption
        syncsDurableWrites = options.durability != .full && options.syncsBeforeAcknowledging
        commitsAreDurable = options.durability == .full
        walSyncer = WALSyncer(path: path, vfs: options.vfsName)
        checkpointer = BackgroundCheckpointer(path: path, vfs: options.vfsName, corruption: conn.corruption, freeSpace: options.freeSpace,
                                              trimIdleDelay: options.walTrimIdleDelay)
        checkpointer.attach(to: conn.handle)
        readers = options.readerConnections > 0
            ? ReaderPool(path: path, vfs: options.vfsName, capacity: options.readerConnections, corruption: conn.corruption) : nil
        self.connection = Mutex(conn)
    }

    /// Returns once every background checkpoint scheduled so far has run.
    func drainCheckpoints() { checkpointer.drain() }

    /// How many times the writer refreshed an idle reader connection after a commit (tests).
    var readerRefreshes: Int { readers?.refreshes.load(ordering: .relaxed) ?? 0 }
    /// The pages the idle reader connections read because their caches did not hold them (tests).
    var idleReaderPageCacheMisses: Int { readers?.idlePageCacheMisses ?? 0 }

    /// How many background checkpoints ran (tests).
    var backgroundCheckpointRuns: Int { checkpointer.runs.load(ordering: .relaxed) }

    /// How many times a grown WAL file was cut back, and each cut (tests).
    var walTrims: Int { checkpointer.trims.load(ordering: .relaxed) }
    var walTrimEvents: AsyncStream<Void> { checkpointer.trimEvents }
    /// How many steps of the idle trim's cuts ran (tests).
    var walTrimSteps: Int { checkpointer.trimSteps.load(ordering: .relaxed) }

    /// Runs the idle trim's look now, as its timer would, with `betweenSteps`
    /// between two steps of its cut (tests): true when it cut the WAL back.
    func trimWALIfIdleNow(betweenSteps: () -> Void = {}) -> Bool { checkpointer.trimIfIdleNow(betweenSteps: betweenSteps) }

    deinit { close() }

    /// Set by `close()`.
    private let closed = Atomic<Bool>(false)
    /// Set by a `close()` called while this thread held the writer (a commit
    /// hook): the writer closes as that thread leaves it.
    private let closeWhenUnlocked = Atomic<Bool>(false)

    /// Closes every connection, the writer last, so that its close, the last
    /// one to the file in this process, copies the WAL into the file and
    /// removes it (as long as no other connection, here or in another process,
    /// has the file open). Waits for reads and writes running on other threads;
    /// called while this thread is inside a write (a commit hook, an observer
    /// called under the lock), the writer closes as that write returns.
    /// Later uses throw `.closed`.
    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        readers?.close()
        checkpointer.stop()
        walSyncer.stop()
        if lockHolder.load(ordering: .relaxed) == Database.currentThread {
            closeWhenUnlocked.store(true, ordering: .releasing)
            return
        }
        // Work holding the writer for this thread ends first (it would wait for this thread).
        releaseWriterClaimedForThisThread()
        closeWriter()
    }

    private func closeWriter() {
        connection.withLock { conn in
            guard conn.isOpen else { return }
            checkpointer.detach(from: conn.handle)
            conn.close()
        }
    }

    /// After the writer's lock was left: the close a commit hook asked for.
    private func closeIfAskedFromInside() {
        guard closeWhenUnlocked.load(ordering: .acquiring),
              lockHolder.load(ordering: .relaxed) != Database.currentThread,
              closeWhenUnlocked.exchange(false, ordering: .acquiringAndReleasing) else { return }
        closeWriter()
    }

    /// Refuses files that exist, are non-empty and lack the SQLite header, or
    /// carry another program's `application_id`, before SQLite gets a chance to touch them.
    private static func checkHeader(path: String) throws {
        // Only a regular file can be a store: reading a FIFO's header would wait for a writer,
        // and SQLite would make a device (`/dev/null`) a store with its WAL beside it.
        var info = stat()
        if stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
            let kind = switch info.st_mode & S_IFMT {
            case S_IFDIR: "a directory"
            case S_IFIFO: "a FIFO"
            case S_IFCHR, S_IFBLK: "a device"
            default: "a socket"
            }
            throw SyncError(.notADatabase, "\(path) is not a regular file (\(kind)), so no store; it was left untouched — open a path to a file")
        }
        guard let handle = FileHandle(forReadingAtPath: path) else { return }
        defer { try? handle.close() }
        let header = [UInt8]((try? handle.read(upToCount: 100)) ?? Data())
        if header.isEmpty { return }
        if header.count < 16 || Data(header[0..<16]) != Data("SQLite format 3\0".utf8) {
            throw SyncError(.notADatabase, "the file at \(path) is not a SQLite database; it was left untouched — move it aside or open another path")
        }
        // The header's application_id (bytes 68-71, big-endian). A store's WAL may
        // hold a newer first page, so 0 here is decided later, with SQLite's view.
        guard header.count >= 72 else { return }
        let id = header[68..<72].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        if id != 0 && id != UInt32(bitPattern: Schema.applicationID) { throw foreignFile(path, id: id) }
    }

    /// Accepts a store of ours, a store made before `application_id` was set
    /// (id 0, a `sync_meta` table, schema version 1 or more) and an empty
    /// database; refuses anything else before a byte is written.
    private static func checkOwnership(_ conn: SQLiteConnection) throws {
        let id = try conn.integer("PRAGMA application_id")
        if id == Int64(Schema.applicationID) { return }
        if id == 0 {
            let version = try conn.integer("PRAGMA user_version")
            let objects = try conn.integer("SELECT count(*) FROM sqlite_master")
            if objects == 0 && version == 0 { return }   // new or empty
            // Ours, from before the id: our tables with their first columns (another program's
            // `sync_meta` and a schema version of its own is not enough: migrating it fails, and writes).
            let shape = try conn.integer("""
                SELECT (SELECT count(*) FROM pragma_table_info('sync_meta') WHERE name IN ('name', 'value'))
                     + (SELECT count(*) FROM pragma_table_info('entries') WHERE name IN ('key', 'value', 'encoding', 'ver', 'node'))
                     + (SELECT count(*) FROM pragma_table_info('sync_peers') WHERE name IN ('peer_node', 'acked_through'))
                """)
            if shape == 9 && version >= 1 { return }
        }
        throw foreignFile(conn.path, id: UInt32(truncatingIfNeeded: id))
    }

    private static func foreignFile(_ path: String, id: UInt32) -> SyncError {
        // SQLite reads a log beside the file over its pages: a `-wal` copied from another database shows that one.
        let log = fileSize(path + "-wal") > 0
            ? " (or, if the file alone is a store, move aside its log \(path)-wal, which may be another database's)" : ""
        return SyncError(.notADatabase, "the file at \(path) is a SQLite database of another program (application_id 0x\(String(id, radix: 16))), not a SyncEngine store; it was left untouched — open another path\(log)")
    }

    /// `PRAGMA quick_check`: reads every page; a damaged file throws `.databaseCorrupt`.
    private static func quickCheck(_ conn: SQLiteConnection) throws {
        let stmt = try conn.statement("PRAGMA quick_check(1)")
        defer { stmt.reset() }
        guard try stmt.step(), stmt.string(0) == "ok" else {
            conn.markCorrupt()
            throw CorruptionFlag.error(path: conn.path)
        }
    }

    private static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : 0
    }

    /// Runs `body` with the connection, outside a transaction.
    func read<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        try refuseUseFromInside()
        releaseWriterClaimedForThisThread()
        defer { closeIfAskedFromInside() }
        return try connection.withLock { conn in
            guard conn.isOpen else { throw SyncError.storeClosed(path) }
            markHeld()
            defer { lockHolder.store(0, ordering: .relaxed) }
            return try body(conn)
        }
    }

    /// `read`, unless the connection is in use (a transaction, another read):
    /// then nil at once, without waiting for it.
    func readIfFree<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws -> T? {
        try refuseUseFromInside()
        defer { closeIfAskedFromInside() }
        return try connection.withLockIfAvailable { conn in
            guard conn.isOpen else { throw SyncError.storeClosed(path) }
            markHeld()
            defer { lockHolder.store(0, ordering: .relaxed) }
            return try body(conn)
        }
    }

    /// The thread running inside the writer connection's lock (0: none).
    private let lockHolder = Atomic<UInt>(0)

    /// Whether a thread holds the writer's lock, or a large batch claimed it
    /// (`claimWriter`), at this moment: a caller that must not block its
    /// thread on the lock (a session loop on Swift concurrency's pool) then
    /// does its write elsewhere. One load each; a hint, not a reservation.
    var writerIsBusy: Bool {
        lockHolder.load(ordering: .relaxed) != 0 || writerClaimCount.load(ordering: .relaxed) > 0
    }

    static var currentThread: UInt {
        #if canImport(Darwin)
        UInt(bitPattern: pthread_self())
        #else
        UInt(pthread_self())
        #endif
    }

    /// Marks the lock as this thread's, from inside it (cleared as the lock is left).
    private func markHeld() { lockHolder.store(Database.currentThread, ordering: .relaxed) }

    /// The writer's lock is not re-entrant: a call into the store from inside
    /// one of its transactions (a will-commit hook that reads or writes the
    /// store) is refused instead of trapping on the lock.
    private func refuseUseFromInside() throws {
        guard lockHolder.load(ordering: .relaxed) == Database.currentThread else { return }
        throw SyncError(.invalidConfiguration, "the store at \(path) was used from inside one of its own write transactions (a will-commit hook, or code it calls, that reads or writes the store); do that after the write returns")
    }

    /// Whether `readCommitted` reads on reader connections (not on the writer).
    var hasReaders: Bool { readers != nil }

    /// Runs `body` on a reader connection, outside a transaction: each
    /// statement sees every commit made before it started, and nothing waits
    /// for the writer (a batch being applied) or for other readers beyond the
    /// pool's size. On the writer, as `read`, when the store has no readers
    /// (`StoreOptions.readerConnections` 0).
    func readCommitted<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        guard let readers else { return try read(body) }
        return try readers.read(body)
    }

    /// Runs `body` in one immediate transaction; everything or nothing.
    /// `onCommit` runs after COMMIT succeeded, still under the lock, so cache
    /// updates are ordered with the writes they mirror.
    ///
    /// Throws `.databaseCorrupt`, writing nothing, once the file was found damaged.
    func write<T: Sendable>(_ body: (SQLiteConnection) throws -> T, onCommit: (T) -> Void = { _ in }) throws -> T {
        if corruption.isSet { throw CorruptionFlag.error(path: path) }
        try refuseUseFromInside()
        releaseWriterClaimedForThisThread()
        // Last, once the lock is released and the observers heard of the commit (the peers'
        // senders first): the idle readers move onto the new snapshot (`refreshIdleConnections`).
        var committed = false
        defer { if committed { readers?.refreshIdleConnections() } }
        defer { closeIfAskedFromInside() }
        let observer = self.observer.withLock { $0.value }
        // Set once the transaction ended either way: the observer hears it is unlocked after the
        // lock is released (its observers may write again), on failure as on success.
        var ended = false
        defer { if ended { observer?.transactionUnlocked() } }
        return try connection.withLock { conn in
            guard conn.isOpen else { throw SyncError.storeClosed(path) }
            markHeld()
            defer { lockHolder.store(0, ordering: .relaxed) }
            let result: T
            do {
                result = try conn.transaction {
                    try observer?.transactionBegan(conn)
                    let result = try body(conn)
                    try observer?.transactionWillCommit(conn)
                    return result
                }
            } catch {
                ended = true
                observer?.transactionEnded(committed: false)
                throw error
            }
            ended = true
            committed = true
            commitGeneration.add(1, ordering: .releasing)
            observer?.transactionEnded(committed: true)
            onCommit(result)
            return result
        }
    }

    /// The WAL fsyncs run so far for `syncCommitted` and `syncCommittedAsync`.
    var walSyncsPerformed: Int { walSyncer.syncsPerformed }
    /// Tests only: sets `WALSyncer.beforeSyncHook`.
    func setWALSyncHook(_ hook: (@Sendable () -> Void)?) { walSyncer.beforeSyncHook.withLock { $0 = hook } }
    /// The reads the WAL syncer ran to open the WAL on its connection (`WALSyncer.walOpeningReads`).
    var walOpeningReads: Int { walSyncer.walOpeningReads }

    /// Puts every commit made so far on stable storage, whatever
    /// `StoreOptions.durability` says: for commits acknowledged to the peer,
    /// which then forgets the data. Syncs the WAL, as a COMMIT under
    /// `synchronous=FULL` would (a no-op under `.full`, where every commit did).
    func syncCommitted() throws {
        guard syncsDurableWrites else { return }
        let generation = commitGeneration.load(ordering: .acquiring)
        try walSyncer.sync(through: generation) { self.commitGeneration.load(ordering: .acquiring) }
    }

    /// Puts every commit made so far on stable storage before a change
    /// outside the file that relies on them (a value file renamed over, or
    /// deleted, once its row committed): a power cut must not roll back the
    /// row and keep the file change. A no-op under `.full`.
    func syncCommittedBeforeFileChanges() throws {
        guard !commitsAreDurable else { return }
        let generation = commitGeneration.load(ordering: .acquiring)
        try walSyncer.sync(through: generation) { self.commitGeneration.load(ordering: .acquiring) }
    }

    /// `syncCommitted()` for the commits made so far, without blocking the
    /// caller's thread or the writer: the fsync runs on the syncer's queue
    /// and its own connection, and callers waiting together share one fsync.
    func syncCommittedAsync() async throws {
        guard syncsDurableWrites else { return }
        let generation = commitGeneration.load(ordering: .acquiring)
        // Weak: the syncer's block is released on its queue, possibly after the caller
        // dropped the store; holding the last reference, it would run `deinit` there,
        // and `WALSyncer.stop()` would wait for its own queue (a trap in libdispatch).
        try await walSyncer.syncAsync(through: generation) { [weak self] in
            self?.commitGeneration.load(ordering: .acquiring) ?? generation
        }
    }

    /// Notes that another thread holds (or will take) the writer for work of
    /// `thread`, which must not wait for it: the first use of the connection
    /// on `thread` calls `stop` (outside any lock here), which must end that
    /// work and call `releaseWriter(for:)` before it returns.
    func claimWriter(for thread: ObjectIdentifier, stop: @escaping @Sendable () -> Void) {
        writerClaims.withLock { $0.append(WriterClaim(thread: thread, stop: stop)) }
        writerClaimCount.add(1, ordering: .releasing)
    }

    /// Ends a claim of `claimWriter(for:stop:)` (nothing when there is none).
    func releaseWriter(for thread: ObjectIdentifier) {
        let removed = writerClaims.withLock { claims -> Bool in
            guard let index = claims.firstIndex(where: { $0.thread == thread }) else { return false }
            claims.remove(at: index)
            return true
        }
        if removed { writerClaimCount.subtract(1, ordering: .releasing) }
    }

    /// On a thread with a claim, stops the work that holds the writer for it
    /// (else this thread would wait for that work, and it for this thread).
    func releaseWriterClaimedForThisThread() {
        guard writerClaimCount.load(ordering: .acquiring) > 0 else { return }
        let thread = ObjectIdentifier(Thread.current)
        guard let claim = writerClaims.withLock({ $0.first { $0.thread == thread } }) else { return }
        claim.stop()
    }

    private struct WriterClaim: Sendable {
        let thread: ObjectIdentifier
        let stop: @Sendable () -> Void
    }

    /// Sets the one observer of write transactions (the store, once it is set up).
    func setObserver(_ observer: any TransactionObserver) {
        self.observer.withLock { $0.value = observer }
    }

    private struct WeakObserver: Sendable {
        weak var value: (any TransactionObserver)?
    }
}

/// Sees every write transaction of a `Database`, under its lock.
protocol TransactionObserver: AnyObject, Sendable {
    /// Right after `BEGIN IMMEDIATE`: no other connection can write until the end.
    func transactionBegan(_ conn: SQLiteConnection) throws
    /// After the body, before `COMMIT`; throwing rolls back.
    func transactionWillCommit(_ conn: SQLiteConnection) throws
    /// After `COMMIT` or `ROLLBACK`.
    func transactionEnded(committed: Bool)
    /// After the lock is released: the place to call out to observers.
    func transactionUnlocked()
}
