import Foundation
@_spi(Benchmarks) @_spi(Testing) @testable import SyncEngine
@testable import SyncTransport
import Synchronization
import Testing

/// A resolver's merge keeps the local version with a new value: the same
/// version written again. Its value file had one name per version, so the
/// rewrite replaced the committed file before the commit.
@Suite(.serialized) struct ValueFileRewriteTests {
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-value-file-rewrite")

    static let watchNode: UInt32 = 0x5EED

    /// An older concurrent value from the peer, merged into the local one.
    static func concurrentEntry(_ value: [String], olderThan local: HLCTimestamp) -> WireEntry {
        WireEntry(key: "tags", version: HLCTimestamp(packed: local.packed - 1_000, node: watchNode), base: .zero, deleted: false,
                  encoding: "json", value: Array(try! JSONEncoder().encode(value)))
    }

    /// The merge's transaction rolled back (the disk full as SQLite wrote
    /// it): its file was deleted, and it was the committed row's file too.
    @Test func aRolledBackMergeLeavesTheCommittedValue() async throws {
        let folder = TempFolder()
        var options = StoreOptions()
        options.vfsName = Self.vfs.name
        let files = try FileValueStore(directory: folder.file("files"), role: .phone, registry: try KeyRegistry([TestKeys.tags]), options: options)
        try await files.set(["a"], for: TestKeys.tags)
        let local = try #require(try files.syncStore.entryInfo(forKey: "tags")?.version)
        Self.vfs.setDiskFull(true)
        #expect(throws: SyncError.self) {
            try files.syncStore.applyRemoteBatch([Self.concurrentEntry(["b"], olderThan: local)], from: .watch)
        }
        Self.vfs.setDiskFull(false)
        #expect(try files.value(for: TestKeys.tags) == ["a"])
        try files.syncStore.applyRemoteBatch([Self.concurrentEntry(["b"], olderThan: local)], from: .watch)
        #expect(try files.value(for: TestKeys.tags) == ["a", "b"])
        #expect(try files.syncStore.entryInfo(forKey: "tags")?.version == local, "the merge kept the local version")
        files.close()
        // Reopened (which removes files no row points at): the merged value, in one file.
        let reopened = try FileValueStore(directory: folder.file("files"), role: .phone, registry: try KeyRegistry([TestKeys.tags]), options: options)
        #expect(try reopened.value(for: TestKeys.tags) == ["a", "b"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.file("files") + "/values").filter { $0.hasSuffix(".value") }.count == 1)
        reopened.close()
    }
}
