import CSQLite

/// One small SQLite commit at a time through the C API, set up as a store's
/// connection is by default (WAL, `synchronous=NORMAL`, 8 MB page cache), for
/// the floor under write→visible in `syncsim bench sync`: a commit on each
/// side and the loopback between them. Used by one thread at a time.
/// `@_spi(Benchmarks)`: not part of the stable API.
@_spi(Benchmarks)
public final class RawCommitBaseline {
    private let db: OpaquePointer
    private let upsert: OpaquePointer

    /// Opens (creating) the database at `path` with a one-table layout.
    public init(path: String) throws {
        var handle: OpaquePointer?
        guard sqlite3_open(path, &handle) == SQLITE_OK, let handle else {
            sqlite3_close(handle)
            throw SyncError(.database, "cannot open \(path)")
        }
        let setup = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-8192; "
            + "CREATE TABLE IF NOT EXISTS t(key TEXT PRIMARY KEY, value BLOB) WITHOUT ROWID"
        var statement: OpaquePointer?
        guard sqlite3_exec(handle, setup, nil, nil, nil) == SQLITE_OK,
              sqlite3_prepare_v2(handle, "INSERT INTO t(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                                 -1, &statement, nil) == SQLITE_OK, let statement else {
            let message = String(cString: sqlite3_errmsg(handle))
            sqlite3_close(handle)
            throw SyncError(.database, "cannot set up \(path): \(message)")
        }
        db = handle
        upsert = statement
    }

    deinit {
        sqlite3_finalize(upsert)
        sqlite3_close(db)
    }

    /// Writes `value` under `key` in a transaction of its own (autocommit).
    public func commit(_ value: [UInt8], key: String) throws {
        sqlite3_reset(upsert)
        sqlite3_bind_text(upsert, 1, key, -1, sqliteTransient)
        value.withUnsafeBytes { _ = sqlite3_bind_blob(upsert, 2, $0.baseAddress, Int32($0.count), sqliteTransient) }
        guard sqlite3_step(upsert) == SQLITE_DONE else {
            throw SyncError(.database, "raw commit failed: \(String(cString: sqlite3_errmsg(db)))")
        }
    }
}
