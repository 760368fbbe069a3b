import Foundation
@testable import SyncEngine
import Synchronization
import Testing

/// `InMemoryStore` promises `SyncStore`'s checks and versions without a
/// file. Before: every entry it listed was in lane `none` and not pending
/// (`SyncStore`, which has no peer yet, says every change of a key that
/// syncs from this device is pending, in the lane its policy gives it); and
/// a batch whose clock failed partway kept the writes before the failure
/// (`SyncStore`'s transaction keeps none), as did a read that moved a legacy
/// value in and failed to retire the legacy key. Each test runs the same
/// calls on both stores.
@Suite(.timeLimit(.minutes(2))) struct InMemoryStoreParityTests {
    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        case sqlite, inMemory
        var testDescription: String { rawValue }
    }

    static let oldUnits = Key<String>("measure", default: "metric")
    static let units = Key<String>("display:measure", default: "metric", legacyName: "measure")
    static let oldTheme = Key<String>("theme", default: "light")
    static let theme = Key<String>("display:theme", default: "light", legacyName: "theme")

    static func make(_ kind: Kind, _ folder: TempFolder, keys: [any KeyDeclaration], clock: any PhysicalClock = ManualClock()) throws -> any KeyValueBackend {
        let registry = try KeyRegistry(keys)
        switch kind {
        case .sqlite:
            var options = StoreOptions(clock: clock)
            options.externalChangePollInterval = nil
            return try SyncStore(path: folder.file("\(UUID().uuidString).sqlite"), role: .phone, registry: registry, options: options)
        case .inMemory:
            return InMemoryStore(role: .phone, registry: registry, clock: clock)
        }
    }

    struct Listed: Equatable, CustomStringConvertible {
        var key: String
        var deleted: Bool
        var lane: SyncLane
        var pending: Bool
        var description: String { "\(key)\(deleted ? " (removed)" : ""): \(lane)\(pending ? ", pending" : "")" }
    }

    static func listed(_ store: any KeyValueBackend) throws -> [Listed] {
        try store.allEntryInfo().map { Listed(key: $0.key, deleted: $0.isDeleted, lane: $0.lane, pending: $0.isPending) }
    }

    /// Keys of every policy and availability, a value over the automatic
    /// limit, a removal, a value moved from its legacy key by a read and a
    /// legacy value a write retired: the same lanes and pending states.
    @Test func entriesListTheSameLanesAndPendingStates() async throws {
        let folder = TempFolder()
        let keys = TestKeys.all.filter { $0.descriptor.name != TestKeys.secret.name } + [Self.oldUnits, Self.units, Self.oldTheme, Self.theme]
        var listings: [Kind: [Listed]] = [:]
        for kind in Kind.allCases {
            let store = try Self.make(kind, folder, keys: keys)
            defer { store.close() }
            try await store.set(10, for: TestKeys.steps)                 // automaticSmall, all
            try await store.set("Ada", for: TestKeys.name)               // manual
            try await store.set("phone", for: TestKeys.token)            // phoneOnly
            try await store.set("imperial", for: TestKeys.units)         // phoneWithWatchSync
            try await store.set("notes", for: TestKeys.draft)            // never
            try await store.set(Data(count: SyncPolicy.automaticLimit + 1), for: TestKeys.blob)   // deferred for its size
            try await store.set(3, for: TestKeys.daily["mon"])
            try await store.set(4, for: TestKeys.daily["tue"])
            try await store.remove(TestKeys.daily["tue"])
            try await store.set("imperial", for: Self.oldUnits)
            #expect(try await store.get(Self.units) == "imperial")      // moved in by the read
            try await store.set("dark", for: Self.oldTheme)
            try await store.set("sepia", for: Self.theme)               // retires the legacy value
            listings[kind] = try Self.listed(store)
        }
        let sqlite = try #require(listings[.sqlite])
        #expect(sqlite.contains { $0.pending } && sqlite.contains { !$0.pending }, "\(sqlite)")
        #expect(listings[.inMemory] == sqlite)
    }

    /// A wall clock that reads right `budget` more times once armed, then
    /// before 1970 (`clock-out-of-range`).
    final class FailingClock: PhysicalClock {
        private let state = Mutex<Int?>(nil)
        func nowMilliseconds() -> Int64 {
            state.withLock { budget in
                guard let left = budget else { return 1_700_000_000_000 }
                guard left > 0 else { return -1 }
                budget = left - 1
                return 1_700_000_000_000
            }
        }
        func arm(_ budget: Int?) { state.withLock { $0 = budget } }
    }

    /// Whatever read of the clock fails, a batch is written whole or not at all.
    @Test(arguments: Kind.allCases)
    func aBatchWhoseClockFailsPartwayChangesNothing(_ kind: Kind) async throws {
        let folder = TempFolder()
        var failed = 0
        for budget in 0...4 {
            let clock = FailingClock()
            let store = try Self.make(kind, folder, keys: TestKeys.all.filter { $0.descriptor.name != TestKeys.secret.name }, clock: clock)
            defer { store.close() }
            try await store.set(1, for: TestKeys.steps)
            let before = try store.allEntryInfo()
            clock.arm(budget)
            do {
                try store.batchNow { batch in
                    try batch.set(2, for: TestKeys.steps)
                    try batch.set("Ada", for: TestKeys.name)
                    try batch.set(3, for: TestKeys.daily["mon"])
                }
                clock.arm(nil)
                #expect(try store.value(for: TestKeys.steps) == 2 && store.value(for: TestKeys.daily["mon"]) == 3, "budget \(budget)")
            } catch let error as SyncError {
                clock.arm(nil)
                failed += 1
                #expect(error.code == .clockOutOfRange, "budget \(budget): \(error)")
                #expect(try store.allEntryInfo() == before, "budget \(budget): a failed batch kept some of its writes")
                #expect(try store.value(for: TestKeys.steps) == 1 && store.value(for: TestKeys.name) == "", "budget \(budget)")
            }
        }
        #expect(failed > 0, "no budget made the clock fail")
    }

    /// A read that moves a legacy value in writes the key and retires the
    /// legacy key together, or neither.
    @Test(arguments: Kind.allCases)
    func aLegacyMoveWhoseClockFailsPartwayChangesNothing(_ kind: Kind) async throws {
        let folder = TempFolder()
        var failed = 0
        for budget in 0...4 {
            let clock = FailingClock()
            let store = try Self.make(kind, folder, keys: [Self.oldUnits, Self.units], clock: clock)
            defer { store.close() }
            try await store.set("imperial", for: Self.oldUnits)
            let before = try store.allEntryInfo()
            clock.arm(budget)
            do {
                let value = try store.value(for: Self.units)
                clock.arm(nil)
                #expect(value == "imperial", "budget \(budget)")
                #expect(try store.allEntryInfo().first { $0.key == Self.oldUnits.name }?.isDeleted == true, "budget \(budget)")
            } catch let error as SyncError {
                clock.arm(nil)
                failed += 1
                #expect(error.code == .clockOutOfRange, "budget \(budget): \(error)")
                #expect(try store.allEntryInfo() == before, "budget \(budget): a failed move kept half of it")
                // The next read, with the clock right, moves it (the failed one left no absence cached).
                #expect(try store.value(for: Self.units) == "imperial", "budget \(budget)")
            }
        }
        #expect(failed > 0, "no budget made the clock fail")
    }
}
