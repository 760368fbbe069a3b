import Foundation
@testable import SyncEngine
import Testing

/// Each value file ends with a CRC-32 of its bytes: damage that keeps the
/// file's length is found when it is read, not handed to the app (or sent to
/// the peer) as the value.
@Suite struct ValueFileChecksumTests {
    private static func open(_ folder: TempFolder) throws -> FileValueStore {
        try FileValueStore(directory: folder.file("blobs"), role: .phone, registry: TestKeys.registry(),
                           options: StoreOptions(encryption: .keyFile(path: folder.file("k"))))
    }

    private static func file(of key: String, in store: FileValueStore) throws -> String {
        let info = try #require(try store.syncStore.entryInfo(forKey: key))
        return store.directory + "/values/" + ValueFiles.fileName(key: key, version: info.version)
    }

    @Test func aValueFileDamagedInPlaceIsACorruptValueFile() async throws {
        let folder = TempFolder()
        let store = try Self.open(folder)
        defer { store.close() }
        try await store.set(5, for: TestKeys.steps)
        try await store.set(Data(repeating: 3, count: 5_000), for: TestKeys.blob)
        let path = try Self.file(of: TestKeys.steps.name, in: store)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        let five = try #require(bytes.firstIndex(of: UInt8(ascii: "5")))
        bytes[five] = UInt8(ascii: "7")  // the same length: only a checksum can tell
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        store.syncStore.cache.invalidateAll()

        let error = #expect(throws: SyncError.self) { try store.value(for: TestKeys.steps) }
        #expect(error?.code == .corruptValueFile)
        #expect(error?.message.contains("checksum") == true)
        #expect(try store.value(for: TestKeys.blob) == Data(repeating: 3, count: 5_000))
        // Writing the key again repairs it.
        try await store.set(6, for: TestKeys.steps)
        #expect(try store.value(for: TestKeys.steps) == 6)
    }

    @Test func aFileWrittenWithoutTheChecksumIsReadAsItIs() async throws {
        let folder = TempFolder()
        let store = try Self.open(folder)
        defer { store.close() }
        try await store.set(Data([1, 2, 3, 4]), for: TestKeys.blob)
        let path = try Self.file(of: TestKeys.blob.name, in: store)
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(bytes.count == 4 + ValueFiles.trailerSize)
        // As a build before the checksum wrote it.
        try Data(bytes.prefix(4)).write(to: URL(fileURLWithPath: path))
        store.syncStore.cache.invalidateAll()
        #expect(try store.value(for: TestKeys.blob) == Data([1, 2, 3, 4]))
    }
}
