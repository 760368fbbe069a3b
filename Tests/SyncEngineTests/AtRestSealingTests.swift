import CSQLite
import Foundation
@testable import SyncEngine
import Testing

/// The row of `key` in the store file at `path`, read with a connection of
/// its own: whether it is marked sealed, and its stored bytes.
private func storedRow(_ path: String, key: String) throws -> (encrypted: Bool, value: [UInt8])? {
    var handle: OpaquePointer?
    guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY, nil) == SQLITE_OK, let db = handle else {
        sqlite3_close(handle)
        throw SyncError(.database, "cannot open \(path)")
    }
    defer { sqlite3_close(db) }
    var stmt: OpaquePointer?
    guard sqlite3_prepare_v2(db, "SELECT encrypted, value FROM entries WHERE key = ?1", -1, &stmt, nil) == SQLITE_OK else {
        throw SyncError(.database, String(cString: sqlite3_errmsg(db)))
    }
    defer { sqlite3_finalize(stmt) }
    sqlite3_bind_text(stmt, 1, key, -1, unsafeBitCast(-1, to: sqlite3_destructor_type.self))
    guard sqlite3_step(stmt) == SQLITE_ROW else { return nil }
    let count = Int(sqlite3_column_bytes(stmt, 1))
    let value = count == 0 ? [] : [UInt8](UnsafeRawBufferPointer(start: sqlite3_column_blob(stmt, 1), count: count))
    return (sqlite3_column_int(stmt, 0) != 0, value)
}

@Suite(.timeLimit(.minutes(2))) struct AtRestSealingTests {
    /// An app update that declares an existing key `encrypted`: the value
    /// written before stays in plaintext in the file unless the store seals it.
    @Test func aKeyDeclaredEncryptedLaterIsSealedAtRest() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let marker = "PIN-\(UUID().uuidString)"
        let plain = Key<String>("vault:pin", default: "", policy: .never)
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([plain]))
        try await before.set(marker, for: plain)
        before.close()

        let sealed = Key<String>("vault:pin", default: "", policy: .never, security: .encrypted)
        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([sealed]),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        #expect(try await store.get(sealed) == marker)
        // The app writes the same value again: skipped as unchanged, it must still be sealed.
        try await store.set(marker, for: sealed)
        let row = try #require(try storedRow(path, key: "vault:pin"))
        #expect(row.encrypted, "the value of a key declared encrypted is kept in plaintext")
        #expect(!row.value.contains(subsequence: Array(marker.utf8)))
        store.close()
        let again = try SyncStore(path: path, role: .phone, registry: KeyRegistry([sealed]),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        #expect(try await again.get(sealed) == marker)
    }

    /// The same with values kept in files (`FileValueStore`): the file is sealed, at the same version.
    @Test func aValueFileOfAKeyDeclaredEncryptedLaterIsSealed() async throws {
        let folder = TempFolder()
        let directory = folder.file("blobs")
        let marker = "PIN-\(UUID().uuidString)"
        let plain = Key<String>("vault:pin", default: "", policy: .never)
        let before = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([plain]))
        try await before.set(marker, for: plain)
        let version = try #require(try before.syncStore.entryInfo(forKey: "vault:pin")).version
        before.close()

        let sealed = Key<String>("vault:pin", default: "", policy: .never, security: .encrypted)
        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        let store = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([sealed]), options: options)
        #expect(try await store.get(sealed) == marker)
        #expect(try store.syncStore.entryInfo(forKey: "vault:pin")?.version == version)
        let files = try FileManager.default.contentsOfDirectory(atPath: directory + "/values")
        #expect(files.count == 1)
        for name in files {
            let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: directory + "/values/" + name)))
            #expect(!bytes.contains(subsequence: Array(marker.utf8)), "the value file of a key declared encrypted is in plaintext")
        }
        store.close()
        let again = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([sealed]), options: options)
        #expect(try await again.get(sealed) == marker)
    }
}
