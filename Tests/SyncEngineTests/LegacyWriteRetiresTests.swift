import Foundation
@testable import SyncEngine
import Testing

/// A write of a key whose value was still under its legacy name (a `set`, a
/// removal, a batch of any size, a pipelined one of 2,048+) left the legacy
/// value live beside the key's new row.
@Suite struct LegacyWriteRetiresTests {
    static let old = Key<String>("units", default: "metric")
    static let counter = Key<Int>("counter", default: 0)

    /// A write of a key whose value is still under its legacy name retires
    /// that value (a tombstone for a declared legacy key), in the write's own
    /// transaction: single writes, small batches and a pipelined batch (2,048+ writes).
    @Test(arguments: [(BackendKind.sqlite, 1), (.sqlite, 10), (.sqlite, 3000), (.inMemory, 1), (.inMemory, 3000)])
    func aWriteOfTheKeyRetiresTheLegacyValue(_ kind: BackendKind, _ count: Int) async throws {
        let new = Key<String>("display:units", default: "metric", legacyName: "units")
        let folder = TempFolder()
        let store = try kind.make(folder, keys: [Self.old, new, Self.counter])
        try await store.set("imperial", for: Self.old)
        try await store.batch { batch in
            for i in 0..<(count - 1) { try batch.set(i, for: Self.counter) }
            try batch.set("nautical", for: new)
        }
        #expect(try store.value(for: new) == "nautical")
        #expect(try store.contains(Self.old) == false, "the legacy value is still live after the key was written")
    }

    /// The legacy key written in the same transaction keeps that value (before or after the key).
    @Test(arguments: [(BackendKind.sqlite, 10), (.sqlite, 3000), (.inMemory, 10)])
    func aLegacyKeyWrittenInTheSameBatchKeepsItsValue(_ kind: BackendKind, _ count: Int) async throws {
        let new = Key<String>("display:units", default: "metric", legacyName: "units")
        let folder = TempFolder()
        let store = try kind.make(folder, keys: [Self.old, new, Self.counter])
        try await store.batch { batch in
            try batch.set("imperial", for: Self.old)
            for i in 0..<count { try batch.set(i, for: Self.counter) }
            try batch.set("nautical", for: new)
        }
        #expect(try store.value(for: Self.old) == "imperial")
        #expect(try store.value(for: new) == "nautical")
    }

    /// The legacy key undeclared (the app dropped it): its row goes.
    @Test func aPipelinedBatchRetiresAnUndeclaredLegacyRow() async throws {
        let new = Key<String>("display:units", default: "metric", legacyName: "units")
        let folder = TempFolder()
        let path = folder.file("phone.sqlite")
        var options = StoreOptions()
        options.externalChangePollInterval = nil
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([Self.old]), options: options)
        try await before.set("imperial", for: Self.old)
        before.close()
        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([new, Self.counter]), options: options)
        try await store.batch { batch in
            for i in 0..<3000 { try batch.set(i, for: Self.counter) }
            try batch.set("nautical", for: new)
        }
        #expect(try store.value(for: new) == "nautical")
        let legacy = try store.entryInfo(forKey: "units")
        #expect(legacy == nil || legacy?.isDeleted == true, "the legacy row is still live")
    }

    /// A key read while neither it nor its legacy name held a value, then a
    /// value written under the legacy name (by the app, or by an older app on
    /// the peer): the next read moves it. Before, the first read's absence
    /// stayed cached, so the key read its default until the app restarted
    /// and then the moved value, a silent change of value.
    @Test(arguments: BackendKind.allCases)
    func aLegacyValueWrittenAfterAReadOfTheAbsentKeyMovesOnTheNextRead(_ kind: BackendKind) async throws {
        let new = Key<String>("display:units", default: "metric", legacyName: "units")
        let folder = TempFolder()
        let store = try kind.make(folder, keys: [Self.old, new])
        defer { store.close() }
        #expect(try store.value(for: new) == "metric")
        #expect(try store.value(for: new) == "metric")
        try await store.set("imperial", for: Self.old)
        #expect(try store.value(for: new) == "imperial")
        #expect(try store.contains(Self.old) == false)
    }

    /// The same with the legacy value coming from the peer.
    @Test func aLegacyValueFromThePeerAfterAReadOfTheAbsentKeyMovesOnTheNextRead() throws {
        let new = Key<String>("display:units", default: "metric", legacyName: "units")
        let pair = try Pair(keys: [Self.old, new])
        defer { pair.phone.close(); pair.watch.close() }
        #expect(try pair.phone.value(for: new) == "metric")
        try pair.watch.setNow("imperial", for: Self.old)
        let link = Link(pair.phone, pair.watch)
        link.connect()
        link.settle()
        #expect(try pair.phone.entryInfo(forKey: "units")?.isDeleted == false)  // arrived (read without the cache)
        #expect(try pair.phone.value(for: new) == "imperial")
    }
}
