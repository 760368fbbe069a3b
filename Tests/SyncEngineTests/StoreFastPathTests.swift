import Foundation
@testable import SyncEngine
import Testing

/// The store's round-two fast paths keep their meaning: versions reserved for
/// a whole batch, bases of keys written twice, the typed read's statistics and
/// type check, and the cache policy of bulk writes.
@Suite struct StoreFastPathTests {
    /// `reserve(n)` gives what n calls of `now()` within one millisecond give,
    /// orders after every earlier version, and at the top of the range throws
    /// without using anything up.
    @Test func clockReservesConsecutiveVersions() throws {
        let wall = ManualClock(now: 1_000_000)
        let clock = HybridLogicalClock(node: 7, physical: wall)
        let before = try clock.now()
        let first = try clock.reserve(5)
        #expect(first == before.packed + 1)
        #expect(try clock.now().packed == first + 5)
        wall.advance(by: 10)
        #expect(try clock.reserve(3) == 1_000_010 << 16)
        #expect(try clock.now().packed == (1_000_010 << 16) + 3)

        let full = HybridLogicalClock(node: 7, physical: wall, floor: HLCTimestamp.maxPacked - 2)
        #expect(throws: SyncError.self) { try full.reserve(5) }
        do {
            _ = try full.reserve(5)
        } catch let error as SyncError {
            #expect(error.code == .clockOutOfRange)
        }
        #expect(try full.reserve(2) == HLCTimestamp.maxPacked - 1)
        #expect(throws: SyncError.self) { try full.now() }
    }

    /// A key written twice in one batch: the second row's base is the first
    /// row's version, the versions follow the order of the writes, and each
    /// change has its own sequence number.
    @Test func aKeyWrittenTwiceInABatchHasTheFirstWriteAsBase() throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        try store.setNow(1, for: TestKeys.daily["a"])
        let original = try #require(try store.entryInfo(forKey: TestKeys.daily["a"].name))
        store.cache.invalidateAll()
        let changes = try store.commit((0..<12).map { i in
            BackendWrite(key: TestKeys.daily[i == 3 || i == 9 ? "a" : "k\(i)"].name, bytes: Array("\(i)".utf8), decoded: i)
        })
        #expect(changes.count == 12)
        #expect(zip(changes, changes.dropFirst()).allSatisfy { $0.version < $1.version })
        let a = try #require(try store.entryInfo(forKey: TestKeys.daily["a"].name))
        #expect(a.version == changes[9].version)
        let base = try store.database.read { conn -> HLCTimestamp in
            let stmt = try conn.statement("SELECT base_ver, base_node FROM entries WHERE key = ?")
            stmt.bind(1, TestKeys.daily["a"].name)
            defer { stmt.reset() }
            _ = try stmt.step()
            return HLCTimestamp(packed: stmt.int64(0), node: UInt32(stmt.int64(1)))
        }
        #expect(base == changes[3].version)
        #expect(changes[3].version > original.version)
        let sequences = try store.allEntryInfo().map(\.changeSequence)
        #expect(Set(sequences).count == sequences.count)
        #expect(try store.value(for: TestKeys.daily["a"]) == 9)
    }

    /// A key cached as one type and read with a declaration of another type is
    /// refused as before, not answered from the other type's box; a typed read
    /// from the box counts exactly one hit.
    @Test func aTypedReadOfAnotherTypeIsRefused() throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        try store.setNow(3, for: TestKeys.steps)
        #expect(try store.value(for: TestKeys.steps) == 3)
        #expect(store.cache.typedBox(TestKeys.steps.name) is CachedValue<Int>)
        store.resetCacheStatistics()
        let asText = Key<String>("steps", in: Namespace("health").child("daily"), default: "", availability: .all, policy: .automaticSmall)
        #expect(throws: SyncError.self) { try store.value(for: asText) }
        let hits = store.cacheStatistics.hits
        #expect(try store.value(for: TestKeys.steps) == 3)
        #expect(store.cacheStatistics.hits == hits + 1)
    }

    /// A bulk write (`StoreCache.bulkRows` rows or more) updates the keys the
    /// cache holds and leaves the others to be read on first use.
    @Test func aBulkWriteUpdatesOnlyTheKeysTheCacheHolds() throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        try store.setNow(1, for: TestKeys.daily["held"])
        #expect(try store.value(for: TestKeys.daily["held"]) == 1)
        try store.batchNow { batch in
            for i in 0..<StoreCache.bulkRows { try batch.set(i, for: TestKeys.daily["b\(i)"]) }
            try batch.set(2, for: TestKeys.daily["held"])
        }
        store.resetCacheStatistics()
        #expect(try store.value(for: TestKeys.daily["held"]) == 2)
        #expect(store.cacheStatistics == CacheStatistics(hits: 1, misses: 0))
        #expect(try store.value(for: TestKeys.daily["b7"]) == 7)
        #expect(store.cacheStatistics == CacheStatistics(hits: 1, misses: 1))
        #expect(try store.value(for: TestKeys.daily["b7"]) == 7)
        #expect(store.cacheStatistics == CacheStatistics(hits: 2, misses: 1))
        // Below the bulk size every written key is cached as before.
        try store.batchNow { batch in
            for i in 0..<10 { try batch.set(i + 1, for: TestKeys.daily["s\(i)"]) }
        }
        store.resetCacheStatistics()
        #expect(try store.value(for: TestKeys.daily["s4"]) == 5)
        #expect(store.cacheStatistics == CacheStatistics(hits: 1, misses: 0))
    }

    /// `loadRows` finds exactly the stored rows of the keys asked for, for
    /// every size of group its statements take (1, 8, 32, 128 keys) and
    /// across groups, keys that exist and keys that do not, one twice.
    @Test func loadRowsFindsTheAskedKeysAtEveryGroupSize() throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        try store.batchNow { batch in
            for i in stride(from: 0, to: 400, by: 2) { try batch.set(i, for: TestKeys.daily["k\(i)"]) }
        }
        for count in [1, 2, 7, 8, 9, 31, 32, 33, 127, 128, 129, 300] {
            let keys = (0..<count).map { TestKeys.daily["k\($0)"].name } + (count > 4 ? [TestKeys.daily["k4"].name] : [])
            let rows = try store.database.read { conn in try store.loadRows(conn, keys: keys) }
            let expected = Set((0..<count).filter { $0 % 2 == 0 }.map { TestKeys.daily["k\($0)"].name })
            #expect(Set(rows.keys) == expected, "\(count) keys")
            for i in 0..<count where i % 2 == 0 {
                let row = try #require(rows[TestKeys.daily["k\(i)"].name], "k\(i) of \(count) keys")
                #expect(try TestKeys.daily.serializer.decode(row.value ?? []) == i)
            }
        }
    }
}

extension CacheStatistics {
    init(hits: Int, misses: Int) {
        self.init()
        self.hits = hits
        self.misses = misses
    }
}
