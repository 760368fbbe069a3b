import CSQLite
import Foundation
@testable import SyncEngine
import Testing

/// A key declared `encrypted` by an app update had its value sealed at open,
/// but the plaintext stayed in the store's files: in the free space its cells
/// left, in freed overflow pages (a large value) and in the WAL, until
/// overwritten (`secure_delete` is off). After the open that seals, and after
/// the close, no byte sequence of the plaintext is anywhere in the folder.
@Suite(.timeLimit(.minutes(2))) struct SealedPlaintextScrubTests {
    /// The files under `folder` (recursively) whose bytes hold `marker`.
    static func files(in folder: String, holding marker: String) throws -> [String] {
        let needle = Data(marker.utf8)
        var found: [String] = []
        let enumerator = FileManager.default.enumerator(atPath: folder)
        while let name = enumerator?.nextObject() as? String {
            let path = folder + "/" + name
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
            if try Data(contentsOf: URL(fileURLWithPath: path)).range(of: needle) != nil { found.append(name) }
        }
        return found
    }

    /// A value of about 300 KB (many overflow pages), every segment holding `marker`.
    static func largeValue(_ marker: String) -> String {
        (0..<6_000).map { "\(marker)-\($0)-\(UInt64.random(in: 0...UInt64.max))" }.joined(separator: " ")
    }

    @Test func noPlaintextOfSealedValuesStaysInTheStoreFiles() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let small = "PIN-\(UUID().uuidString)"
        let earlier = "OLDPIN-\(UUID().uuidString)"
        let large = "BLOB-\(UUID().uuidString)"
        let pin = Key<String>("vault:pin", default: "", policy: .never)
        let blob = Key<String>("vault:blob", default: "", policy: .never)
        let other = Key<Int>("counter", default: 0, policy: .never)
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([pin, blob, other]))
        try await before.set(earlier, for: pin)
        try await before.set(small, for: pin)
        let largeValue = Self.largeValue(large)
        try await before.set(largeValue, for: blob)
        for i in 1...50 { try await before.set(i, for: other) }
        before.close()
        #expect(try !Self.files(in: folder.path, holding: large).isEmpty, "the test's marker is not in the file to begin with")

        let sealedPin = Key<String>("vault:pin", default: "", policy: .never, security: .encrypted)
        let sealedBlob = Key<String>("vault:blob", default: "", policy: .never, security: .encrypted)
        let registry = try KeyRegistry([sealedPin, sealedBlob, other])
        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        let store = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        for marker in [small, earlier, large] {
            #expect(try Self.files(in: folder.path, holding: marker) == [], "plaintext \(marker.prefix(6)) is in the store's files after the open that sealed it")
        }
        #expect(try await store.get(sealedPin) == small)
        #expect(try await store.get(sealedBlob) == largeValue)
        try await store.set(51, for: other)
        store.close()
        for marker in [small, earlier, large] {
            #expect(try Self.files(in: folder.path, holding: marker) == [], "plaintext \(marker.prefix(6)) is in the store's files after the close")
        }
        // The scrub is done once: the next open has nothing to do, and the values read as before.
        let again = try SyncStore(path: path, role: .phone, registry: registry, options: options)
        #expect(try again.meta(SyncStore.scrubPendingMeta) == nil)
        #expect(try await again.get(sealedBlob) == largeValue)
        #expect(try await again.get(other) == 51)
        again.close()
    }

    /// A scrub cut short (a full disk, a crash after the seal committed) is
    /// marked in the file, and the next open does it: freed pages that still
    /// held old bytes (freed with `secure_delete` off, SQLite's usual default)
    /// are gone, and the mark with them.
    @Test func aPendingScrubRunsAtTheNextOpen() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let large = "BLOB-\(UUID().uuidString)"
        let blob = Key<String>("vault:blob", default: "", policy: .never)
        let pin = Key<String>("vault:pin", default: "", policy: .never)
        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([blob, pin]))
        try await store.set(Self.largeValue(large), for: blob)
        try await store.set("1234", for: pin)
        store.close()
        var db: OpaquePointer?
        #expect(sqlite3_open(path, &db) == SQLITE_OK)
        for sql in ["PRAGMA secure_delete=OFF", "DELETE FROM entries WHERE key = 'vault:blob'",
                    "INSERT INTO sync_meta(name, value) VALUES ('\(SyncStore.scrubPendingMeta)', '1')"] {
            #expect(sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK, "\(sql)")
        }
        sqlite3_close(db)
        #expect(try !Self.files(in: folder.path, holding: large).isEmpty, "the freed pages do not hold the removed value")

        let again = try SyncStore(path: path, role: .phone, registry: KeyRegistry([blob, pin]))
        #expect(try Self.files(in: folder.path, holding: large) == [])
        #expect(try again.meta(SyncStore.scrubPendingMeta) == nil)
        #expect(try await again.get(blob) == "")
        #expect(try await again.get(pin) == "1234")
        again.close()
    }

    /// A value of a key declared encrypted that does not read (its file is
    /// gone) is not sealed, and is found again at every open: it must not
    /// make every open rewrite the file (VACUUM bumps the schema cookie).
    @Test func aValueThatDoesNotReadDoesNotRewriteTheFileAtEveryOpen() async throws {
        let folder = TempFolder()
        let directory = folder.file("blobs")
        let pin = Key<String>("vault:pin", default: "", policy: .never)
        let before = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([pin]))
        try await before.set("1234", for: pin)
        before.close()
        for name in try FileManager.default.contentsOfDirectory(atPath: directory + "/values") {
            try FileManager.default.removeItem(atPath: directory + "/values/" + name)
        }
        func schemaVersion() throws -> Int32 {
            var db: OpaquePointer?
            defer { sqlite3_close(db) }
            guard sqlite3_open(directory + "/metadata.sqlite", &db) == SQLITE_OK else { throw SyncError(.database, "open") }
            var stmt: OpaquePointer?
            defer { sqlite3_finalize(stmt) }
            guard sqlite3_prepare_v2(db, "PRAGMA schema_version", -1, &stmt, nil) == SQLITE_OK, sqlite3_step(stmt) == SQLITE_ROW else {
                throw SyncError(.database, "schema_version")
            }
            return sqlite3_column_int(stmt, 0)
        }
        let sealed = Key<String>("vault:pin", default: "", policy: .never, security: .encrypted)
        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        var versions: [Int32] = []
        for _ in 0..<2 {
            let store = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([sealed]), options: options)
            #expect(try store.syncStore.meta(SyncStore.scrubPendingMeta) == nil)
            store.close()
            versions.append(try schemaVersion())
        }
        #expect(versions[0] == versions[1], "an open with nothing to seal rewrote the store file")
    }

    /// Values kept in files (`FileValueStore`): the sealed file replaces the
    /// plaintext one, and nothing else in the folder keeps the plaintext.
    @Test func noPlaintextOfSealedValuesStaysInAFileValueStore() async throws {
        let folder = TempFolder()
        let directory = folder.file("blobs")
        let small = "PIN-\(UUID().uuidString)"
        let large = "BLOB-\(UUID().uuidString)"
        let pin = Key<String>("vault:pin", default: "", policy: .never)
        let blob = Key<String>("vault:blob", default: "", policy: .never)
        let before = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([pin, blob]))
        try await before.set(small, for: pin)
        try await before.set(Self.largeValue(large), for: blob)
        before.close()

        let sealedPin = Key<String>("vault:pin", default: "", policy: .never, security: .encrypted)
        let sealedBlob = Key<String>("vault:blob", default: "", policy: .never, security: .encrypted)
        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        let store = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([sealedPin, sealedBlob]), options: options)
        #expect(try await store.get(sealedPin) == small)
        for marker in [small, large] { #expect(try Self.files(in: folder.path, holding: marker) == []) }
        store.close()
        for marker in [small, large] { #expect(try Self.files(in: folder.path, holding: marker) == []) }
    }

    /// Removing or overwriting a value of a key that was encrypted from the
    /// start frees only sealed bytes: no plaintext to scrub, and no scrub runs.
    @Test func valuesOfKeysEncryptedFromTheStartNeverReachTheFileInPlaintext() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let first = "PIN-\(UUID().uuidString)"
        let large = "BLOB-\(UUID().uuidString)"
        let pin = Key<String>("vault:pin", default: "", policy: .never, security: .encrypted)
        let blob = Key<String>("vault:blob", default: "", policy: .never, security: .encrypted)
        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([pin, blob]), options: options)
        try await store.set(first, for: pin)
        try await store.set(Self.largeValue(large), for: blob)
        try await store.set("PIN-\(UUID().uuidString)", for: pin)
        try await store.remove(blob)
        for marker in [first, large] { #expect(try Self.files(in: folder.path, holding: marker) == []) }
        #expect(try store.meta(SyncStore.scrubPendingMeta) == nil)
        store.close()
        for marker in [first, large] { #expect(try Self.files(in: folder.path, holding: marker) == []) }
    }
}
