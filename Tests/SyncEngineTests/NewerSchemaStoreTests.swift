import CSQLite
import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import Testing

/// A store file a newer build of the app wrote (its schema version past
/// `Schema.currentVersion`), opened by this older build (an app downgraded,
/// a backup restored to an older device): refused with `schema-too-new`,
/// and the file and its log are left as they were. The open switched the
/// file to WAL (and could checkpoint a newer build's log into it as it
/// closed) before it read the version.
@Suite(.timeLimit(.minutes(5))) struct NewerSchemaStoreTests {
    private func newerStore(_ folder: TempFolder, journalMode: String) async throws -> String {
        let path = folder.file("s.sqlite")
        let store = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("k"))))
        try await store.set(5, for: TestKeys.steps)
        store.close()
        try rawSQL(path, "PRAGMA journal_mode = \(journalMode); PRAGMA user_version = \(Schema.currentVersion + 1)")
        return path
    }

    private func expectRefusedUntouched(_ path: String, _ folder: TempFolder) throws {
        // SQLite's shared-memory index (`-shm`) may come and go: it holds no data.
        let listing = { try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasSuffix("-shm") }.sorted() }
        let files = try listing()
        let before = try files.map { try Data(contentsOf: URL(fileURLWithPath: folder.file($0))) }
        #expect {
            _ = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(),
                              options: StoreOptions(encryption: .keyFile(path: folder.file("k"))))
        } throws: { error in
            guard let error = error as? SyncError else { return false }
            return error.code == .schemaTooNew && error.message.contains("update the app")
        }
        #expect(try listing() == files, "files appeared or went beside the store")
        for (name, bytes) in zip(files, before) {
            #expect((try? Data(contentsOf: URL(fileURLWithPath: folder.file(name)))) == bytes, "\(name) changed")
        }
    }

    @Test func aNewerStoreInRollbackJournalModeIsRefusedUnchanged() async throws {
        let folder = TempFolder()
        let path = try await newerStore(folder, journalMode: "DELETE")
        try expectRefusedUntouched(path, folder)
        #expect(try RawDatabase(path: path).strings("PRAGMA journal_mode").first == "delete")
    }

    @Test func aNewerStoresLogIsLeftForTheNewerBuild() async throws {
        let folder = TempFolder()
        let path = try await newerStore(folder, journalMode: "WAL")
        // The newer build was stopped with a commit still in its log (no checkpoint).
        var handle: OpaquePointer?
        try #require(sqlite3_open(path, &handle) == SQLITE_OK)
        let db = try #require(handle)
        try #require(sqlite3_exec(db, "PRAGMA wal_autocheckpoint = 0; CREATE TABLE sync_newer(x); INSERT INTO sync_newer VALUES (1)", nil, nil, nil) == SQLITE_OK)
        let copy = TempFolder()
        for suffix in ["", "-wal"] { try FileManager.default.copyItem(atPath: path + suffix, toPath: copy.file("s.sqlite" + suffix)) }
        sqlite3_close(db)
        try FileManager.default.copyItem(atPath: folder.file("k"), toPath: copy.file("k"))
        try expectRefusedUntouched(copy.file("s.sqlite"), copy)
    }
}
