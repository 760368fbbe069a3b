import Foundation
import Synchronization
@testable import SyncEngine
import Testing

/// What the README says of a will-commit hook that reads its store: the read
/// does not wait for the write (no deadlock) and gives the value from before
/// this write, from the cache or a reader connection. (Writing from the hook
/// throws: `DamagedStoreAndMisuseTests`.)
@Suite struct WillCommitHookReadTests {
    @Test func aHookReadsTheValuesFromBeforeTheWrite() async throws {
        let folder = TempFolder()
        let store = try SyncStore(path: folder.file("s.sqlite"), role: .phone, registry: try TestKeys.registry(),
                                  options: StoreOptions(encryption: .keyFile(path: folder.file("k"))))
        try await store.set("a", for: TestKeys.name)
        try await store.set(4, for: TestKeys.steps)
        store.cache.invalidateAll()
        let seen = Mutex<[String]>([])
        store.addWillCommitHook { changes in
            guard changes.contains(where: { $0.key == TestKeys.name.name }) else { return }
            let n = try store.value(for: TestKeys.name)
            let s = try store.value(for: TestKeys.steps)
            seen.withLock { $0.append("\(n) \(s)") }
        }
        try await store.set("x", for: TestKeys.name)
        try await store.set("y", for: TestKeys.name)
        #expect(seen.withLock { $0 } == ["a 4", "x 4"])
        #expect(try await store.get(TestKeys.name) == "y")
        #expect(try await store.get(TestKeys.steps) == 4)
    }
}
