import Foundation
@_spi(Testing) @testable import SyncEngine
import Testing

/// The connection that syncs the WAL for acknowledgements (`WALSyncer`).
@Suite(.serialized, .timeLimit(.minutes(5))) struct WALSyncerTests {
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-crash-walsync")
    static let items = KeyFamily<Data>("item", in: Namespace("walsync"), default: Data(), policy: .automaticSmall, serializer: .data)

    /// The syncer reads once, to open the WAL on its connection; every later
    /// sync is the fsync alone (each read cost about a quarter of a sync's
    /// CPU; before, every sync read). What each sync covered survives a power
    /// cut, also after another connection copied the WAL into the file and
    /// truncated it, so that the next commits start it over.
    @Test func syncsAfterTheFirstRunNoReadAndStillReachStableStorage() throws {
        let vfs = Self.vfs
        vfs.disarm()
        vfs.powerOn()
        let folder = TempFolder()
        let path = folder.file("watch.sqlite")
        let registry = try KeyRegistry([Self.items])
        do {
            let store = try SyncStore(path: path, role: .watch, registry: registry, options: powerCutOptions(vfs: vfs))
            defer { store.close() }
            for index in 0..<5 {
                try store.setNow(Data([UInt8(index)]), for: Self.items["k\(index)"])
                try store.syncCommitted()
            }
            try checkpointAndTruncateWAL(of: path, vfs: vfs.name)
            try store.setNow(Data([9]), for: Self.items["after-truncate"])
            try store.syncCommitted()
            #expect(store.walSyncCount == 6)
            #expect(store.walOpeningReadCount == 1)
            vfs.powerCut()
        }
        vfs.powerOn()
        let rebooted = try SyncStore(path: path, role: .watch, registry: registry, options: powerCutOptions())
        defer { rebooted.close() }
        for index in 0..<5 {
            #expect(try rebooted.storedValue(for: Self.items["k\(index)"]) == Data([UInt8(index)]))
        }
        #expect(try rebooted.storedValue(for: Self.items["after-truncate"]) == Data([9]))
    }
}
