import Dispatch
import Foundation
@testable import SyncEngine
import Synchronization
import Testing

/// The `async` API of the backends (`set`, `remove`, `batch`, `clear`, `get`
/// that must read or decode) does its blocking work (commits, `fsync`s, value
/// files, waits for the write lock) off Swift concurrency's cooperative pool,
/// whose few threads (one a core) every other task of the app needs.
@Suite(.timeLimit(.minutes(5))) struct AsyncAPIOffPoolTests {
    /// An awaited call of the async API, on one kind of backend.
    enum Call: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case set, remove, batch, clear, getUndecoded, fileValueSet, replacingSet

        var testDescription: String { rawValue }

        var kind: BackendKind {
            switch self {
            case .fileValueSet: .fileValue
            case .replacingSet: .replacing
            default: .sqlite
            }
        }
    }

    /// A key whose decoding is held by `hold` (a read the cache cannot answer decodes on the reading thread).
    static func heldKey(_ hold: CallHold) -> Key<Int> {
        Key<Int>("held", default: 0, serializer: ValueSerializer(identifier: "held-int", encode: { Array(String($0).utf8) }, decode: { bytes in
            hold.hold()
            return Int(String(decoding: bytes, as: UTF8.self)) ?? -1
        }))
    }

    /// More awaited calls than the pool has threads, each on its own store and
    /// held inside its commit (its will-commit hook, as an `fsync` of seconds
    /// on a loaded disk holds it) or its decoding: another task still runs,
    /// and once let go every call completes with its effect. Before, each
    /// call committed on its caller's thread of the pool, and the pool ran
    /// nothing else until the commits were let go.
    @Test(arguments: Call.allCases)
    func awaitedCallsHeldInTheirCommitLeaveTheCooperativePoolFree(_ call: Call) async throws {
        let calls = ProcessInfo.processInfo.activeProcessorCount + 1
        let hold = CallHold(count: calls)
        // Whatever happens, the calls are let go in the end: the test fails, it never hangs.
        hold.releaseAtTheLatest(after: 120)
        let held = Self.heldKey(hold)
        let folders = (0..<calls).map { _ in TempFolder() }
        var backends: [any KeyValueBackend] = []
        for folder in folders {
            let backend = try call.kind.make(folder, keys: TestKeys.all + [held])
            try backend.setNow(3, for: TestKeys.steps)
            // Bytes without their decoded value: a `get` must decode them.
            try backend.setEncoded(Array("42".utf8), forKey: held.name)
            let store = try #require(call.kind.replicatingStore(of: backend))
            if call != .getUndecoded { store.addWillCommitHook { _ in hold.hold() } }
            backends.append(backend)
        }
        let running = backends.map { backend in
            Task { () throws -> Int in
                switch call {
                case .set, .fileValueSet, .replacingSet: try await backend.set(7, for: TestKeys.steps)
                case .remove: try await backend.remove(TestKeys.steps)
                case .batch:
                    try await backend.batch { batch in
                        try batch.set(7, for: TestKeys.steps)
                        try batch.set("x", for: TestKeys.name)
                    }
                case .clear: try await backend.clear()
                case .getUndecoded: return try await backend.get(held)
                }
                return 0
            }
        }

        let outcome = await hold.taskRunsBesideTheHeldCalls()
        #expect(outcome == .ranBeside,
                "\(calls) awaited \(call) calls held in their commit kept every other task from running: they block the cooperative pool")

        // Nothing was lost to the wait: each call did what it does, whole.
        for (backend, task) in zip(backends, running) {
            let answer = try await task.value
            switch call {
            case .set, .fileValueSet, .replacingSet: #expect(try backend.value(for: TestKeys.steps) == 7)
            case .remove, .clear: #expect(try backend.contains(TestKeys.steps) == false)
            case .batch:
                #expect(try backend.value(for: TestKeys.steps) == 7)
                #expect(try backend.value(for: TestKeys.name) == "x")
            case .getUndecoded: #expect(answer == 42)
            }
        }
        // An optimized build ends a local's lifetime at its last use: the folders (removed
        // as they go) must outlive the calls, which write value files and WALs in them.
        withExtendedLifetime(folders) {}
    }

    /// The async calls of `@Stored`'s projected value (`$steps.set(_:)`,
    /// `$steps.remove()`), as the store's own: more than the pool has
    /// threads, held inside their commit, leave another task a thread, and
    /// then complete. Before, they committed on the caller's thread of the pool.
    @Test(arguments: [true, false])
    func storedValueCallsHeldInTheirCommitLeaveTheCooperativePoolFree(_ setting: Bool) async throws {
        let calls = ProcessInfo.processInfo.activeProcessorCount + 1
        let hold = CallHold(count: calls)
        hold.releaseAtTheLatest(after: 120)
        let folders = (0..<calls).map { _ in TempFolder() }
        var values: [StoredValue<Int>] = []
        for folder in folders {
            let store = try #require(try BackendKind.sqlite.make(folder) as? SyncStore)
            try store.setNow(3, for: TestKeys.steps)
            store.addWillCommitHook { _ in hold.hold() }
            values.append(StoredValue(TestKeys.steps, store: store))
        }
        let running = values.map { value in
            Task { setting ? try await value.set(7) : try await value.remove() }
        }

        let outcome = await hold.taskRunsBesideTheHeldCalls()
        #expect(outcome == .ranBeside,
                "\(calls) awaited StoredValue.\(setting ? "set" : "remove") calls held in their commit kept every other task from running")
        for (value, task) in zip(values, running) {
            try await task.value
            #expect(try value.store.value(for: TestKeys.steps) == (setting ? 7 : 0))
            #expect(value.isStored == setting)
        }
        withExtendedLifetime(folders) {}
    }

    /// A `get` the cache answers (the value held decoded) stays on the
    /// caller's thread: it returns while the store's queue is busy with a
    /// commit held in its will-commit hook, with the value from before that
    /// commit. Had it gone to the store's queue, it would wait for the commit.
    @Test func aGetAnsweredFromTheCacheDoesNotWaitForTheStoresQueue() async throws {
        let folder = TempFolder()
        let store = try #require(try BackendKind.sqlite.make(folder) as? SyncStore)
        try store.setNow(5, for: TestKeys.steps)
        #expect(store.cachedValue(for: TestKeys.steps) == 5, "the value written is held decoded")
        let hold = CallHold(count: 1)
        hold.releaseAtTheLatest(after: 120)
        store.addWillCommitHook { _ in hold.hold() }
        let writing = Task { try await store.set(6, for: TestKeys.steps) }
        await hold.allHeld()

        store.resetCacheStatistics()
        let read = try await store.get(TestKeys.steps)
        let hits = store.cacheStatistics.hits
        let outcome = hold.settle(.ranBeside)
        hold.release()
        try await writing.value
        #expect(outcome == .ranBeside, "a get answered from the cache waited for the store's queue")
        #expect(read == 5, "the read sees the value from before the held commit")
        #expect(hits == 1, "the read counts one cache hit")
        #expect(try await store.get(TestKeys.steps) == 6, "a read after an awaited write sees it")
    }

    /// An awaited write commits whole even when its task was cancelled, and
    /// two writes awaited in turn commit in that order.
    @Test(arguments: BackendKind.allCases)
    func cancelledWritesCommitWholeAndInOrder(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let backend = try kind.make(folder)
        let writing = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await backend.set(1, for: TestKeys.steps)
            try await backend.batch { batch in
                try batch.set(2, for: TestKeys.steps)
                try batch.set("two", for: TestKeys.name)
            }
            try await backend.set(3, for: TestKeys.steps)
        }
        try await writing.value
        #expect(try backend.value(for: TestKeys.steps) == 3)
        #expect(try backend.value(for: TestKeys.name) == "two")
    }

    /// A batch's body runs on the caller's thread and commits nothing; when
    /// it throws, nothing commits and the error is the body's.
    @Test(arguments: BackendKind.allCases)
    func aThrowingBatchBodyCommitsNothing(_ kind: BackendKind) async throws {
        struct Stop: Error {}
        let folder = TempFolder()
        let backend = try kind.make(folder)
        await #expect(throws: Stop.self) {
            try await backend.batch { batch in
                try batch.set(9, for: TestKeys.steps)
                throw Stop()
            }
        }
        #expect(try backend.contains(TestKeys.steps) == false)
        // A write refused by the store's checks: the same error as before, nothing written.
        await #expect(throws: SyncError.self) {
            try await backend.batch { batch in
                try batch.set(9, for: TestKeys.steps)
                try batch.set("round", for: TestKeys.watchFace)   // watchOnly, on the phone
            }
        }
        #expect(try backend.contains(TestKeys.steps) == false)
    }

    /// A large `batch` collects on the caller's thread and is then saved in
    /// chunks off the pool (`BulkWritePipeline`, as `batchNow` does): all of
    /// it commits, in order (a key written twice keeps its later value); one
    /// write refused by the checks commits none of it.
    @Test func aLargeAsyncBatchIsSavedInChunksAllOrNothing() async throws {
        let folder = TempFolder()
        let store = try #require(try BackendKind.sqlite.make(folder) as? SyncStore)
        let total = 3 * BulkWritePipeline.chunkSize + 17
        try await store.batch { batch in
            for i in 0..<total { try batch.set(i, for: TestKeys.daily["d\(i)"]) }
            try batch.set(-5, for: TestKeys.daily["d5"])
        }
        #expect(store.bulkChunksSaved.load(ordering: .relaxed) >= 3)
        #expect(try store.members(of: TestKeys.daily).count == total)
        #expect(try store.value(for: TestKeys.daily["d5"]) == -5)
        #expect(try store.value(for: TestKeys.daily["d\(total - 1)"]) == total - 1)

        await #expect(throws: SyncError.self) {
            try await store.batch { batch in
                for i in 0..<total { try batch.set(i + 1, for: TestKeys.daily["e\(i)"]) }
                try batch.set("round", for: TestKeys.watchFace)   // watchOnly, on the phone
            }
        }
        #expect(try store.members(of: TestKeys.daily).count == total, "nothing of the refused batch committed")
    }
}
