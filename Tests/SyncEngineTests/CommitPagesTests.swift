import CSQLite
import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import Testing

/// How many pages a commit writes to the WAL: what a single write costs on
/// disk, before any checkpoint (a raw one-row commit writes one).
@Suite struct CommitPagesTests {
    /// A write of one key that exists: its row, its place in the stream index
    /// and the commit log's row. Before schema v12 also the log's
    /// AUTOINCREMENT counter in `sqlite_sequence`: four.
    @Test func aSingleWriteWritesThreePages() async throws {
        let folder = TempFolder()
        let path = folder.file("phone.sqlite")
        let store = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("phone.key"))))
        try await store.set(1, for: TestKeys.steps)
        let frames = try walFrames(of: path) { try store.setNow(2, for: TestKeys.steps) }
        #expect(frames == 3)
        store.close()
    }

    /// A remote entry applied as a session applies a batch of one: one page
    /// fewer than before schema v12 as well.
    @Test func oneAppliedRemoteEntryWritesNoCounterPage() async throws {
        let folder = TempFolder()
        let path = folder.file("watch.sqlite")
        let store = try SyncStore(path: path, role: .watch, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("watch.key"))))
        let phoneNode: UInt32 = 0x1001
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        func entry(_ value: Int, counter: UInt16, base: HLCTimestamp) throws -> WireEntry {
            WireEntry(key: TestKeys.steps.name, version: HLCTimestamp(physicalMilliseconds: now, counter: counter, node: phoneNode),
                      base: base, deleted: false, encoding: TestKeys.steps.serializer.identifier,
                      value: try TestKeys.steps.serializer.encode(value))
        }
        let first = try entry(1, counter: 0, base: .zero)
        #expect(try store.applyRemoteBatch([first], from: .phone) == 1)
        let second = try entry(2, counter: 1, base: first.version)
        var applied = 0
        let frames = try walFrames(of: path) { applied = try store.applyRemoteBatch([second], from: .phone) }
        #expect(applied == 1)
        #expect(try store.storedValue(for: TestKeys.steps) == 2)
        #expect(frames == 3)
        store.close()
    }

    /// The WAL frames `commit` appends: the log is checkpointed whole and
    /// truncated first (from a connection of its own), so the commit writes
    /// the log's header and its frames into an empty file.
    private func walFrames(of path: String, _ commit: () throws -> Void) throws -> Int {
        try checkpointAndTruncateWAL(of: path)
        guard try walSize(path) == 0 else {
            throw SyncError(.database, "the WAL still has \(try walSize(path)) bytes after a truncating checkpoint")
        }
        try commit()
        let walHeader = 32, frameHeader = 24, pageSize = 4096
        let size = try walSize(path)
        #expect((size - walHeader) % (frameHeader + pageSize) == 0, "a WAL of \(size) bytes")
        return (size - walHeader) / (frameHeader + pageSize)
    }

    private func walSize(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? NSNumber)?.intValue ?? -1
    }
}
