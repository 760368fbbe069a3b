import Foundation
@_spi(Testing) @testable import SyncEngine
import Testing

/// A read of a key whose value is still under its legacy name moves it (a
/// write). On a full device that write fails; the read still gives the value
/// stored before (moved by a later read), not `storage-full`, which an app's
/// `@Stored` property turns into the key's default.
@Suite(.timeLimit(.minutes(2))) struct LegacyReadOnFullDiskTests {
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-legacy-read-full")
    static let oldUnits = Key<String>("units", default: "metric")
    static let units = Key<String>("display:units", default: "metric", legacyName: "units")

    @Test func aLegacyValueReadsOnAFullDisk() async throws {
        let folder = TempFolder()
        let path = folder.file("watch.sqlite")
        var options = StoreOptions()
        options.vfsName = Self.vfs.name
        options.durability = .full
        options.externalChangePollInterval = nil
        let before = try SyncStore(path: path, role: .phone, registry: KeyRegistry([Self.oldUnits]), options: options)
        try await before.set("imperial", for: Self.oldUnits)
        before.close()

        let store = try SyncStore(path: path, role: .phone, registry: KeyRegistry([Self.units]), options: options)
        Self.vfs.setDiskFull(true)
        defer { Self.vfs.setDiskFull(false) }
        #expect(try await store.get(Self.units) == "imperial", "a value stored before did not read on a full disk")
        let wrapper = StoredValue(Self.units, store: store)
        #expect(wrapper.value == "imperial")
        Self.vfs.setDiskFull(false)
        // With room again, the read moves it.
        #expect(try await store.get(Self.units) == "imperial")
        #expect(try store.entryInfo(forKey: Self.units.name) != nil)
    }
}
