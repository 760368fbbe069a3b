import CSQLite
import Foundation

/// `SQLITE_TRANSIENT` for Swift: tells SQLite to copy bound bytes.
let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// One SQLite connection with a cache of prepared statements.
///
/// Not thread-safe on its own: `Database` owns it inside a `Mutex`, and it
/// never escapes a `read`/`write` closure.
/// `@unchecked Sendable` because `Mutex.withLock` must hand it out as `sending`: the
/// Mutex in `Database` serializes every use, and it never escapes those closures.
final class SQLiteConnection: @unchecked Sendable {  // reason: serialized by Database's Mutex (see above)
    let handle: OpaquePointer
    let path: String
    private var statements: [String: OpaquePointer] = [:]

    init(path: String) throws {
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            throw SyncError(.database, "cannot open the store at \(path): \(message) (SQLite code \(rc)); check the path and its permissions")
        }
        handle = db
        self.path = path
        sqlite3_busy_timeout(db, 5_000)
        sqlite3_extended_result_codes(db, 1)
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
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

    var changes: Int { Int(sqlite3_changes(handle)) }

    /// A `SyncError` for a SQLite result code. Never includes bound values.
    func error(_ rc: Int32, context: String) -> SyncError {
        let message = String(cString: sqlite3_errmsg(handle))
        let primary = rc & 0xFF
        if primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT {
            return SyncError(.notADatabase, "the file at \(path) is not a valid SyncEngine store (\(message)); it was left untouched — move it aside or open another path")
        }
        return SyncError(.database, "SQLite \(context) failed: \(message) (code \(rc))")
    }
}

/// A prepared statement borrowed from the connection's cache.
struct Statement {
    let handle: OpaquePointer
    unowned let connection: SQLiteConnection

    func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(handle, index, value) }
    func bind(_ index: Int32, _ value: Int) { sqlite3_bind_int64(handle, index, Int64(value)) }
    func bind(_ index: Int32, _ value: String) { sqlite3_bind_text(handle, index, value, -1, sqliteTransient) }
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
    func int(_ column: Int32) -> Int { Int(sqlite3_column_int64(handle, column)) }
    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    func string(_ column: Int32) -> String {
        guard let text = sqlite3_column_text(handle, column) else { return "" }
        return String(cString: text)
    }
    func blob(_ column: Int32) -> [UInt8]? {
        if isNull(column) { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let pointer = sqlite3_column_blob(handle, column) else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: pointer, count: count))
    }
}
