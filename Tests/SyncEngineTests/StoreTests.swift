import CSQLite
import Foundation
@testable import SyncEngine
import Testing

@Suite struct StoreTests {
    /// A device needs a master key only for the encrypted keys it can hold:
    /// a registry shared by phone and watch may declare an encrypted
    /// phoneOnly key, which a watch never stores.
    @Test func aWatchNeedsNoMasterKeyForAnEncryptedPhoneOnlyKey() async throws {
        let folder = TempFolder()
        let phoneToken = Key<String>("vault:token", default: "", availability: .phoneOnly, policy: .never, security: .encrypted)
        let shared = Key<String>("vault:sharedSecret", default: "", availability: .phoneWithWatchSync, policy: .automaticSmall,
                                 security: .encrypted)
        let watch = try SyncStore(path: folder.file("watch.sqlite"), role: .watch,
                                  registry: try KeyRegistry([TestKeys.steps, phoneToken]))
        try await watch.set(3, for: TestKeys.steps)
        #expect(try await watch.get(TestKeys.steps) == 3)
        await #expect(throws: SyncError.self) { try await watch.set("t", for: phoneToken) }
        watch.close()
        // The phone holds that key: it still needs its master key, and so does a watch for a key it receives.
        #expect { _ = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: try KeyRegistry([phoneToken])) }
            throws: { ($0 as? SyncError)?.code == .encryptionKeyMissing }
        #expect { _ = try SyncStore(path: folder.file("watch2.sqlite"), role: .watch, registry: try KeyRegistry([shared])) }
            throws: { ($0 as? SyncError)?.code == .encryptionKeyMissing }
    }

    @Test func typedRoundTripAndDefaults() async throws {
        let pair = try Pair()
        let store = pair.phone
        #expect(try await store.get(TestKeys.steps) == 0)
        try await store.set(1234, for: TestKeys.steps)
        try await store.set("Ada", for: TestKeys.name)
        try await store.set(Data([1, 2, 3]), for: TestKeys.blob)
        #expect(try await store.get(TestKeys.steps) == 1234)
        #expect(try await store.get(TestKeys.name) == "Ada")
        #expect(try await store.get(TestKeys.blob) == Data([1, 2, 3]))
        try await store.remove(TestKeys.steps)
        #expect(try await store.get(TestKeys.steps) == 0)
        #expect(try store.entryInfo(forKey: "health:daily:steps")?.isDeleted == true)
    }

    @Test func namespacedNames() {
        #expect(TestKeys.steps.name == "health:daily:steps")
        #expect(TestKeys.daily["2026-11-22"].name == "steps:day:2026-11-22")
    }

