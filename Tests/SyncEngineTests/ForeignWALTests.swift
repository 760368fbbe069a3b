import CSQLite
import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import Testing

/// A store whose `-wal` file came from another database (a copy put beside
/// it): SQLite reads that log's pages over the store's, and the open said
/// the store itself was "a SQLite database of another program". Now it is
/// still refused untouched, and the message points at the `-wal` file.
@Suite(.timeLimit(.minutes(5))) struct ForeignWALTests {
    @Test func aStoreWithAnotherDatabasesLogIsRefusedNamingTheLog() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let options = StoreOptions(encryption: .keyFile(path: folder.file("k")))
        try await closedStoreWithOneValue(at: path, options: options)
        // Another database's log, its commit never checkpointed.
        let other = TempFolder()
        var handle: OpaquePointer?
        try #require(sqlite3_open(other.file("o.sqlite"), &handle) == SQLITE_OK)
        let db = try #require(handle)
        try #require(sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(5000))", nil, nil, nil) == SQLITE_OK)
        try FileManager.default.copyItem(atPath: other.file("o.sqlite-wal"), toPath: path + "-wal")
        sqlite3_close(db)
        let store = try Data(contentsOf: URL(fileURLWithPath: path)), log = try Data(contentsOf: URL(fileURLWithPath: path + "-wal"))
        #expect {
            _ = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: options)
        } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .notADatabase && error.message.contains("\(path)-wal") && error.message.contains("left untouched")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == store)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path + "-wal")) == log)
    }
}
