import Foundation
import SyncEngine
import Testing

/// Every backend the typed API can sit on.
enum BackendKind: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite, inMemory, fileValue, replacing

    var testDescription: String { rawValue }

    /// A fresh backend of this kind for `role` in `folder`.
    func make(_ folder: TempFolder, role: DeviceRole = .phone, keys: [any KeyDeclaration] = TestKeys.all,
              maxValueSize: Int? = nil) throws -> any KeyValueBackend {
        let registry = try KeyRegistry(keys)
        var options = StoreOptions(encryption: .keyFile(path: folder.file("\(role).key")))
        if let maxValueSize { options.maxValueSize = maxValueSize }
        switch self {
        case .sqlite:
            return try SyncStore(path: folder.file("\(role).sqlite"), role: role, registry: registry, options: options)
        case .inMemory:
            return InMemoryStore(role: role, registry: registry, maxValueSize: maxValueSize ?? 64 * 1024 * 1024)
        case .fileValue:
            return try FileValueStore(directory: folder.file("\(role)-files"), role: role, registry: registry, options: options)
        case .replacing:
            // A new store taking over from an (empty) old one behaves like the new store.
            let old = InMemoryStore(role: role, registry: registry)
            return try SyncStore(path: folder.file("\(role).sqlite"), role: role, registry: registry, options: options).replacing(old)
        }
    }
}

extension BackendKind {
    /// The kinds that replicate (over a `SyncStore`); an `InMemoryStore` never does.
    static let replicating: [BackendKind] = [.sqlite, .fileValue, .replacing]

    /// The `SyncStore` that replicates `backend`, made by this kind's `make`.
    func replicatingStore(of backend: any KeyValueBackend) -> SyncStore? {
        switch backend {
        case let store as SyncStore: store
        case let files as FileValueStore: files.syncStore
        case let replacing as ReplacingStore: replacing.store as? SyncStore
        default: nil
        }
    }
}

/// One suite, run against every backend: the semantics users rely on.
@Suite struct BackendConformanceTests {
    /// A family's members are listed: those holding a value, by id.
    @Test(arguments: BackendKind.allCases)
    func listsAFamilysMembers(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        #expect(try store.members(of: TestKeys.daily).isEmpty)
        try await store.set(3, for: TestKeys.daily["tue"])
        try await store.set(5, for: TestKeys.daily["mon"])
        try await store.set(7, for: TestKeys.daily["wed"])
        try await store.remove(TestKeys.daily["wed"])
        try await store.set(10, for: TestKeys.steps)
        #expect(try store.members(of: TestKeys.daily) == ["mon", "tue"])
    }

    @Test(arguments: BackendKind.allCases)
    func readsDefaultThenWrittenValue(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        #expect(try store.value(for: TestKeys.steps) == 0)
        #expect(try store.storedValue(for: TestKeys.steps) == nil)
        #expect(try store.contains(TestKeys.steps) == false)
        try await store.set(1_234, for: TestKeys.steps)
        #expect(try await store.get(TestKeys.steps) == 1_234)
        #expect(try store.contains(TestKeys.steps))
        try await store.set(5, for: TestKeys.daily["2026-11-22"])
        #expect(try store.value(for: TestKeys.daily["2026-11-22"]) == 5)
        #expect(try store.value(for: TestKeys.daily["2026-11-23"]) == 0)
    }

    @Test(arguments: BackendKind.allCases)
    func optionalNilIsDistinctFromAbsent(_ kind: BackendKind) async throws {
        let note = Key<String?>("note", default: "fallback")
        let folder = TempFolder()
        let store = try kind.make(folder, keys: [note])
        #expect(try store.value(for: note) == "fallback")
        try await store.set(nil, for: note)
        #expect(try store.value(for: note) == nil)
        #expect(try store.storedValue(for: note) == .some(nil))
    }

