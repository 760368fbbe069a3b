import CSQLite
import Foundation
import SyncEngine

/// An empty store file with the current schema, made once per process: a
/// simulated device's new store starts as a copy of it, so scenarios do not
/// each pay for creating the schema (its DDL was about 17 % of `syncsim fuzz`).
///
/// The copy holds no rows at all, so `SyncStore` opens it as a new store and
/// gives it its node id, role and salt, as it does for a file it creates.
enum StoreTemplate {
    /// The template's bytes; nil if it could not be made (stores are then created as usual).
    static let bytes: Data? = try? make()

    /// Writes a copy of the template at `path` unless a file is already there.
    static func install(at path: String) {
        guard let bytes, !FileManager.default.fileExists(atPath: path) else { return }
        _ = FileManager.default.createFile(atPath: path, contents: bytes)
    }

    private static func make() throws -> Data {
        let folder = NSTemporaryDirectory() + "syncsim-template-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/template.sqlite"
        var options = StoreOptions()
        options.externalChangePollInterval = nil
        do {
            let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry(descriptors: []), options: options)
            store.close()
        }
        try emptyEveryTable(path: path)
        return try Data(contentsOf: URL(fileURLWithPath: path))
    }

    /// Deletes the rows the first open wrote (whatever the tables), compacts the
    /// file and checkpoints the WAL into it, so the main file holds everything.
    private static func emptyEveryTable(path: String) throws {
        var db: OpaquePointer?
        guard sqlite3_open(path, &db) == SQLITE_OK, let db else { throw TemplateError("cannot open the store template") }
        defer { sqlite3_close(db) }
        var tables: [String] = []
        var stmt: OpaquePointer?
        guard sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'table'", -1, &stmt, nil) == SQLITE_OK else {
            throw TemplateError("cannot list the template's tables")
        }
        while sqlite3_step(stmt) == SQLITE_ROW { tables.append(String(cString: sqlite3_column_text(stmt, 0))) }
        sqlite3_finalize(stmt)
        for table in tables {
            let quoted = "\"" + table.replacingOccurrences(of: "\"", with: "\"\"") + "\""
            guard sqlite3_exec(db, "DELETE FROM \(quoted)", nil, nil, nil) == SQLITE_OK else {
                throw TemplateError("cannot empty \(table) in the store template")
            }
        }
        guard sqlite3_exec(db, "VACUUM", nil, nil, nil) == SQLITE_OK else { throw TemplateError("cannot compact the store template") }
        var logFrames: Int32 = 0, checkpointed: Int32 = 0
        guard sqlite3_wal_checkpoint_v2(db, nil, SQLITE_CHECKPOINT_TRUNCATE, &logFrames, &checkpointed) == SQLITE_OK,
              logFrames == checkpointed else {
            throw TemplateError("cannot checkpoint the store template")
        }
    }
}

private struct TemplateError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
