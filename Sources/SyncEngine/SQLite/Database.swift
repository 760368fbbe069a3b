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
    let path: String

    /// Opens (or creates) the file, checks that it is SQLite, switches to WAL
    /// and migrates the schema forward. A non-SQLite or corrupt file throws
    /// `.notADatabase` and is left untouched.
    init(path: String) throws {
        try Database.checkHeader(path: path)
        let conn = try SQLiteConnection(path: path)
        do {
            try conn.execute("SELECT count(*) FROM sqlite_master")
        } catch {
            throw SyncError(.notADatabase, "the file at \(path) is not a valid SyncEngine store; it was left untouched — move it aside or open another path")
        }
        try conn.execute("PRAGMA journal_mode=WAL")
        try conn.execute("PRAGMA synchronous=NORMAL")
        try conn.execute("PRAGMA cache_size=-8192")
        try conn.execute("PRAGMA foreign_keys=ON")
        try Schema.migrate(conn)
        self.path = path
        checkpointer = BackgroundCheckpointer(path: path)
        checkpointer.attach(to: conn.handle)
        self.connection = Mutex(conn)
    }

    deinit {
        connection.withLock { checkpointer.detach(from: $0.handle) }
        checkpointer.stop()
    }

    /// Refuses files that exist, are non-empty and lack the SQLite header,
    /// before SQLite gets a chance to touch them.
    private static func checkHeader(path: String) throws {
        guard let handle = FileHandle(forReadingAtPath: path) else { return }
        defer { try? handle.close() }
        let header = (try? handle.read(upToCount: 16)) ?? Data()
        if header.isEmpty { return }
        if header.count < 16 || header != Data("SQLite format 3\0".utf8) {
            throw SyncError(.notADatabase, "the file at \(path) is not a SQLite database; it was left untouched — move it aside or open another path")
        }
    }

    /// Runs `body` with the connection, outside a transaction.
    func read<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        try connection.withLock { conn in try body(conn) }
    }

    /// Runs `body` in one immediate transaction; everything or nothing.
    /// `onCommit` runs after COMMIT succeeded, still under the lock, so cache
    /// updates are ordered with the writes they mirror.
    func write<T: Sendable>(_ body: (SQLiteConnection) throws -> T, onCommit: (T) -> Void = { _ in }) throws -> T {
        let observer = self.observer.withLock { $0.value }
        let result = try connection.withLock { conn in
            let result: T
            do {
                result = try conn.transaction {
                    try observer?.transactionBegan(conn)
                    let result = try body(conn)
                    try observer?.transactionWillCommit(conn)
                    return result
                }
            } catch {
                observer?.transactionEnded(committed: false)
                observer?.transactionUnlocked()
                throw error
            }
            observer?.transactionEnded(committed: true)
            onCommit(result)
            return result
        }
        observer?.transactionUnlocked()
        return result
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
