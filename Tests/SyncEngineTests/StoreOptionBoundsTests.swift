import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// `StoreOptions.maxValueSize = .max` (no limit of the app's own) trapped on
/// an arithmetic overflow when the first chunk of an encrypted large value
/// arrived from the peer (the staging bound added the sealing overhead to it).
@Suite struct UnboundedMaxValueSizeTests {
    @Test func stagingAnEncryptedChunkWithNoValueLimitDoesNotTrap() throws {
        let folder = TempFolder()
        var options = StoreOptions(encryption: .keyFile(path: folder.file("watch.key")))
        options.maxValueSize = .max
        let store = try SyncStore(path: folder.file("watch.sqlite"), role: .watch, registry: try TestKeys.registry(), options: options)
        defer { store.close() }
        let bytes: [UInt8] = [9, 9, 9, 9]
        let entry = WireEntry(key: TestKeys.blob.name, version: HLCTimestamp(packed: 5, node: 77), base: .zero, deleted: false,
                              encoding: TestKeys.blob.descriptor.encoding, value: [])
        let chunk = SyncMessage.Chunk(entry: entry, totalSize: 8, totalChecksum: 1, index: 0, count: 2, checksum: Checksum.crc32(bytes), bytes: bytes)
        #expect(try store.stageChunk(chunk, encrypted: true).contiguous == 1)
    }
}
