import Foundation
import Synchronization
@testable import SyncEngine
import Testing

/// A large `batch` is saved chunk by chunk on a helper thread while its body
/// still runs (`BulkWritePipeline`): it must commit what the one-transaction
/// path commits, all or nothing, and never wait for itself.
@Suite(.timeLimit(.minutes(5))) struct BulkWriteTests {
    static let chunk = BulkWritePipeline.chunkSize

    private func openStore(_ folder: TempFolder, options: StoreOptions? = nil) throws -> SyncStore {
        try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                      options: options ?? StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
    }

    private func storedRow(_ store: SyncStore, _ key: String) throws -> StoredRow? {
        try store.database.read { try store.loadRow($0, key: key, valueFile: .ifReadable) }
    }

    @Test func aLargeBatchIsSavedWhileItsBodyRunsAndCommitsAsOne() throws {
        let folder = TempFolder()
        let store = try openStore(folder)
        // Stored before: d1 and d2 cached, d3 only on disk; d1 is written again with its value.
        try store.setNow(1, for: TestKeys.daily["d1"])
        try store.setNow(7, for: TestKeys.daily["d2"])
        try store.setNow(9, for: TestKeys.daily["d3"])
        let d2Before = try #require(try store.entryInfo(forKey: TestKeys.daily["d2"].name))
        store.cache.invalidate(TestKeys.daily["d3"].name)
        let d3Before = try #require(try storedRow(store, TestKeys.daily["d3"].name))
        let observed = Mutex<[StoreChange]>([])
        let observation = store.observeChanges(matching: .all) { change in observed.withLock { $0.append(change) } }
        defer { observation.cancel() }
        let total = 3 * Self.chunk + 17
        let skipsBefore = store.cacheStatistics.skippedWrites
        try store.batchNow { batch in
            for i in 0..<total { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
            // Written again in the last, partial chunk: the first write is in the first chunk.
            try batch.set(-5, for: TestKeys.daily["d5"])
            try batch.set("sealed", for: TestKeys.secret)
            try batch.remove(TestKeys.daily["d\(total - 1)"])
        }
        #expect(store.bulkChunksSaved.load(ordering: .relaxed) >= 3)
        #expect(store.cacheStatistics.skippedWrites == skipsBefore + 1)   // d1 = 1 as stored
        // Everything is there, through the cache and reopened.
        let reopened = try openStore(folder)
        for reader in [store, reopened] {
            for i in 0..<(total - 1) where i != 5 { #expect(try reader.value(for: TestKeys.daily["d\(i)"]) == i) }
            #expect(try reader.value(for: TestKeys.daily["d5"]) == -5)
            #expect(try reader.entryInfo(forKey: TestKeys.daily["d\(total - 1)"].name)?.isDeleted == true)
            #expect(try reader.value(for: TestKeys.secret) == "sealed")
            #expect(try reader.entryInfo(forKey: TestKeys.secret.name)?.isEncrypted == true)
        }
        // Bases: a key stored before has its stored version; a key written twice, its first write's.
        let d2 = try #require(try storedRow(store, TestKeys.daily["d2"].name))
        #expect(d2.base == d2Before.version)
        let d3 = try #require(try storedRow(store, TestKeys.daily["d3"].name))
        #expect(d3.base == d3Before.version)
        let d5 = try #require(try storedRow(store, TestKeys.daily["d5"].name))
        let firstD5 = try #require(observed.withLock { $0.first { $0.key == TestKeys.daily["d5"].name } })
        #expect(d5.base == firstD5.version)
        #expect(d5.version > firstD5.version)
        // One change per row, in the order written, versions and sequences increasing.
        let changes = observed.withLock { $0 }
        #expect(changes.count == total - 1 + 3)   // d1 skipped; d5 again, the secret, the removal
        #expect(zip(changes, changes.dropFirst()).allSatisfy { $0.version < $1.version })
        let sequences = try reopened.allEntryInfo().map(\.changeSequence)
        #expect(Set(sequences).count == sequences.count)
    }

    @Test func aBodyThatThrowsAfterSeveralChunksWritesNothing() throws {
        struct AppError: Error {}
        let folder = TempFolder()
        let store = try openStore(folder)
        try store.setNow(3, for: TestKeys.daily["d0"])
        #expect(throws: AppError.self) {
            try store.batchNow { batch in
                for i in 0..<(3 * Self.chunk + 5) { try batch.set(100 + i, for: TestKeys.daily["d\(i)"]) }
                // Until the helper has saved two chunks (it does so as soon as it gets them), so
                // that the throw has saved rows to roll back.
                let deadline = ContinuousClock.now + .seconds(30)
                while store.bulkChunksSaved.load(ordering: .relaxed) < 2 && ContinuousClock.now < deadline { sched_yield() }
                throw AppError()
            }
        }
        // Chunks were saved while the body ran, and rolled back.
        #expect(store.bulkChunksSaved.load(ordering: .relaxed) >= 2)
        #expect(try store.value(for: TestKeys.daily["d0"]) == 3)
        #expect(try store.entryInfo(forKey: TestKeys.daily["d1"].name) == nil)
        // The write lock was released: the next write goes through.
        try store.setNow(4, for: TestKeys.daily["d0"])
        let reopened = try openStore(folder)
        #expect(try reopened.value(for: TestKeys.daily["d0"]) == 4)
        #expect(try reopened.allEntryInfo().count == 1)
    }

    @Test(arguments: [1, 2, 3])
    func aWriteRefusedInAnyChunkWritesNothing(refusedAfter chunks: Int) throws {
        let folder = TempFolder()
        let store = try openStore(folder)
        // In a full chunk (1, 2) or in the partial one the body ends with (3).
        let refusedAt = chunks < 3 ? chunks * Self.chunk - 10 : 2 * Self.chunk + 10
        #expect(throws: SyncError.self) {
            try store.batchNow { batch in
                for i in 0..<(2 * Self.chunk + 20) {
                    if i == refusedAt { try batch.set("round", for: TestKeys.watchFace) }   // a watch-only key, on a phone
                    try batch.set(i, for: TestKeys.daily["d\(i)"])
                }
            }
        }
        #expect(try store.allEntryInfo().isEmpty)
        try store.setNow(1, for: TestKeys.daily["d0"])
        #expect(try openStore(folder).allEntryInfo().count == 1)
    }

    @Test func aWriteOnTheBodysOwnThreadDoesNotWaitForTheBatch() throws {
        let folder = TempFolder()
        let store = try openStore(folder)
        try store.batchNow { batch in
            for i in 0..<(2 * Self.chunk + 100) { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
            // The helper holds the write lock for this batch: these must stop it, not wait for it.
            try store.setNow(42, for: TestKeys.steps)
            try store.setNow(-1, for: TestKeys.daily["d0"])
            #expect(try store.allEntryInfo().count == 2)
            for i in 0..<Self.chunk { try batch.set(i + 1, for: TestKeys.daily["e\(i)"]) }
        }
        // The batch committed after the nested writes, as a whole: its d0 wins.
        let reopened = try openStore(folder)
        #expect(try reopened.value(for: TestKeys.steps) == 42)
        #expect(try reopened.value(for: TestKeys.daily["d0"]) == 0)
        #expect(try reopened.value(for: TestKeys.daily["d\(2 * Self.chunk + 99)"]) == 2 * Self.chunk + 99)
        #expect(try reopened.value(for: TestKeys.daily["e\(Self.chunk - 1)"]) == Self.chunk)
        #expect(try reopened.allEntryInfo().count == 1 + 2 * Self.chunk + 100 + Self.chunk)
    }

    @Test func aLargeBatchInsideALargeBatchDoesNotWaitForIt() throws {
        let folder = TempFolder()
        let store = try openStore(folder)
        try store.batchNow { outer in
            for i in 0..<(2 * Self.chunk + 1) { try outer.set(i, for: TestKeys.daily["d\(i)"]) }
            try store.batchNow { inner in
                for i in 0..<(2 * Self.chunk + 1) { try inner.set(-i, for: TestKeys.daily["i\(i)"]) }
                try inner.set(-1, for: TestKeys.daily["d0"])
            }
            for i in 0..<Self.chunk { try outer.set(i, for: TestKeys.daily["e\(i)"]) }
        }
        let reopened = try openStore(folder)
        #expect(try reopened.value(for: TestKeys.daily["i\(2 * Self.chunk)"]) == -2 * Self.chunk)
        #expect(try reopened.value(for: TestKeys.daily["d0"]) == 0)   // the outer batch commits last
        #expect(try reopened.allEntryInfo().count == 2 * (2 * Self.chunk + 1) + Self.chunk)
    }

    @Test func writesOfOtherThreadsWaitForTheBatchAndLandAfterIt() throws {
        let folder = TempFolder()
        let store = try openStore(folder)
        let started = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let written = Mutex<[String]>([])
        try store.batchNow { batch in
            for i in 0..<(2 * Self.chunk) { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
            Thread {
                started.signal()
                do {
                    try store.setNow(7, for: TestKeys.steps)
                    try store.setNow(5, for: TestKeys.daily["d1"])
                    written.withLock { $0.append("other thread") }
                } catch {
                    written.withLock { $0.append("failed: \(error)") }
                }
                finished.signal()
            }.start()
            started.wait()
            for i in 0..<Self.chunk { try batch.set(i, for: TestKeys.daily["e\(i)"]) }
            written.withLock { $0.append("body") }
        }
        finished.wait()
        #expect(written.withLock { $0 } == ["body", "other thread"])
        #expect(try store.value(for: TestKeys.steps) == 7)
        #expect(try store.value(for: TestKeys.daily["d1"]) == 5)
        #expect(try openStore(folder).allEntryInfo().count == 3 * Self.chunk + 1)
    }

    @Test func aCopyOfTheBatchCommitsNothing() throws {
        let folder = TempFolder()
        let store = try openStore(folder)
        try store.batchNow { batch in
            for i in 0..<Self.chunk { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
            var copy = batch
            for i in 0..<(2 * Self.chunk) { try copy.set(i, for: TestKeys.daily["copy\(i)"]) }
            for i in 0..<(2 * Self.chunk) { try batch.set(i, for: TestKeys.daily["e\(i)"]) }
        }
        let keys = try openStore(folder).allEntryInfo().map(\.key)
        #expect(keys.count == 3 * Self.chunk)
        #expect(!keys.contains { $0.contains("copy") })
    }

    @Test func aStoreWithoutReaderConnectionsCommitsLargeBatchesWhole() throws {
        let folder = TempFolder()
        var options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        options.readerConnections = 0
        let store = try openStore(folder, options: options)
        try store.batchNow { batch in
            for i in 0..<(2 * Self.chunk + 3) { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
        }
        #expect(store.bulkChunksSaved.load(ordering: .relaxed) == 0)
        #expect(try openStore(folder).allEntryInfo().count == 2 * Self.chunk + 3)
    }
}