    @Test func optionalStoredNilIsNotAbsent() async throws {
        let maybe = Key<Int?>("maybe", default: 5)
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([maybe]))
        #expect(try store.storedValue(for: maybe) == nil)  // absent
        #expect(try await store.get(maybe) == 5)
        try await store.set(nil, for: maybe)
        let stored = try store.storedValue(for: maybe)
        #expect(stored != nil)  // present ...
        #expect(stored! == nil)  // ... and nil
        #expect(try await store.get(maybe) == nil)
    }

    @Test func serializers() async throws {
        struct Profile: Codable, Sendable, Equatable { var name: String; var age: Int }
        let plist = Key<Profile>("plist", default: Profile(name: "", age: 0), serializer: .binaryPropertyList)
        let text = Key<String>("text", default: "", serializer: .string)
        let custom = Key<Int>("custom", default: 0, serializer: ValueSerializer(identifier: "decimal", encode: { Array(String($0).utf8) },
                                                                               decode: { Int(String(decoding: $0, as: UTF8.self))! }))
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([plist, text, custom]))
        try await store.set(Profile(name: "Ada", age: 36), for: plist)
        try await store.set("héllo", for: text)
        try await store.set(42, for: custom)
        #expect(try store.rawValue(forKey: "text") == Array("héllo".utf8))
        #expect(try store.rawValue(forKey: "custom") == Array("42".utf8))
        // Fresh store on the same file: decoded from disk, not the cache.
        store.close()
        let reopened = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([plist, text, custom]))
        #expect(try await reopened.get(plist) == Profile(name: "Ada", age: 36))
        #expect(try await reopened.get(text) == "héllo")
        #expect(try await reopened.get(custom) == 42)
    }

    @Test func duplicateKeyNamesBothDeclarations() {
        let a = Key<Int>("dup", default: 0)
        let b = Key<String>("dup", default: "", policy: .manual)
        #expect {
            _ = try KeyRegistry([a, b])
        } throws: { error in
            let e = error as! SyncError
            return e.code == .duplicateKey && e.message.contains("Int") && e.message.contains("String") && e.message.contains("manual")
        }
    }

    @Test func availabilityRefusesWritesAndChangesNothing() async throws {
        let pair = try Pair()
        await #expect(throws: SyncError.self) { try await pair.watch.set("x", for: TestKeys.token) }
        await #expect(throws: SyncError.self) { try await pair.watch.set("imperial", for: TestKeys.units) }
        await #expect(throws: SyncError.self) { try await pair.phone.set("x", for: TestKeys.watchFace) }
        do {
            try await pair.watch.set("imperial", for: TestKeys.units)
        } catch let error as SyncError {
            #expect(error.code == .writeNotAllowed)
            #expect(error.message.contains("units") && error.message.contains("watch"))
        }
        #expect(try pair.watch.allEntryInfo().isEmpty)
        try await pair.phone.set("x", for: TestKeys.token)
        try await pair.watch.set("analog", for: TestKeys.watchFace)
    }

    @Test func batchIsOneTransaction() async throws {
        let pair = try Pair()
        await #expect(throws: SyncError.self) {
            try await pair.phone.batch { batch in
                try batch.set(1, for: TestKeys.steps)
                try batch.set("x", for: TestKeys.watchFace)  // refused: whole batch rolls back
            }
        }
        #expect(try pair.phone.entryInfo(forKey: TestKeys.steps.name) == nil)
        try await pair.phone.batch { batch in
            try batch.set(1, for: TestKeys.steps)
            try batch.set("Ada", for: TestKeys.name)
        }
        #expect(try await pair.phone.get(TestKeys.steps) == 1)
        try await pair.phone.clear()
        #expect(try await pair.phone.get(TestKeys.name) == "")
    }

    @Test func cacheStatisticsAndSkippedWrites() async throws {
        let pair = try Pair()
        let store = pair.phone
        _ = try await store.get(TestKeys.steps)  // miss, caches absence
        _ = try await store.get(TestKeys.steps)  // hit (cached absence)
        try await store.set(3, for: TestKeys.steps)
        _ = try await store.get(TestKeys.steps)  // hit (write-through)
        var stats = store.cacheStatistics
        #expect(stats.misses == 1 && stats.hits == 2)
        let before = try store.entryInfo(forKey: TestKeys.steps.name)!.version
        let changes = store.changes(for: TestKeys.steps)
        try await store.set(3, for: TestKeys.steps)  // identical bytes: skipped
        stats = store.cacheStatistics
        #expect(stats.skippedWrites == 1)
        #expect(try store.entryInfo(forKey: TestKeys.steps.name)!.version == before)
        try await store.set(4, for: TestKeys.steps)
        let change = try await first(of: changes, "the change event of the second write")
        #expect(change.version != before)  // the skipped write produced no event: the first is the 4
        #expect(stats.hitRate > 0.6)
        store.resetCacheStatistics()
        #expect(store.cacheStatistics == CacheStatistics())
    }

    @Test func observationByKeyNamespaceAndAll() async throws {
        let pair = try Pair()
        let store = pair.phone
        let byKey = store.changes(for: TestKeys.name)
        let byNamespace = store.changes(in: Namespace("health"))
        let all = store.changes()
        try await store.set(1, for: TestKeys.steps)
        try await store.set("Ada", for: TestKeys.name)
        #expect(try await first(of: byKey, "a change of the key").key == "profile:name")
        #expect(try await first(of: byNamespace, "a change in the namespace").key == "health:daily:steps")
        let firstAll = try await first(of: all, "the first change")
        #expect(firstAll.key == "health:daily:steps" && firstAll.origin == .local)
        #expect(try await first(of: all, "the second change").key == "profile:name")
    }

    @Test func commitHooks() async throws {
        let pair = try Pair()
        let seen = Recorder()
        pair.phone.addWillCommitHook { changes in
            if changes.contains(where: { $0.key == "profile:name" }) { throw SyncError(.invalidConfiguration, "vetoed") }
        }
        pair.phone.addDidCommitHook { changes in seen.add(changes.map(\.key)) }
        try await pair.phone.set(1, for: TestKeys.steps)
        await #expect(throws: SyncError.self) { try await pair.phone.set("x", for: TestKeys.name) }
        #expect(try await pair.phone.get(TestKeys.name) == "")
        #expect(seen.values == [["health:daily:steps"]])
    }

    @Test func legacyKeyMigratesOnFirstRead() async throws {
        let folder = TempFolder()
        let old = Key<Int>("old:steps", default: 0)
        let store1 = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([old]))
        try await store1.set(77, for: old)
        store1.close()
        let new = Key<Int>("steps", default: 0, legacyName: "old:steps")
        let store2 = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([new]))
        #expect(try await store2.get(new) == 77)
        #expect(try store2.entryInfo(forKey: "old:steps") == nil)
        #expect(try store2.entryInfo(forKey: "steps")?.isDeleted == false)
    }

    @Test func typeMismatchIsAnError() async throws {
        let folder = TempFolder()
        let asInt = Key<Int>("k", default: 0)
        let store1 = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([asInt]))
        try await store1.set(5, for: asInt)
        store1.close()
        let asText = Key<[String]>("k", default: [])
        let store2 = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try KeyRegistry([asText]))
        do {
            _ = try await store2.get(asText)
            Issue.record("expected a type mismatch")
        } catch let error as SyncError {
            #expect(error.code == .typeMismatch)
            #expect(!error.message.contains("5"))
        }
        await #expect(throws: SyncError.self) { try await store2.set(["x"], for: Key<[String]>("k", default: [], policy: .manual)) }
    }

    @Test func encryptedAtRestNeverPlaintext() async throws {
        let folder = TempFolder()
        let registry = try TestKeys.registry()
        let keyFile = folder.file("master.key")
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: registry,
                                  options: StoreOptions(encryption: .keyFile(path: keyFile)))
        let marker = "TOP-SECRET-\(UUID().uuidString)"
        try await store.set(marker, for: TestKeys.secret)
        #expect(try await store.get(TestKeys.secret) == marker)
        store.close()
        let mode = try FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let database = try #require(FileManager.default.contents(atPath: folder.file("s.sqlite")))
        #expect(![UInt8](database).contains(subsequence: Array(marker.utf8)))
        if let wal = FileManager.default.contents(atPath: folder.file("s.sqlite-wal")) {  // a clean close may remove it
            #expect(![UInt8](wal).contains(subsequence: Array(marker.utf8)))
        }
        // Wrong key: clear error, nothing destroyed. (A missing one is `encryptionKeyMissing`: StoreFileSafetyTests.)
        let wrongKey = folder.file("other.key")
        _ = FileManager.default.createFile(atPath: wrongKey, contents: Data(repeating: 1, count: 32), attributes: [.posixPermissions: 0o600])
        #expect {
            _ = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: wrongKey)))
        } throws: { ($0 as? SyncError)?.code == .encryptionKeyWrong }
        #expect {
            _ = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: registry)
        } throws: { ($0 as? SyncError)?.code == .encryptionKeyMissing }
        let again = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: registry, options: StoreOptions(encryption: .keyFile(path: keyFile)))
        #expect(try await again.get(TestKeys.secret) == marker)
        // Passphrase-derived keys work too.
        let p = try SyncStore(path: folder.file("p.sqlite"), role: .phone, registry: registry,
                              options: StoreOptions(encryption: .passphrase("correct horse", iterations: 1000)))
        try await p.set("x", for: TestKeys.secret)
        p.close()
        #expect {
            _ = try SyncStore(path: folder.file("p.sqlite"), role: .phone, registry: registry, options: StoreOptions(encryption: .passphrase("wrong", iterations: 1000)))
        } throws: { ($0 as? SyncError)?.code == .encryptionKeyWrong }
    }

    @Test func notADatabaseIsLeftUntouched() throws {
        let folder = TempFolder()
        let path = folder.file("notes.txt")
        let content = Data(String(repeating: "not a database ", count: 200).utf8)
        _ = FileManager.default.createFile(atPath: path, contents: content)
        #expect {
            _ = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: StoreOptions(encryption: .keyFile(path: folder.file("k"))))
        } throws: { ($0 as? SyncError)?.code == .notADatabase }
        #expect(FileManager.default.contents(atPath: path) == content)
        // A damaged SQLite file: header intact, pages garbage.
        let damaged = folder.file("damaged.sqlite")
        var bytes = [UInt8]("SQLite format 3\0".utf8)
        bytes += [UInt8](repeating: 0xAB, count: 8192)
        _ = FileManager.default.createFile(atPath: damaged, contents: Data(bytes))
        #expect(throws: SyncError.self) {
            _ = try SyncStore(path: damaged, role: .phone, registry: try TestKeys.registry(), options: StoreOptions(encryption: .keyFile(path: folder.file("k"))))
        }
        #expect(FileManager.default.contents(atPath: damaged) == Data(bytes))
    }

    @Test func schemaAndSyncTablesVisibleToSQLite() async throws {
        let pair = try Pair()
        try await pair.phone.set(9, for: TestKeys.steps)
        var db: OpaquePointer?
        try #require(sqlite3_open(pair.folder.file("phone.sqlite"), &db) == SQLITE_OK)
        defer { sqlite3_close(db) }
        var stmt: OpaquePointer?
        sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name", -1, &stmt, nil)
        var tables: [String] = []
        while sqlite3_step(stmt) == SQLITE_ROW { tables.append(String(cString: sqlite3_column_text(stmt, 0))) }
        sqlite3_finalize(stmt)
        #expect(tables.contains("entries"))
        #expect(tables.filter { $0 != "entries" && $0 != "sqlite_sequence" }.allSatisfy { $0.hasPrefix("sync_") })
        sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, nil)
        sqlite3_step(stmt)
        #expect(sqlite3_column_int(stmt, 0) == Int32(Schema.currentVersion))
        sqlite3_finalize(stmt)
        sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nil)
        sqlite3_step(stmt)
        #expect(sqlite3_column_text(stmt, 0).map { String(cString: $0) } == "wal")
        sqlite3_finalize(stmt)
        sqlite3_prepare_v2(db, "SELECT ver, node, change_seq FROM entries WHERE key = 'health:daily:steps'", -1, &stmt, nil)
        #expect(sqlite3_step(stmt) == SQLITE_ROW)
        #expect(sqlite3_column_int64(stmt, 0) > 0 && sqlite3_column_int64(stmt, 2) > 0)
        #expect(UInt32(sqlite3_column_int64(stmt, 1)) == pair.phone.nodeID)
        sqlite3_finalize(stmt)
    }

    @Test func roleIsKeptInTheFile() throws {
        let pair = try Pair()
        pair.phone.close()
        #expect {
            _ = try SyncStore(path: pair.folder.file("phone.sqlite"), role: .watch, registry: try TestKeys.registry(),
                              options: StoreOptions(encryption: .keyFile(path: pair.folder.file("phone.key"))))
        } throws: { ($0 as? SyncError)?.code == .invalidConfiguration }
    }
}

final class Recorder: Sendable {
    private let storage = Mutex<[[String]]>([])
    func add(_ value: [String]) { storage.withLock { $0.append(value) } }
    var values: [[String]] { storage.withLock { $0 } }
}
import Synchronization
