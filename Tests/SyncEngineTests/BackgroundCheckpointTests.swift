import Foundation
@testable import SyncEngine
import Testing

/// The WAL is copied into the database file by the background checkpointer
/// (its own connection), not only by the writer once the WAL reaches its
/// inline limit (a 60–150 ms stall of the commit that crosses it).
@Suite struct BackgroundCheckpointTests {
    static func size(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }

    @Test func theWALIsCopiedIntoTheFileInTheBackground() async throws {
        let folder = TempFolder()
        let path = folder.file("store.sqlite")
        let store = try SyncStore(path: path, role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("store.key"))))
        defer { store.close() }
        let before = Self.size(path)
        // Single-row commits: well over the WAL frames that schedule a checkpoint
        // (`BackgroundCheckpointer.threshold`), far below the 16,000 at which the writer would
        // checkpoint inline.
        for i in 0..<3_000 { try store.setNow(i, for: TestKeys.daily["d\(i)"]) }
        #expect(Self.size(path + "-wal") > Int(BackgroundCheckpointer.threshold) * 4_096)
        #expect(Self.size(path + "-wal") < Int(BackgroundCheckpointer.inlineLimit) * 4_096)
        let deadline = ContinuousClock.now + .seconds(20)
        while Self.size(path) < before + 100_000, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(Self.size(path) >= before + 100_000, "the database file is still \(Self.size(path)) bytes (\(before) at first)")
    }
}
