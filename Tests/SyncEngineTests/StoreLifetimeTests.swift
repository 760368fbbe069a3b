import Foundation
@testable import SyncEngine
import Testing

/// A store dropped without `close()` is freed, and its SQLite connections (and
/// file descriptors) with it: a long-running process that opens and drops
/// stores (the simulator, an app's extension) must not run out of descriptors.
@Suite(.enabled(if: FileManager.default.fileExists(atPath: "/proc/self/fd"), "counts descriptors in /proc/self/fd (Linux)"))
struct StoreLifetimeTests {
    /// Descriptors of this process open on files under `folder` (Linux: /proc/self/fd).
    static func openDescriptors(under folder: String) throws -> Int {
        let fds = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")
        return fds.filter { fd in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)"))?.hasPrefix(folder) == true
        }.count
    }

    static func open(_ folder: TempFolder, _ role: DeviceRole) throws -> SyncStore {
        try SyncStore(path: folder.file("\(role).sqlite"), role: role, registry: try TestKeys.registry(),
                      options: StoreOptions(encryption: .keyFile(path: folder.file("\(role).key"))))
    }

    @Test func droppedStoreIsFreedWithItsFiles() async throws {
        let folder = TempFolder()
        weak var weakStore: SyncStore?
        do {
            let store = try Self.open(folder, .phone)
            weakStore = store
            try await store.set(1, for: TestKeys.steps)
            _ = try store.value(for: TestKeys.steps)
            #expect(try Self.openDescriptors(under: folder.path) > 0)
        }
        #expect(weakStore == nil)
        #expect(try Self.openDescriptors(under: folder.path) == 0)
    }

    @Test func storesThatReplicatedAreFreed() async throws {
        let folder = TempFolder()
        weak var weakPhone: SyncStore?
        weak var weakWatch: SyncStore?
        do {
            let phone = try Self.open(folder, .phone)
            let watch = try Self.open(folder, .watch)
            weakPhone = phone
            weakWatch = watch
            try await phone.set(5, for: TestKeys.steps)
            let link = Link(phone, watch)
            link.connect()
            #expect(try watch.value(for: TestKeys.steps) == 5)
        }
        #expect(weakPhone == nil && weakWatch == nil)
        #expect(try Self.openDescriptors(under: folder.path) == 0)
    }
}
