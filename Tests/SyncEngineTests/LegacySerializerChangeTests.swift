import Foundation
@testable import SyncEngine
import Testing

/// A value under a key's legacy name moves to the key on its first read. One
/// written with another serializer moved as it was: every read then gave
/// `type-mismatch`, and the old value was gone from its name.
@Suite struct LegacySerializerChangeTests {
    static let old = Key<String>("units", default: "metric")
    static let counter = Key<Int>("counter", default: 0)

    /// As `ReplacingStore` refuses it: `type-mismatch` naming the legacy key, and nothing moves.
    @Test(arguments: [BackendKind.sqlite, .inMemory])
    func aLegacyValueOfAnotherSerializerIsNotMoved(_ kind: BackendKind) async throws {
        let new = Key<String>("display:units", default: "metric", serializer: .string, legacyName: "units")
        let folder = TempFolder()
        let store = try kind.make(folder, keys: [Self.old, new])
        try await store.set("imperial", for: Self.old)
        let error = #expect(throws: SyncError.self) { try store.value(for: new) }
        #expect(error?.code == .typeMismatch)
        #expect(error?.message.contains("legacy name 'units'") == true, "\(String(describing: error))")
        #expect(try store.value(for: Self.old) == "imperial", "the old value was moved (or removed) though it cannot be read")
        // clear() does not trip on the old value, and removes it with the key.
        try await store.clear()
        #expect(try store.value(for: new) == "metric")
        // The app may write the key anew, which then reads.
        try await store.set("nautical", for: new)
        #expect(try store.value(for: new) == "nautical")
    }
}
