import CSQLite
import CSQLiteSetup
import Foundation
import Synchronization

/// `SQLITE_TRANSIENT` for Swift: tells SQLite to copy bound bytes.
let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// One SQLite connection with a cache of prepared statements.
///
/// Not thread-safe on its own: `Database` owns the writer inside a `Mutex`,
/// and `ReaderPool` hands each reader to one thread at a time (taken out of
/// its idle list under its lock, put back after); neither escapes a
/// `read`/`write` closure.
/// Unchecked-sendable because `Mutex.withLock` must hand it out as `sending`.
final class SQLiteConnection: @unchecked Sendable {  // reason: one thread at a time: Database's Mutex or ReaderPool's hand-out (above)
    let handle: OpaquePointer
    let path: String
    /// Set by the first `SQLITE_CORRUPT`; shared with the `Database` that owns this connection.
    let corruption: CorruptionFlag
    private var statements: [String: OpaquePointer] = [:]
    /// False once `close()` ran: `handle` is freed and must not be used.
    private(set) var isOpen = true
    /// The key the app's last read on this connection looked up: what
    /// `ReaderPool.refreshIdleConnections` looks up again after a commit.
    private(set) var lastLookedUpKey: String?
    /// Whether a reader connection served an app's read since the pool last
    /// refreshed it (`ReaderPool.refreshIdleConnections`). A write's own
    /// reads of the rows it replaces do not count: a burst of writes with no
    /// read between them pays no refresh.
    var readSinceRefresh = false

    /// Notes a read of `key` for the app (a cache miss), for `ReaderPool.refreshIdleConnections`.
    func noteAppRead(ofKey key: String) {
        lastLookedUpKey = key
        readSinceRefresh = true
    }

