import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import Testing

/// Another program's SQLite file that happens to have a `sync_meta` table
/// and a schema version of its own (`PRAGMA user_version`), with no
/// `application_id`: it was taken for a store made before the id, switched
/// to WAL and migrated, which failed with SQLite's "no such column" (and at
/// version 12 it was stamped with our id). Now refused as another program's
/// file, untouched.
@Suite(.timeLimit(.minutes(5))) struct ForeignLookalikeFileTests {
    @Test(arguments: [1, 5, 11, Schema.currentVersion])
    func aFileWithOurMetaTableButNotOurSchemaIsRefusedUntouched(userVersion: Int) throws {
        let folder = TempFolder()
        let path = folder.file("notes.sqlite")
        try rawSQL(path, """
            CREATE TABLE sync_meta(name TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE entries(id INTEGER PRIMARY KEY, title TEXT);
            INSERT INTO entries(title) VALUES ('mine');
            PRAGMA user_version = \(userVersion)
            """)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect {
            _ = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(),
                              options: StoreOptions(encryption: .keyFile(path: folder.file("k"))))
        } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .notADatabase && error.message.contains("not a SyncEngine store") && error.message.contains("left untouched")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["notes.sqlite"])
    }
}
