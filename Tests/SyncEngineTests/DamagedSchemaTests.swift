import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import Testing

/// A store of ours whose schema lost a table or a column (a bad tool, an
/// edit by hand): it opened, or failed with SQLite's "no such table", and
/// with a column gone every read and write failed with "SQLite prepare
/// failed: no such column" (a `database` error). Now the open says the
/// store is damaged, naming what is missing, and writes nothing.
@Suite(.timeLimit(.minutes(5))) struct DamagedSchemaTests {
    @Test(arguments: [
        ("ALTER TABLE entries DROP COLUMN origin_peer", "origin_peer"),
        ("DROP TABLE sync_peers", "sync_peers"),
        ("DROP TABLE sync_chunks; CREATE TABLE sync_chunks(a)", "sync_chunks"),
    ])
    func aStoreMissingATableOrColumnIsADamagedStore(damage: String, missing: String) async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let options = StoreOptions(encryption: .keyFile(path: folder.file("k")))
        try await closedStoreWithOneValue(at: path, options: options)
        try rawSQL(path, damage)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect {
            _ = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: options)
        } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .databaseCorrupt && error.message.contains(missing) && error.message.contains("left untouched")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
    }
}
