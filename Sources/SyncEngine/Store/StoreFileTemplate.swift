import CSQLite
import Foundation

/// An empty store file with the current schema, for programs that create
/// many stores (the simulator makes two or more per scenario, thousands a
/// run): a copy skips creating the schema and running its migrations.
///
/// The copy holds no rows at all, so `SyncStore` opens it as a new store and
/// gives it its node id, role and salt, as it does for a file it creates.
public struct StoreFileTemplate: Sendable {
    /// The file's bytes (the whole database: its log is checkpointed into it).
    public let bytes: [UInt8]

    /// Makes the template: creates a store in a temporary folder, empties every table, compacts it.
    public init(temporaryDirectory: String = NSTemporaryDirectory()) throws {
        let folder = (temporaryDirectory as NSString).appendingPathComponent("syncengine-template-" + UUID().uuidString)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/template.sqlite"
        var options = StoreOptions()
        options.externalChangePollInterval = nil
        do {
            let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry(descriptors: []), options: options)
            store.close()
        }
        try StoreFileTemplate.emptyEveryTable(path: path)
        bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    /// Writes a copy at `path` unless a file is already there; true if it wrote one.
    @discardableResult
    public func install(at path: String) -> Bool {
        guard !FileManager.default.fileExists(atPath: path) else { return false }
        return FileManager.default.createFile(atPath: path, contents: Data(bytes))
    }

    /// Deletes the rows the first open wrote (whatever the tables), compacts the
    /// file and checkpoints the WAL into it, so the main file holds everything.
    private static func emptyEveryTable(path: String) throws {
        let conn = try SQLiteConnection(path: path)
        var tables: [String] = []
        let list = try conn.statement("SELECT name FROM sqlite_master WHERE type = 'table'")
        while try list.step() { tables.append(list.string(0)) }
        list.reset()
        for table in tables {
            try conn.execute("DELETE FROM \"\(table.replacingOccurrences(of: "\"", with: "\"\""))\"")
        }
        try conn.execute("VACUUM")
        var logFrames: Int32 = 0, checkpointed: Int32 = 0
        let rc = sqlite3_wal_checkpoint_v2(conn.handle, nil, SQLITE_CHECKPOINT_TRUNCATE, &logFrames, &checkpointed)
        guard rc == SQLITE_OK, logFrames == checkpointed else { throw conn.error(rc, context: "checkpoint the store template") }
    }
}
