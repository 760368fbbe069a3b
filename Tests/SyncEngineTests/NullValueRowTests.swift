import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import Testing

/// A live row (not a tombstone) whose `value` column is NULL, which the
/// engine never writes (a file edited with the `sqlite3` tool): its key read
/// as its default value, silently. Every read of the key now refuses it as
/// damage (`database-corrupt`, naming the key); the other keys still read,
/// and writing the key again replaces it.
@Suite struct NullValueRowTests {
    /// Every read of `key` throws `database-corrupt` naming it, on a cache miss as on a second read.
    private static func expectDamaged(_ store: SyncStore, _ key: Key<Int>) {
        func isDamage(_ error: any Error) -> Bool {
            (error as? SyncError)?.code == .databaseCorrupt && "\(error)".contains("'\(key.name)'")
        }
        for _ in 0..<2 {
            #expect { _ = try store.value(for: key) } throws: { isDamage($0) }
            #expect { _ = try store.storedValue(for: key) } throws: { isDamage($0) }
            #expect { _ = try store.entry(forKey: key.name, declaredAs: nil) } throws: { isDamage($0) }
            #expect { _ = try store.entry(forKey: key.name, declaredAs: key.descriptor) } throws: { isDamage($0) }
            #expect { _ = try store.rawValue(forKey: key.name) } throws: { isDamage($0) }
        }
        #expect(store.cachedValue(for: key) == nil, "nothing of the damaged row is cached")
    }

    @Test func aLiveRowWithANullValueIsDamageNotTheDefault() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let options = StoreOptions(encryption: .keyFile(path: folder.file("s.key")))
        try await closedStoreWithOneValue(at: path, options: options)
        do {
            let store = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: options)
            try await store.set("kept", for: TestKeys.name)
            store.close()
        }
        try rawSQL(path, "UPDATE entries SET value = NULL WHERE key = '\(TestKeys.steps.name)'")
        let store = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(), options: options)
        defer { store.close() }
        Self.expectDamaged(store, TestKeys.steps)
        #expect(try store.value(for: TestKeys.name) == "kept", "the other keys still read")
        #expect(try store.entry(forKey: TestKeys.name.name, declaredAs: nil)?.bytes != nil)

        try store.setNow(5, for: TestKeys.steps)
        #expect(try store.value(for: TestKeys.steps) == 5, "a write replaces the damaged row")
    }

    /// In a store that keeps values in files: a live row that points at no
    /// file (`in_file` cleared) and holds no value is damage too.
    @Test func aLiveRowWithNeitherAValueNorAFileIsDamage() async throws {
        let folder = TempFolder()
        let directory = folder.file("blobs")
        let options = StoreOptions(encryption: .keyFile(path: folder.file("s.key")))
        do {
            let store = try FileValueStore(directory: directory, role: .phone, registry: try TestKeys.registry(), options: options)
            try await store.set(3, for: TestKeys.steps)
            try await store.set("kept", for: TestKeys.name)
            store.close()
        }
        try rawSQL(directory + "/metadata.sqlite", "UPDATE entries SET value = NULL, in_file = 0 WHERE key = '\(TestKeys.steps.name)'")
        let store = try FileValueStore(directory: directory, role: .phone, registry: try TestKeys.registry(), options: options)
        defer { store.close() }
        Self.expectDamaged(store.syncStore, TestKeys.steps)
        #expect(try store.value(for: TestKeys.name) == "kept", "the other keys still read")

        try await store.set(6, for: TestKeys.steps)
        #expect(try store.value(for: TestKeys.steps) == 6, "a write replaces the damaged row")
    }

    /// A tombstone's NULL value is what the engine writes: its key reads as its default.
    @Test func aTombstoneStillReadsAsTheDefault() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("s.key"))))
        defer { store.close() }
        try store.setNow(4, for: TestKeys.steps)
        try store.removeNow(TestKeys.steps)
        store.cache.invalidateAll()
        #expect(try store.value(for: TestKeys.steps) == 0)
        #expect(try store.entry(forKey: TestKeys.steps.name, declaredAs: nil)?.bytes == nil)
        #expect(try store.rawValue(forKey: TestKeys.steps.name) == nil)
    }
}
