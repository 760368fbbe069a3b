import Foundation
@testable import SyncEngine
import Testing

/// `clear()` removes a value still kept under a key's legacy name (an older
/// app's key, no longer declared): the next read must not move it back.
@Suite(.timeLimit(.minutes(2))) struct ClearLegacyKeyTests {
    static let oldUnits = Key<String>("units", default: "metric")
    static let units = Key<String>("display:units", default: "metric", legacyName: "units")

    @Test func aSyncStoreClearsAValueNotMovedFromItsLegacyKeyYet() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([Self.oldUnits]))
        try await before.set("imperial", for: Self.oldUnits)
        before.close()

        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([Self.units]))
        try await store.clear()
        #expect(try await store.get(Self.units) == "metric", "a value cleared came back from its legacy key")
        store.close()
        let again = try SyncStore(path: path, role: .phone, registry: KeyRegistry([Self.units]))
        #expect(try await again.get(Self.units) == "metric")
    }

    /// The same for `remove`: the key had no row of its own, so the removal
    /// was skipped as unchanged, and the next read moved the legacy value in.
    @Test func aRemovalIsNotUndoneByTheLegacyValue() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([Self.oldUnits]))
        try await before.set("imperial", for: Self.oldUnits)
        before.close()

        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([Self.units]))
        try await store.remove(Self.units)
        #expect(try await store.get(Self.units) == "metric", "a removed value came back from its legacy key")
        #expect(try store.contains(Self.units) == false)
        store.close()
        let again = try SyncStore(path: path, role: .phone, registry: KeyRegistry([Self.units]))
        #expect(try await again.get(Self.units) == "metric")
    }

    @Test func anInMemoryStoreKeepsTheRemovalToo() async throws {
        let store = InMemoryStore(role: .phone, registry: try KeyRegistry([Self.oldUnits, Self.units]))
        try await store.set("imperial", for: Self.oldUnits)
        try await store.remove(Self.units)
        #expect(try await store.get(Self.units) == "metric", "a removed value came back from its legacy key")
    }
}