    /// Opens `path` through the VFS named `vfs` (SQLite's default when nil).
    /// `corruption`: the flag of the database this connection serves (a new one when nil).
    init(path: String, vfs: String? = nil, corruption: CorruptionFlag? = nil) throws {
        var db: OpaquePointer?
        // Also what links in `CSQLiteSetup`, whose setup runs at load.
        _ = SQLiteLibrary.allocationStatisticsOff
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, vfs)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            throw SyncError(.database, "cannot open the store at \(path): \(message) (SQLite code \(rc)); check the path and its permissions")
        }
        handle = db
        self.path = path
        self.corruption = corruption ?? CorruptionFlag(path: path)
        // Waits up to about 5 s for a lock, in short sleeps at first (`syncengine_busy_wait`).
        _ = syncengine_set_busy_wait(db)
        sqlite3_extended_result_codes(db, 1)
    }

    deinit { close() }

    /// Finalizes the cached statements and closes the connection (the last
    /// connection to the file checkpoints and removes the WAL, unless that is
    /// turned off: `setCheckpointOnClose`). Only the connection's owner, with
    /// no statement running, may call it; later uses must check `isOpen`.
    func close() {
        guard isOpen else { return }
        isOpen = false
        for statement in statements.values { sqlite3_finalize(statement) }
        statements = [:]
        sqlite3_close_v2(handle)
    }

    /// Copies the whole WAL into the file and truncates it to no bytes
    /// (`SQLITE_CHECKPOINT_TRUNCATE`); false when another connection's read or
    /// checkpoint held it back (part of it may then be copied).
    func checkpointTruncating() throws -> Bool {
        var logFrames: Int32 = 0, checkpointed: Int32 = 0
        let rc = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_TRUNCATE, &logFrames, &checkpointed)
        if rc & 0xFF == SQLITE_BUSY || rc & 0xFF == SQLITE_LOCKED { return false }
        guard rc == SQLITE_OK else { throw error(rc, context: "checkpoint") }
        return logFrames == 0 || logFrames == checkpointed
    }

    /// Runs one or more SQL statements without results.
    func execute(_ sql: String) throws {
        let rc = sqlite3_exec(handle, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw error(rc, context: "execute") }
    }

    /// A cached prepared statement for `sql`, reset and with bindings cleared.
    func statement(_ sql: String) throws -> Statement {
        if let cached = statements[sql] {
            sqlite3_reset(cached)
            sqlite3_clear_bindings(cached)
            return Statement(handle: cached, connection: self)
        }
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw error(rc, context: "prepare") }
        statements[sql] = stmt
        return Statement(handle: stmt, connection: self)
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction; rolls back if it throws.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        // Prepared once and kept (sqlite3_exec would parse them on every transaction).
        try statement("BEGIN IMMEDIATE").run()
        do {
            let result = try body()
            try statement("COMMIT").run()
            return result
        } catch {
            try? statement("ROLLBACK").run()
            throw error
        }
    }

    /// Runs `body` in a savepoint of the open transaction: a throw undoes
    /// what `body` did, and only that.
    func savepoint<T>(_ body: () throws -> T) throws -> T {
        try statement("SAVEPOINT sync_step").run()
        do {
            let result = try body()
            try statement("RELEASE sync_step").run()
            return result
        } catch {
            try? statement("ROLLBACK TO sync_step").run()
            try? statement("RELEASE sync_step").run()
            throw error
        }
    }

    var changes: Int { Int(sqlite3_changes(handle)) }

    /// Pages this connection read from the file (or its WAL) because its page
    /// cache did not hold them, since it opened (`SQLITE_DBSTATUS_CACHE_MISS`).
    var pageCacheMisses: Int {
        var current: Int32 = 0, highest: Int32 = 0
        sqlite3_db_status(handle, SQLITE_DBSTATUS_CACHE_MISS, &current, &highest, 0)
        return Int(current)
    }

    /// The first column of the first row of `sql` (a query or pragma returning one integer).
    func integer(_ sql: String) throws -> Int64 {
        let stmt = try statement(sql)
        defer { stmt.reset() }
        return try stmt.step() ? stmt.int64(0) : 0
    }

    /// Whether closing the connection copies the WAL into the database file
    /// (SQLite's default). Off while a file is not known to be a healthy store
    /// of ours, so that closing it writes nothing.
    func setCheckpointOnClose(_ on: Bool) {
        _ = syncengine_db_config_flag(handle, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, on ? 0 : 1)
    }

    /// Records that the file is damaged: nothing is written to it from now on
    /// (not even the checkpoint SQLite runs when the connection closes).
    func markCorrupt() {
        setCheckpointOnClose(false)
        corruption.set()
    }

    /// A `SyncError` for a SQLite result code. Never includes bound values.
    /// `SQLITE_CORRUPT` marks the file damaged (`.databaseCorrupt`).
    func error(_ rc: Int32, context: String) -> SyncError {
        let message = String(cString: sqlite3_errmsg(handle))
        let primary = rc & 0xFF
        if primary == SQLITE_CORRUPT {
            markCorrupt()
            return CorruptionFlag.error(path: path)
        }
        if primary == SQLITE_FULL {
            return SyncError(.storageFull, "the device's storage is full: SQLite \(context) could not write to \(path) (\(message)); nothing of this change was stored and what was stored before is intact — free space and try again")
        }
        if primary == SQLITE_NOTADB {
            return SyncError(.notADatabase, "the file at \(path) is not a valid SyncEngine store (\(message)); it was left untouched — move it aside or open another path")
        }
        if primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN {
            // A file the app may not write, or a folder where SQLite cannot make the log beside it.
            return SyncError(.database, "SQLite \(context) failed: \(message) (code \(rc)): the store at \(path) or its log (-wal, -shm) beside it cannot be written; make the file and its folder writable")
        }
        return SyncError(.database, "SQLite \(context) failed: \(message) (code \(rc))")
    }
}

/// Whether SQLite has reported a store file damaged (`SQLITE_CORRUPT`, or a
/// failed `quick_check`). Once set, the store writes nothing more to the file;
/// the file is also remembered for the rest of the process (by device, inode,
/// size and change time, so a file restored at the same path opens again).
final class CorruptionFlag: Sendable {
    let path: String
    private let flagged = Atomic<Bool>(false)

    init(path: String) { self.path = path }

    var isSet: Bool { flagged.load(ordering: .acquiring) }

    func set() {
        guard !flagged.exchange(true, ordering: .acquiringAndReleasing) else { return }
        if let identity = CorruptionFlag.identity(of: path) {
            CorruptionFlag.damaged.withLock { _ = $0.insert(identity) }
        }
    }

