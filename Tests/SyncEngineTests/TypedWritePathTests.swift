import Foundation
@testable import SyncEngine
import Testing

/// The faster typed write path writes what the general one wrote: JSON of
/// scalars byte for byte as `JSONEncoder`, and batches (rows read and written
/// in groups) with the same versions, bases, skips and encryption.
@Suite struct TypedWritePathTests {
    @Test func scalarJSONIsByteForByteJSONEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var samples = (0..<128).map { "a" + String(UnicodeScalar(UInt8($0))) + "b" }
        samples += ["", "plain", "é", "日本語", "emoji 🎉 and \u{7F} and \u{2028}", "a/b\\c\"d", String(repeating: "x/", count: 100)]
        for text in samples {
            #expect(JSONScalar.string(text) == [UInt8](try encoder.encode(text)), "\(Array(text.unicodeScalars.map(\.value)))")
            #expect(try ValueSerializer<String>.json.decode(JSONScalar.string(text)) == text)
        }
        for number in [0, 1, -1, 42, Int.max, Int.min, 1_732_390_000_123] {
            #expect(try ValueSerializer<Int>.json.encode(number) == [UInt8](try encoder.encode(number)))
        }
        for flag in [true, false] {
            #expect(try ValueSerializer<Bool>.json.encode(flag) == [UInt8](try encoder.encode(flag)))
        }
        // Other types still go through JSONEncoder.
        #expect(try ValueSerializer<[String]>.json.encode(["a/b"]) == [UInt8](try encoder.encode(["a/b"])))
    }

    @Test func aLargeBatchWritesWhatSingleWritesWould() async throws {
        let folder = TempFolder()
        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(), options: options)
        try store.setNow(5, for: TestKeys.daily["d3"])
        try store.setNow(9, for: TestKeys.daily["d4"])
        let before = try #require(try store.entryInfo(forKey: TestKeys.daily["d3"].name))
        let reopened = { try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(), options: options) }
        // A cold cache: the batch reads the stored rows in groups.
        store.cache.invalidateAll()
        try store.batchNow { batch in
            for i in 0..<20 { try batch.set(i, for: TestKeys.daily["d\(i)"]) }   // d3 changes, d4 ...
            try batch.set(9, for: TestKeys.daily["d4"])                          // ... and d4 ends as stored: written twice
            try batch.set(5, for: TestKeys.daily["d5"])                          // d5 written twice in the batch
            try batch.set("sealed", for: TestKeys.secret)
            try batch.remove(TestKeys.daily["d19"])
        }
        let d3 = try #require(try store.entryInfo(forKey: TestKeys.daily["d3"].name))
        #expect(d3.version > before.version)
        #expect(try store.value(for: TestKeys.daily["d5"]) == 5)
        #expect(try store.value(for: TestKeys.daily["d19"]) == 0)
        #expect(try store.entryInfo(forKey: TestKeys.daily["d19"].name)?.isDeleted == true)
        let other = try reopened()
        for i in 0..<19 where i != 4 { #expect(try other.value(for: TestKeys.daily["d\(i)"]) == i) }
        #expect(try other.value(for: TestKeys.daily["d4"]) == 9)
        #expect(try other.value(for: TestKeys.secret) == "sealed")
        #expect(try other.entryInfo(forKey: TestKeys.secret.name)?.isEncrypted == true)
        // Every change got its own sequence number.
        let sequences = try other.allEntryInfo().map(\.changeSequence)
        #expect(Set(sequences).count == sequences.count)
        // Writing the same values again in a batch changes nothing.
        let stats = store.cacheStatistics.skippedWrites
        store.cache.invalidateAll()
        try store.batchNow { batch in
            for i in 0..<19 where i != 4 { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
        }
        #expect(store.cacheStatistics.skippedWrites == stats + 18)
    }

    /// A cached typed read answers from a box of the value's own type once it
    /// was read; a write replaces it, and every read counts one hit.
    @Test func cachedTypedReadsFollowWrites() throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        try store.setNow(1, for: TestKeys.steps)
        store.resetCacheStatistics()
        #expect(try store.value(for: TestKeys.steps) == 1)   // decoded value, then boxed
        #expect(store.cache.typedBox(TestKeys.steps.name) is CachedValue<Int>)
        #expect(try store.value(for: TestKeys.steps) == 1)   // from the box
        try store.setNow(2, for: TestKeys.steps)
        #expect(store.cache.typedBox(TestKeys.steps.name) == nil)
        #expect(try store.value(for: TestKeys.steps) == 2)
        #expect(try store.value(for: TestKeys.steps) == 2)
        try store.removeNow(TestKeys.steps)
        #expect(try store.value(for: TestKeys.steps) == 0)
        #expect(store.cacheStatistics.hits == 5)
        #expect(store.cacheStatistics.misses == 0)
    }
}
