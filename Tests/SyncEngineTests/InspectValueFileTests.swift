import Foundation
@testable import SyncEngine
import Testing

/// `SyncStore.inspect(path:includeValues:)` of a `FileValueStore`'s metadata
/// file gives the values kept in files too (they are not in the rows), and
/// an empty value as empty, not as absent.
@Suite(.timeLimit(.minutes(2))) struct InspectValueFileTests {
    @Test func valuesKeptInFilesAreShown() async throws {
        let folder = TempFolder()
        let directory = folder.file("blobs")
        let note = Key<String>("note", default: "", policy: .never, serializer: .string)
        let empty = Key<String>("empty", default: "x", policy: .never, serializer: .string)
        let store = try FileValueStore(directory: directory, role: .phone, registry: KeyRegistry([note, empty]))
        try await store.set("hello from a file", for: note)
        try await store.set("", for: empty)
        store.close()

        let snapshot = try SyncStore.inspect(path: directory + "/metadata.sqlite", includeValues: true)
        let values = Dictionary(uniqueKeysWithValues: snapshot.entries.map { ($0.key, $0.value) })
        #expect(values["note"] == .some(Array("hello from a file".utf8)), "a value kept in a file is shown as absent")
        #expect(values["empty"] == .some([]))
        let without = try SyncStore.inspect(path: directory + "/metadata.sqlite")
        #expect(without.entries.allSatisfy { $0.value == nil })
    }
}
