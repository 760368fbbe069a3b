import Foundation
@testable import SyncEngine
import Testing

/// A write of the bytes a key holds is skipped only when the stored value
/// is kept as the write would keep it.
@Suite(.timeLimit(.minutes(2))) struct UnchangedWriteTests {
    /// A sealed value that no longer decrypts is replaced by a write of the
    /// key, as its error says, also when the new value is empty.
    @Test func aDamagedSealedValueIsReplacedByAnEmptyWrite() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let note = Key<String>("vault:note", default: "default", policy: .never, serializer: .string, security: .encrypted)
        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        let first = try SyncStore(path: path, role: .phone, registry: KeyRegistry([note]), options: options)
        try await first.set("abc", for: note)
        first.close()
        try rawSQL(path, "UPDATE entries SET value = x'0102030405' WHERE key = 'vault:note'")

        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([note]), options: options)
        await #expect(throws: SyncError.self) { try await store.get(note) }
        try await store.set("", for: note)
        #expect(try await store.get(note) == "", "the write of an empty value was skipped: the damaged value stays")
    }

    /// A key whose serializer changed (an app update) holds bytes of the old
    /// one, which reads refuse (`type-mismatch`); the app writing the value
    /// again with the new serializer replaces them, also when the bytes are
    /// the same (`.data` and `.string` write "abc" alike).
    @Test func aWriteWithAnotherSerializerIsNotSkippedForEqualBytes() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let old = Key<Data>("note", default: Data(), policy: .never, serializer: .data)
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([old]))
        try await before.set(Data("abc".utf8), for: old)
        before.close()

        let note = Key<String>("note", default: "", policy: .never, serializer: .string)
        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([note]))
        await #expect { try await store.get(note) } throws: { ($0 as? SyncError)?.code == .typeMismatch }
        try await store.set("abc", for: note)
        #expect(try await store.get(note) == "abc", "the write was skipped: the key still holds the old serializer's value")
        store.close()
        let again = try SyncStore(path: path, role: .phone, registry: KeyRegistry([note]))
        #expect(try await again.get(note) == "abc")
    }
}
