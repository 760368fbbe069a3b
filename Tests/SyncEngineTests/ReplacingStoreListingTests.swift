import Foundation
@testable import SyncEngine
import Testing

/// A `ReplacingStore` lists the values its first reads would move from the
/// replaced store: `clear()` removes them (a value cleared must not come
/// back from the old file on the next read), and `members(of:)` finds them.
@Suite(.timeLimit(.minutes(2))) struct ReplacingStoreListingTests {
    @Test func clearRemovesValuesNotMovedYet() async throws {
        let folder = TempFolder()
        let registry = try KeyRegistry([TestKeys.steps, TestKeys.daily])
        let old = try SyncStore(path: folder.file("plain.sqlite"), role: .phone, registry: registry)
        try await old.set(5, for: TestKeys.steps)
        try await old.set(9, for: TestKeys.daily["2026-12-01"])
        let new = try SyncStore(path: folder.file("new.sqlite"), role: .phone, registry: registry)
        let store = new.replacing(old)
        try await store.set(1, for: TestKeys.daily["2026-12-02"])

        #expect(try store.members(of: TestKeys.daily) == ["2026-12-01", "2026-12-02"])
        #expect(try store.allEntryInfo().map(\.key) == [TestKeys.steps.name, TestKeys.daily["2026-12-01"].name, TestKeys.daily["2026-12-02"].name].sorted())
        try await store.clear()
        #expect(try await store.get(TestKeys.steps) == 0, "a value cleared came back from the replaced store")
        #expect(try await store.get(TestKeys.daily["2026-12-01"]) == 0)
        #expect(try store.members(of: TestKeys.daily).isEmpty)
        #expect(try old.contains(TestKeys.steps) == false)
    }
}