    /// A `Key<T?>` whose value was first looked at without its type
    /// (`contains`, `encodedValue`) after the cache let it go (a restart, a
    /// change from the peer): the typed read decodes the stored bytes. Before,
    /// the cache's slot held no decoded value, and a cast of that absent value
    /// to `T?` succeeded: the read gave `nil` for a stored "hello".
    @Test(arguments: BackendKind.allCases)
    func anOptionalKeyLookedAtUntypedFirstReadsItsValue(_ kind: BackendKind) async throws {
        let note = Key<String?>("note", default: "fallback")
        let folder = TempFolder()
        var store = try kind.make(folder, keys: [note])
        try await store.set("hello", for: note)
        if kind != .inMemory {
            store.close()
            store = try kind.make(folder, keys: [note])
        }
        defer { store.close() }
        #expect(try store.contains(note))
        #expect(try store.value(for: note) == "hello")
        #expect(try await store.get(note) == "hello")
    }

    /// A nested optional's `.some(nil)` is written as JSON `null`, which reads
    /// back as `nil`: a read answers what the stored bytes say, what the peer
    /// and a restart read. Before, the written value was kept decoded, so
    /// reads gave `.some(nil)` until the cache let it go, then `nil`.
    @Test(arguments: BackendKind.allCases)
    func aNestedOptionalReadsAsItsStoredBytesDecode(_ kind: BackendKind) async throws {
        let level = Key<Int??>("level", default: 7)
        let folder = TempFolder()
        let store = try kind.make(folder, keys: [level])
        defer { store.close() }
        try await store.set(.some(nil), for: level)
        let fromBytes = try level.serializer.decode(try #require(try store.encodedValue(forKey: "level")))
        #expect(fromBytes == nil)
        #expect(try store.value(for: level) == fromBytes)
        #expect(try await store.get(level) == fromBytes)
        try await store.batch { try $0.set(.some(.some(3)), for: level) }
        #expect(try store.value(for: level) == .some(.some(3)))
    }

    @Test(arguments: BackendKind.allCases)
    func removeLeavesATombstoneAndTheDefault(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        try await store.set("Ada", for: TestKeys.name)
        try await store.remove(TestKeys.name)
        #expect(try store.value(for: TestKeys.name) == "")
        #expect(try store.contains(TestKeys.name) == false)
        let info = try #require(try store.allEntryInfo().first { $0.key == TestKeys.name.name })
        #expect(info.isDeleted)
        // Removing again changes nothing.
        let changes = try store.commit([BackendWrite(key: TestKeys.name.name, bytes: nil)])
        #expect(changes.isEmpty)
    }

    @Test(arguments: BackendKind.allCases)
    func cacheStatisticsCountMissesHitsAndSkippedWrites(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        _ = try store.value(for: TestKeys.steps)   // miss (absence is cached)
        _ = try store.value(for: TestKeys.steps)   // hit
        try await store.set(7, for: TestKeys.steps)
        try await store.set(7, for: TestKeys.steps)  // identical: skipped
        _ = try store.value(for: TestKeys.steps)   // hit (write-through)
        let stats = store.cacheStatistics
        #expect(stats.misses == 1)
        #expect(stats.hits == 2)
        #expect(stats.skippedWrites == 1)
        #expect(abs(stats.hitRate - 2.0 / 3.0) < 0.0001)
        store.resetCacheStatistics()
        #expect(store.cacheStatistics == CacheStatistics())
    }

    @Test(arguments: BackendKind.allCases)
    func batchIsAllOrNothing(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        try await store.set(1, for: TestKeys.steps)
        await #expect(throws: SyncError.self) {
            try await store.batch { batch in
                try batch.set(2, for: TestKeys.steps)
                try batch.set("blue", for: TestKeys.watchFace)  // watch-only: refused on the phone
            }
        }
        #expect(try store.value(for: TestKeys.steps) == 1)
        try await store.batch { batch in
            try batch.set(3, for: TestKeys.steps)
            try batch.set("Ada", for: TestKeys.name)
        }
        #expect(try store.value(for: TestKeys.steps) == 3)
        #expect(try store.value(for: TestKeys.name) == "Ada")
    }

