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

    /// Chunks of a large value staged before the key was declared encrypted:
    /// kept in plaintext, and (never opening as sealed chunks) the transfer,
    /// resumed after them, failed to assemble in every session.
    @Test func chunksStagedInPlaintextAreDroppedAndTheTransferCompletes() async throws {
        let folder = TempFolder()
        let path = folder.file("s.sqlite")
        let marker = "CHUNK-\(UUID().uuidString)"
        let bytes = Array("\"\(marker) \(String(repeating: "x", count: 200))\"".utf8)
        let plain = Key<String>("vault:blob", default: "")
        let version = HLCTimestamp(physicalMilliseconds: 1_700_000_000_000, counter: 0, node: 0x7777)
        let entry = WireEntry(key: plain.name, version: version, base: .zero, deleted: false, encoding: plain.descriptor.encoding, value: [])
        let size = (bytes.count + 2) / 3
        func chunk(_ index: Int) -> SyncMessage.Chunk {
            let slice = Array(bytes[index * size..<min(bytes.count, (index + 1) * size)])
            return SyncMessage.Chunk(entry: entry, totalSize: bytes.count, totalChecksum: Checksum.crc32(bytes), index: index, count: 3,
                                     checksum: Checksum.crc32(slice), bytes: slice)
        }
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([plain]))
        #expect(try before.stageChunk(chunk(0), encrypted: false).contiguous == 1)
        before.close()
        #expect(try !SealedPlaintextScrubTests.files(in: folder.path, holding: marker).isEmpty)

        let sealed = Key<String>("vault:blob", default: "", security: .encrypted)
        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([sealed]),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("master.key"))))
        #expect(try SealedPlaintextScrubTests.files(in: folder.path, holding: marker) == [], "a chunk staged in plaintext is in the store's files")
        // The peer resumes after the chunks this side says it holds.
        let received = try store.partialTransfers().first { $0.key == entry.key && $0.version == version }?.received ?? 0
        for index in received..<3 { _ = try store.stageChunk(chunk(index), encrypted: true) }
        #expect(try store.assembleChunks(key: entry.key, version: version, encrypted: true) == bytes)
        store.close()
        #expect(try SealedPlaintextScrubTests.files(in: folder.path, holding: marker) == [])
    }
}
