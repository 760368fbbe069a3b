import CSQLite
import Foundation

/// A copy of a store file as a device backup holds it: every committed
/// transaction, read through a connection of its own (so a store that is
/// open and writing is copied whole, never torn), written as one file with
/// no log beside it. Neither its marker (`StoreOptions.renewsNodeIDWhenRestored`)
/// nor its encryption key file is copied. For the simulator's restored
/// devices and for tests.
@_spi(Testing) public enum StoreFileBackup {
    /// Copies the store at `source` (read through the SQLite VFS `vfs`, nil:
    /// the default) to a new file at `destination`, replacing any file there.
    public static func copy(_ source: String, vfs: String? = nil, to destination: String) throws {
        for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: destination + suffix) }
        var from: OpaquePointer?
        defer { sqlite3_close_v2(from) }
        guard sqlite3_open_v2(source, &from, SQLITE_OPEN_READONLY, vfs) == SQLITE_OK, let from else {
            throw SyncError(.database, "cannot open the store at \(source) to copy it (\(message(from)))")
        }
        sqlite3_busy_timeout(from, 5_000)
        var to: OpaquePointer?
        defer { sqlite3_close_v2(to) }
        guard sqlite3_open_v2(destination, &to, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK, let to else {
            throw SyncError(.database, "cannot create the copy at \(destination) (\(message(to)))")
        }
        guard let backup = sqlite3_backup_init(to, "main", from, "main") else {
            throw SyncError(.database, "cannot copy the store at \(source) (\(message(to)))")
        }
        let stepped = sqlite3_backup_step(backup, -1)
        let finished = sqlite3_backup_finish(backup)
        guard stepped == SQLITE_DONE, finished == SQLITE_OK else {
            throw SyncError(.database, "copying the store at \(source) failed (SQLite code \(stepped), \(message(to)))")
        }
    }

    private static func message(_ db: OpaquePointer?) -> String {
        db.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "out of memory"
    }
}
