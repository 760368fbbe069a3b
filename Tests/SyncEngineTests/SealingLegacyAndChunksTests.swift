import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// Two places the seal at open (a key an app update declares `encrypted`)
/// passed over, which kept the plaintext in the store file.
@Suite(.timeLimit(.minutes(2))) struct SealingLegacyAndChunksTests {
    /// A key renamed and declared encrypted in one update: the value under its
    /// legacy name stayed in plaintext until the key's first read moved it
    /// (for ever, for a key never read).
    @Test func theValueUnderAnEncryptedKeysLegacyNameIsSealedAtOpen() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let marker = "PIN-\(UUID().uuidString)"
        let old = Key<String>("old:pin", default: "", policy: .never)
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([old]))
        try await before.set(marker, for: old)
        before.close()

        let renamed = Key<String>("vault:pin", default: "", policy: .never, security: .encrypted, legacyName: "old:pin")
        let options = StoreOptions(encryption: .keyFile(path: folder.file("master.key")))
        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([renamed]), options: options)
        #expect(try SealedPlaintextScrubTests.files(in: folder.path, holding: marker) == [], "the legacy value is in plaintext in the store's files")
        #expect(try await store.get(renamed) == marker, "the sealed legacy value still moves to the key")
        store.close()
        #expect(try SealedPlaintextScrubTests.files(in: folder.path, holding: marker) == [])
        let again = try SyncStore(path: path, role: .phone, registry: KeyRegistry([renamed]), options: options)
        #expect(try await again.get(renamed) == marker)
        again.close()
    }

    /// An old key still declared (and not encrypted) keeps its value as the app declares it.
    @Test func anOldKeyStillDeclaredIsNotSealed() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let old = Key<String>("old:pin", default: "", policy: .never)
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([old]))
        try await before.set("1234", for: old)
        before.close()
        let renamed = Key<String>("vault:pin", default: "", policy: .never, security: .encrypted, legacyName: "old:pin")
        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([renamed, old]),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        #expect(try store.meta(SyncStore.scrubPendingMeta) == nil)
        #expect(try await store.get(old) == "1234")
        #expect(try await store.get(renamed) == "1234")
        store.close()
    }
}
