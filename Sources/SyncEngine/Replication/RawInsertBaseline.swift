import CSQLite
import Foundation

// The machine's own SQLite insert limit, for benchmarks that report against
// it (`syncsim bench store|sync`). `@_spi(Benchmarks)`: not part of the stable API.

@_spi(Benchmarks)
public enum RawInsertBaseline {
    /// The fastest of `runs` raw inserts of `values` (each into a new file
    /// `path`-N, removed afterwards), so one run slowed by a neighbour does
    /// not flatter the ratios measured against it. Seconds.
    public static func fastestSeconds(path: String, values: [[UInt8]], runs: Int = 3) throws -> Double {
        var fastest = Double.infinity
        for run in 0..<max(1, runs) {
            let file = "\(path)-\(run)"
            fastest = min(fastest, try seconds(path: file, values: values))
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: file + suffix) }
        }
        return fastest
    }

    /// Seconds to insert `values` under keys `bench:k<i>` with the C API: a new
    /// table in WAL mode (`synchronous=NORMAL`), one prepared statement, one transaction.
    public static func seconds(path: String, values: [[UInt8]]) throws -> Double {
        var db: OpaquePointer?
        guard sqlite3_open(path, &db) == SQLITE_OK else {
            sqlite3_close(db)
            throw SyncError(.database, "cannot open \(path)")
        }
        defer { sqlite3_close(db) }
        sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE t(key TEXT PRIMARY KEY, value BLOB) WITHOUT ROWID", nil, nil, nil)
        var stmt: OpaquePointer?
        sqlite3_prepare_v2(db, "INSERT INTO t(key, value) VALUES(?, ?)", -1, &stmt, nil)
        defer { sqlite3_finalize(stmt) }
        let start = ContinuousClock.now
        sqlite3_exec(db, "BEGIN", nil, nil, nil)
        for (i, value) in values.enumerated() {
            sqlite3_reset(stmt)
            sqlite3_bind_text(stmt, 1, "bench:k\(i)", -1, sqliteTransient)
            value.withUnsafeBytes { _ = sqlite3_bind_blob(stmt, 2, $0.baseAddress, Int32($0.count), sqliteTransient) }
            sqlite3_step(stmt)
        }
        sqlite3_exec(db, "COMMIT", nil, nil, nil)
        let elapsed = (ContinuousClock.now - start).components
        return Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
    }
}

extension RawInsertBaseline {
    /// The fastest of `runs` inserts of the same rows through the C API into
    /// a new store file's own `entries` table (schema, indexes and all, as
    /// `Schema` makes it), with the columns a local write fills: what SQLite
    /// alone costs for the store's row layout, without any of the store's
    /// own work. Seconds.
    @_spi(Benchmarks)
    public static func fastestStoreLayoutSeconds(path: String, values: [[UInt8]], runs: Int = 3) throws -> Double {
        var fastest = Double.infinity
        for run in 0..<max(1, runs) {
            let file = "\(path)-\(run)"
            fastest = min(fastest, try storeLayoutSeconds(path: file, values: values))
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: file + suffix) }
        }
        return fastest
    }

    static func storeLayoutSeconds(path: String, values: [[UInt8]]) throws -> Double {
        let conn = try SQLiteConnection(path: path)
        try conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-8192")
        try Schema.migrate(conn)
        var stmt: OpaquePointer?
        sqlite3_prepare_v2(conn.handle, """
            INSERT INTO entries(key, value, encoding, ver, node, base_ver, base_node, deleted, encrypted, size, change_seq, lane, written_at, in_file, origin_peer)
            VALUES(?, ?, 'json', ?, ?, 0, 0, 0, 0, ?, ?, 1, ?, 0, 0)
            """, -1, &stmt, nil)
        defer { sqlite3_finalize(stmt) }
        let version = Int64(1_700_000_000_000) << 16
        let start = ContinuousClock.now
        sqlite3_exec(conn.handle, "BEGIN", nil, nil, nil)
        for (i, value) in values.enumerated() {
            sqlite3_reset(stmt)
            sqlite3_bind_text(stmt, 1, "bench:k\(i)", -1, sqliteTransient)
            value.withUnsafeBytes { _ = sqlite3_bind_blob(stmt, 2, $0.baseAddress, Int32($0.count), sqliteTransient) }
            sqlite3_bind_int64(stmt, 3, version + Int64(i))
            sqlite3_bind_int64(stmt, 4, 12_345)
            sqlite3_bind_int64(stmt, 5, Int64(value.count))
            sqlite3_bind_int64(stmt, 6, Int64(i + 1))
            sqlite3_bind_int64(stmt, 7, 1_700_000_000_000)
            sqlite3_step(stmt)
        }
        sqlite3_exec(conn.handle, "COMMIT", nil, nil, nil)
        let elapsed = (ContinuousClock.now - start).components
        return Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
    }
}

extension WriteBatch {
    /// An empty batch for `store`'s keys, to time collecting writes apart
    /// from committing them (`syncsim bench store`).
    @_spi(Benchmarks)
    public static func detached(for store: SyncStore) -> WriteBatch { WriteBatch(registry: store.registry) }

    /// How many writes the batch holds.
    @_spi(Benchmarks)
    public var writeCount: Int { count }
}
