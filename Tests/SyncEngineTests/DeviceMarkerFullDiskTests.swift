import Foundation
@_spi(Testing) @testable import SyncEngine
import Testing

/// `renewsNodeIDWhenRestored` mends the marker beside the store in a
/// transaction. When that transaction cannot commit (a full disk), the next
/// open must not renew the node id a second time (or for no reason): one
/// store restored takes one new node id, and a store whose option is new takes none.
@Suite(.timeLimit(.minutes(2))) struct DeviceMarkerFullDiskTests {
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-device-marker-full")

    @Test func aMarkerMendingThatCouldNotCommitRenewsOnceAtMost() throws {
        let folder = TempFolder()
        let path = folder.file("watch.sqlite")
        let registry = try TestKeys.registry()
        func options(marked: Bool) -> StoreOptions {
            var options = StoreOptions(encryption: .keyFile(path: folder.file("watch.key")))
            options.vfsName = Self.vfs.name
            options.durability = .full
            options.externalChangePollInterval = nil
            options.renewsNodeIDWhenRestored = marked
            return options
        }
        func open(marked: Bool = true) throws -> UInt32 {
            let store = try SyncStore(path: path, role: .watch, registry: registry, options: options(marked: marked))
            defer { store.close() }
            return store.nodeID
        }
        let original = try open(marked: false)
        // The option newly on, on a full disk: the open fails; with room, the node id stays.
        Self.vfs.setDiskFull(true)
        #expect(throws: (any Error).self) { try open() }
        Self.vfs.setDiskFull(false)
        #expect(try open() == original, "the option newly on renewed the node id after an open that could not commit")
        #expect(try open() == original)

        // Restored (marker gone), on a full disk: the open fails; with room, one renewal, then none.
        try FileManager.default.removeItem(atPath: SyncStore.deviceMarkerPath(path))
        Self.vfs.setDiskFull(true)
        #expect(throws: (any Error).self) { try open() }
        Self.vfs.setDiskFull(false)
        let renewed = try open()
        #expect(renewed != original)
        #expect(try open() == renewed, "the node id was renewed again")
    }
}
