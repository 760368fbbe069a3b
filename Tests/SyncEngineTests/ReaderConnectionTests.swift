import Dispatch
import Foundation
@testable import SyncEngine
import Synchronization
import Testing

/// Reads that miss the cache go to reader connections: they never wait for
/// the writer, see every commit that returned before them, and never put an
/// older value into the cache than one a write left there.
@Suite struct ReaderConnectionTests {
    /// Options under which every read misses the cache (nothing is small enough to keep).
    static func uncached(_ folder: TempFolder) -> StoreOptions {
        var options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        options.maxCachedValueSize = -1
        return options
    }

    /// A write transaction is held open on the writer (its will-commit hook
    /// waits); a read in another thread completes while it is still held.
    @Test func aReadDoesNotWaitForAnOpenWriteTransaction() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(), options: Self.uncached(folder))
        try store.setNow(7, for: TestKeys.steps)
        let inTransaction = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let holding = Atomic<Bool>(false)
        store.addWillCommitHook { changes in
            guard changes.contains(where: { $0.key == TestKeys.name.name }) else { return }
            holding.store(true, ordering: .sequentiallyConsistent)
            inTransaction.signal()
            _ = release.wait(timeout: .now() + 30)
            holding.store(false, ordering: .sequentiallyConsistent)
        }
        let writer = Thread { try? store.setNow("held", for: TestKeys.name) }
        writer.start()
        #expect(inTransaction.wait(timeout: .now() + 30) == .success)

        let readDone = DispatchSemaphore(value: 0)
        let readValue = Mutex<Int?>(nil)
        let stillHeldWhenRead = Atomic<Bool>(false)
        let reader = Thread {
            let value = try? store.value(for: TestKeys.steps)
            stillHeldWhenRead.store(holding.load(ordering: .sequentiallyConsistent), ordering: .sequentiallyConsistent)
            readValue.withLock { $0 = value }
            readDone.signal()
        }
        reader.start()
        let finished = readDone.wait(timeout: .now() + 10) == .success
        release.signal()
        #expect(finished, "the read waited for the write transaction")
        let heldDuringRead = stillHeldWhenRead.load(ordering: .sequentiallyConsistent)
        #expect(heldDuringRead)
        #expect(readValue.withLock { $0 } == 7)
        // The held write still commits, and a read then sees it.
        try await eventually(store, "the held write commits") { try store.value(for: TestKeys.name) == "held" }
    }

    /// After a commit returns, a read that misses the cache (on a reader
    /// connection) sees it, from the committing thread and from another one.
    @Test func aReadSeesEveryCommitThatReturnedBeforeIt() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(), options: Self.uncached(folder))
        for i in 1...300 {
            try store.setNow(i, for: TestKeys.steps)
            #expect(try store.value(for: TestKeys.steps) == i)
            let other = await Task.detached { try? store.value(for: TestKeys.steps) }.value
            #expect(other == i)
        }
        #expect(store.cacheStatistics.hits == 0)
        // The same through removes and the metadata reads.
        try store.removeNow(TestKeys.steps)
        #expect(try store.value(for: TestKeys.steps) == 0)
        #expect(try store.entryInfo(forKey: TestKeys.steps.name)?.isDeleted == true)
    }

    /// A slot read before a write changed the cache is not kept: the cache
    /// would otherwise go back in time.
    @Test func aFillThatMayPredateAWriteIsNotKept() {
        let cache = StoreCache()
        let old = StoreCache.Slot(bytes: [1], encoding: "json", version: HLCTimestamp(packed: 1 << 16, node: 1), decoded: nil)
        let new = StoreCache.Slot(bytes: [2], encoding: "json", version: HLCTimestamp(packed: 2 << 16, node: 1), decoded: nil)
        var epoch = cache.epoch
        cache.store("k", new)           // a commit lands while the reader reads the older row
        cache.fill("k", old, readSince: epoch)
        #expect(cache.peek("k")?.bytes == [2])
        epoch = cache.epoch
        cache.invalidate("k")           // a remote change invalidated it
        cache.fill("k", old, readSince: epoch)
        #expect(cache.peek("k") == nil)
        epoch = cache.epoch
        cache.fill("k", new, readSince: epoch)  // nothing changed meanwhile: kept
        #expect(cache.peek("k")?.bytes == [2])
    }

    /// A resolver's merge gives a version other bytes: a value a reader
    /// decoded from the slot before the merge replaced it is not kept beside
    /// the merged bytes at the same version (reads would return it until the
    /// key changed again); the value decoded from those bytes is.
    @Test func aValueDecodedFromOtherBytesAtTheSameVersionIsNotKept() {
        let cache = StoreCache()
        let version = HLCTimestamp(packed: 5 << 16, node: 1)
        let joined = StoreCache.Slot(bytes: Array("[\"a\",\"b\"]".utf8), encoding: "json", version: version, decoded: nil)
        let before: [UInt8] = Array("[\"a\"]".utf8)
        cache.store("tags", StoreCache.Slot(bytes: before, encoding: "json", version: version, decoded: nil))
        cache.invalidate("tags")                        // the merge's commit, at the same version
        cache.fill("tags", joined, readSince: cache.epoch)  // another reader reads the merged row
        cache.rememberDecoded("tags", version: version, bytes: before, value: ["a"])  // the first reader, late
        cache.rememberTyped("tags", version: version, bytes: before, box: CachedValue(["a"], declarationToken: TestKeys.tags.declarationToken))
        #expect(cache.peek("tags")?.decoded == nil)
        #expect(cache.typedBox("tags") == nil)
        #expect(cache.typedValue("tags", as: [String].self, declarationToken: TestKeys.tags.declarationToken) == nil)
        cache.rememberDecoded("tags", version: version, bytes: joined.bytes, value: ["a", "b"])
        cache.rememberTyped("tags", version: version, bytes: joined.bytes ?? [], box: CachedValue(["a", "b"], declarationToken: TestKeys.tags.declarationToken))
        #expect(cache.peek("tags")?.decoded as? [String] == ["a", "b"])
        #expect(cache.typedValue("tags", as: [String].self, declarationToken: TestKeys.tags.declarationToken) == ["a", "b"])
    }

    /// Writers and readers race on one key: every read returns a value at
    /// least as new as the last commit that returned before it, and the
    /// cache ends on the last value written.
    @Test func concurrentReadsNeverGoBackInTime() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        let race = Race()
        let readers = (0..<2).map { _ in
            Task.detached {
                while !race.done.load(ordering: .sequentiallyConsistent) {
                    let floor = race.committed.load(ordering: .sequentiallyConsistent)
                    let value = (try? store.value(for: TestKeys.steps)) ?? -1
                    if value < floor { race.violations.add(1, ordering: .relaxed) }
                }
            }
        }
        for i in 1...1_000 {
            try store.setNow(i, for: TestKeys.steps)
            race.committed.store(i, ordering: .sequentiallyConsistent)
            if i % 50 == 0 { store.cache.invalidate(TestKeys.steps.name) }  // misses, so reader fills race the writes
        }
        race.done.store(true, ordering: .sequentiallyConsistent)
        for reader in readers { await reader.value }
        let backInTime = race.violations.load(ordering: .relaxed)
        #expect(backInTime == 0)
        #expect(try store.value(for: TestKeys.steps) == 1_000)
    }

    /// Encrypted values and a store with a value directory read through the readers too.
    @Test func encryptedAndFileValuesReadThroughReaders() throws {
        let folder = TempFolder()
        var options = Self.uncached(folder)
        options.encryption = .passphrase("reader test passphrase")
        let encrypted = try SyncStore(path: folder.file("e.sqlite"), role: .phone, registry: try TestKeys.registry(), options: options)
        try encrypted.setNow("s3cret", for: TestKeys.secret)
        #expect(try encrypted.value(for: TestKeys.secret) == "s3cret")
        #expect(try encrypted.rawValue(forKey: TestKeys.secret.name) == Array("\"s3cret\"".utf8))

        var fileOptions = options
        fileOptions.valueDirectory = folder.file("values")
        let files = try SyncStore(path: folder.file("f.sqlite"), role: .phone, registry: try TestKeys.registry(), options: fileOptions)
        for i in 0..<20 {
            try files.setNow("value \(i)", for: TestKeys.secret)
            try files.setNow(i, for: TestKeys.steps)
            #expect(try files.value(for: TestKeys.secret) == "value \(i)")
            #expect(try files.value(for: TestKeys.steps) == i)
        }
    }

    /// The state a writer and its racing readers share.
    final class Race: Sendable {
        let committed = Atomic<Int>(0)
        let done = Atomic<Bool>(false)
        let violations = Atomic<Int>(0)
    }
}