    /// The error every write of a damaged store throws.
    static func error(path: String) -> SyncError {
        SyncError(.databaseCorrupt, "the store at \(path) is damaged (SQLite reports a malformed database file); this process will not write to it again — copy out what still reads, then restore a backup or move the file aside and open a new store")
    }

    /// True when this process found the file at `path` damaged before.
    static func wasFoundDamaged(_ path: String) -> Bool {
        guard let identity = identity(of: path) else { return false }
        return damaged.withLock { $0.contains(identity) }
    }

    /// The file, not its path: device and inode, plus size and change time
    /// (an inode number is reused once a file is deleted; a file put back
    /// at the path, or changed by someone else, is checked afresh).
    private struct FileIdentity: Hashable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var changed: Int64
    }

    private static let damaged = Mutex<Set<FileIdentity>>([])

    private static func identity(of path: String) -> FileIdentity? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        #if canImport(Darwin)
        let changeTime = info.st_ctimespec
        #else
        let changeTime = info.st_ctim
        #endif
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
                            changed: Int64(changeTime.tv_sec) * 1_000_000_000 + Int64(changeTime.tv_nsec))
    }
}

/// A prepared statement borrowed from the connection's cache.
struct Statement {
    let handle: OpaquePointer
    unowned let connection: SQLiteConnection

    func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(handle, index, value) }
    func bind(_ index: Int32, _ value: Int) { sqlite3_bind_int64(handle, index, Int64(value)) }
    /// Binds all of `value`'s bytes (a length of -1 would end the text at a NUL).
    func bind(_ index: Int32, _ value: String) {
        var value = value
        value.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) { text in
                if let base = text.baseAddress {
                    _ = sqlite3_bind_text(handle, index, base, Int32(text.count), sqliteTransient)
                } else {
                    _ = sqlite3_bind_text(handle, index, "", 0, sqliteTransient)  // a null pointer would bind NULL
                }
            }
        }
    }
    func bind(_ index: Int32, _ value: String?) {
        if let value { bind(index, value) } else { sqlite3_bind_null(handle, index) }
    }
    func bind(_ index: Int32, _ value: [UInt8]?) {
        guard let value else { sqlite3_bind_null(handle, index); return }
        value.withUnsafeBytes { raw in
            _ = sqlite3_bind_blob(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(raw.count), sqliteTransient)
        }
    }

    /// Steps once: true when a row is available.
    @discardableResult
    func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw connection.error(rc, context: "step")
    }

    /// Ends the current execution early (after reading the rows wanted); cheap.
    func reset() { sqlite3_reset(handle) }

    /// Sets every parameter back to NULL (after `reset`, to run the statement again).
    func clearBindings() { sqlite3_clear_bindings(handle) }

    /// Steps to completion, for statements without results.
    func run() throws {
        while try step() {}
    }

    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    func int(_ column: Int32) -> Int { Int(clamping: sqlite3_column_int64(handle, column)) }
    /// A byte count as a row claims it, within 0...2^40: a damaged file's
    /// negative or huge size gives a clear error where it is used, never an
    /// overflow where sizes are added up.
    func byteCount(_ column: Int32) -> Int { Int(clamping: min(max(sqlite3_column_int64(handle, column), 0), 1 << 40)) }
    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    /// The text's bytes, all of them (a NUL does not end it).
    func string(_ column: Int32) -> String {
        guard let text = sqlite3_column_text(handle, column) else { return "" }
        return String(decoding: UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(handle, column))), as: UTF8.self)
    }
    func blob(_ column: Int32) -> [UInt8]? {
        if isNull(column) { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let pointer = sqlite3_column_blob(handle, column) else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: pointer, count: count))
    }
}

/// SQLite's process-wide setup, done as SyncEngine loads (`CSQLiteSetup`).
enum SQLiteLibrary {
    /// True when SQLite's allocation statistics (`SQLITE_CONFIG_MEMSTATUS`)
    /// are off for this process: then no allocation of any connection takes
    /// the process-wide mutex they are counted under. False when SQLite was
    /// already in use as SyncEngine loaded.
    static var allocationStatisticsOff: Bool { syncengine_sqlite_setup_result() == SQLITE_OK }
}