    @Test(arguments: BackendKind.allCases)
    func refusedWritesThrowClearErrorsAndChangeNothing(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder, maxValueSize: 1_000)
        let face = await #expect(throws: SyncError.self) { try await store.set("blue", for: TestKeys.watchFace) }
        #expect(face?.code == .writeNotAllowed)
        let unknown = await #expect(throws: SyncError.self) { try await store.set(1, for: Key<Int>("nobody", default: 0)) }
        #expect(unknown?.code == .unknownKey)
        // A name of any length: the message quotes a bounded part of it, and says how long it is.
        let long = await #expect(throws: SyncError.self) { try await store.set(1, for: Key<Int>(String(repeating: "x", count: 100_000), default: 0)) }
        #expect(long?.code == .unknownKey)
        #expect((long.map { "\($0)".utf8.count } ?? .max) < 1_000 && "\(long.map { "\($0)" } ?? "")".contains("100000 bytes"))
        let mismatched = await #expect(throws: SyncError.self) {
            try await store.set(1, for: Key<Int>("steps", in: Namespace("health").child("daily"), default: 0, policy: .manual))
        }
        #expect(mismatched?.code == .keyDeclarationMismatch)
        let large = await #expect(throws: SyncError.self) { try await store.set(Data(count: 1_001), for: TestKeys.blob) }
        #expect(large?.code == .valueTooLarge)
        #expect(try store.allEntryInfo().isEmpty)
    }

    @Test(arguments: BackendKind.allCases)
    func badStoredBytesAreATypeMismatchNotACrash(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        try store.setEncoded(Array("not a number".utf8), forKey: TestKeys.steps.name)
        let error = #expect(throws: SyncError.self) { try store.value(for: TestKeys.steps) }
        #expect(error?.code == .typeMismatch)
        #expect(try store.encodedValue(forKey: TestKeys.steps.name) == Array("not a number".utf8))
    }

    @Test(arguments: BackendKind.allCases)
    func observersSeeCommittedLocalChanges(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        let changes = store.changes(for: TestKeys.steps)
        let inNamespace = store.changes(in: Namespace("health"))
        try await store.set(10, for: TestKeys.steps)
        try await store.remove(TestKeys.steps)
        let setChange = try await first(of: changes, "the set's change event")
        let removal = try await first(of: changes, "the removal's change event")
        #expect(setChange.kind == .set && setChange.origin == .local)
        #expect(removal.kind == .removed)
        #expect(setChange.version < removal.version)
        #expect(try await first(of: inNamespace, "a change in the namespace").key == TestKeys.steps.name)
    }

    @Test(arguments: BackendKind.allCases)
    func legacyKeyMovesOnFirstRead(_ kind: BackendKind) async throws {
        let old = Key<Int>("old-steps", default: 0)
        let new = Key<Int>("steps-total", default: 0, legacyName: "old-steps")
        let folder = TempFolder()
        let store = try kind.make(folder, keys: [old, new])
        try await store.set(42, for: old)
        #expect(try store.value(for: new) == 42)
        #expect(try store.contains(old) == false)
    }

    @Test(arguments: BackendKind.allCases)
    func clearRemovesWhatThisDeviceMayWrite(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        try await store.set(3, for: TestKeys.steps)
        try await store.set("imperial", for: TestKeys.units)
        try await store.clear()
        #expect(try store.contains(TestKeys.steps) == false)
        #expect(try store.contains(TestKeys.units) == false, "the phone owns phoneWithWatchSync keys: its clear() removes them")
        let watchFolder = TempFolder()
        let watch = try kind.make(watchFolder, role: .watch)
        try await watch.set("round", for: TestKeys.watchFace)
        try await watch.clear()
        #expect(try watch.contains(TestKeys.watchFace) == false)
    }

    /// A watch's `clear()` keeps the read-only copies its phone replicated to it
    /// (they are the phone's to remove). Only backends that replicate can hold one.
    @Test(arguments: BackendKind.replicating)
    func clearKeepsReadOnlyCopies(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let watch = try kind.make(folder, role: .watch)
        let watchStore = try #require(kind.replicatingStore(of: watch))
        let phone = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("phone.key"))))
        try await phone.set("imperial", for: TestKeys.units)
        try await watch.set("round", for: TestKeys.watchFace)
        try await watch.set(7, for: TestKeys.steps)
        Link(phone, watchStore).connect()
        #expect(try watch.value(for: TestKeys.units) == "imperial", "the phone's write arrived as a read-only copy")
        #expect(throws: SyncError.self, "the copy is read-only on the watch") { try watch.setEncoded(Array("\"x\"".utf8), forKey: TestKeys.units.name) }
        try await watch.clear()
        #expect(try watch.contains(TestKeys.watchFace) == false)
        #expect(try watch.contains(TestKeys.steps) == false)
        #expect(try watch.contains(TestKeys.units), "clear() kept the read-only copy")
        #expect(try watch.value(for: TestKeys.units) == "imperial")
    }

    @Test(arguments: BackendKind.allCases)
    func largeAndBinaryValuesRoundTrip(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        let bytes = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try await store.set(bytes, for: TestKeys.blob)
        #expect(try store.value(for: TestKeys.blob) == bytes)
        try await store.set("s3cr3t", for: TestKeys.secret)
        #expect(try store.value(for: TestKeys.secret) == "s3cr3t")
    }

    @Test(arguments: BackendKind.allCases)
    func closedStoreRefusesUse(_ kind: BackendKind) async throws {
        let folder = TempFolder()
        let store = try kind.make(folder)
        store.close()
        let error = await #expect(throws: SyncError.self) { try await store.set(1, for: TestKeys.steps) }
        #expect(error?.code == .closed)
        // Closed wins over what the commit itself would refuse the write for: an `InMemoryStore`
        // said `unknown-key` and `write-not-allowed` here. (The typed API looks a key's
        // declaration up before any commit: a key no registry declares is `unknown-key` there.)
        let unknown = #expect(throws: SyncError.self) { try store.commit([BackendWrite(key: "nobody", bytes: Array("1".utf8))]) }
        #expect(unknown?.code == .closed)
        let notAllowed = await #expect(throws: SyncError.self) { try await store.set("blue", for: TestKeys.watchFace) }
        #expect(notAllowed?.code == .closed)
        let notAllowedRemoval = #expect(throws: SyncError.self) { try store.removeNow(TestKeys.watchFace) }
        #expect(notAllowedRemoval?.code == .closed)
    }

    /// A key read with another declaration than the registered one
    /// (`Key<Double>` under the name of a registered `Key<Int>`) throws
    /// `key-declaration-mismatch` whether or not the cache holds the value:
    /// before, a read the cache answered skipped the check and decoded the
    /// `Int`'s bytes as `5.0`, while the same read after a restart threw.
    @Test(arguments: BackendKind.allCases)
    func aReadWithAnotherDeclarationThrowsAlsoFromTheCache(_ kind: BackendKind) async throws {
        let count = Key<Int>("count", default: 0)
        let countAsDouble = Key<Double>("count", default: 0)
        let folder = TempFolder()
        let store = try kind.make(folder, keys: [count])
        defer { store.close() }
        try await store.set(5, for: count)
        #expect(try store.value(for: count) == 5)
        let error = #expect(throws: SyncError.self) { try store.value(for: countAsDouble) }
        #expect(error?.code == .keyDeclarationMismatch)
        let viaGet = await #expect(throws: SyncError.self) { try await store.get(countAsDouble) }
        #expect(viaGet?.code == .keyDeclarationMismatch)
        #expect(try store.value(for: count) == 5)
    }
}
