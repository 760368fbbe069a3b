import CSQLite
import Foundation
@_spi(Testing) @testable import SyncEngine
import Testing

/// `renewsNodeIDWhenRestored` keeps a token in the store and in a file beside
/// it. A process killed or a power cut at any point of the open that changes
/// the token must not leave the two disagreeing on a store that was never
/// copied: the next open would take a new node id (its peers re-sync
/// everything) or renew a restored store a second time. Each run cuts at the
/// next write, truncate or sync of the database (CrashVFS), then lets the
/// marker file keep its last rename or lose whatever was not yet on stable
/// storage (its bytes put back to the last ones the store synced).
@Suite(.serialized, .timeLimit(.minutes(4))) struct DeviceMarkerPowerCutTests {
    static let vfs = try! CrashVFS.register(name: "syncengine-tests-device-marker-power-cut")

    struct Setup {
        let folder = TempFolder()
        var path: String { folder.file("watch.sqlite") }
        var markerPath: String { SyncStore.deviceMarkerPath(path) }
        let registry: KeyRegistry

        func options(marked: Bool, preferring node: UInt32? = nil) -> StoreOptions {
            var options = StoreOptions(encryption: .keyFile(path: folder.file("watch.key")))
            options.vfsName = DeviceMarkerPowerCutTests.vfs.name
            options.externalChangePollInterval = nil
            options.renewsNodeIDWhenRestored = marked
            options.nodeID = node
            return options
        }

        func open(marked: Bool = true, preferring node: UInt32? = nil) throws -> UInt32 {
            let store = try SyncStore(path: path, role: .watch, registry: registry, options: options(marked: marked, preferring: node))
            defer { store.close() }
            return store.nodeID
        }

        func marker() -> String? { try? String(contentsOfFile: markerPath, encoding: .utf8) }

        func putMarker(_ token: String?) throws {
            if let token {
                try token.write(toFile: markerPath, atomically: false, encoding: .utf8)
            } else if FileManager.default.fileExists(atPath: markerPath) {
                try FileManager.default.removeItem(atPath: markerPath)
            }
        }
    }

    enum Crash: CaseIterable {
        /// The power fails: unsynced database writes are lost, and so is a marker file not yet on stable storage.
        case powerCutLosingTheFile
        /// The power fails: unsynced database writes are lost; the marker file's last rename reached the disk.
        case powerCutKeepingTheFile
        /// The process is killed: what it wrote stays (the kernel has it), synced or not.
        case processKilled
    }

    /// Runs `open` (an open with the option, then its close) with a crash at
    /// its 1st, 2nd, … database operation, each run on a fresh copy of the
    /// state `prepare` leaves, until one runs through; after each crash
    /// `check` gets the node id the interrupted open gave (nil if it failed).
    static func sweep(_ crash: Crash, prepare: (Setup) throws -> Void, open: (Setup) throws -> UInt32,
                      check: (Setup, UInt32?, Int) throws -> Void) throws {
        var cutAt = 1
        while cutAt < 400 {
            let setup = Setup(registry: try TestKeys.registry())
            try prepare(setup)
            vfs.writeBack()  // what `prepare` did is on the disk
            let before = setup.marker()
            SyncStore.durableDeviceMarkersForTests.withLock { $0[setup.markerPath] = before ?? "" }
            defer { _ = SyncStore.durableDeviceMarkersForTests.withLock { $0.removeValue(forKey: setup.markerPath) } }
            vfs.armPowerCut(afterOperations: cutAt, keeping: crash == .processKilled ? .random(seed: 1, percent: 100) : .none)
            let opened = try? open(setup)
            let ranThrough = vfs.statistics.isArmed
            vfs.disarm()
            if vfs.statistics.isPowered {
                if crash == .processKilled { vfs.writeBack() }
                vfs.powerCut()
            }
            vfs.powerOn()
            if crash == .powerCutLosingTheFile {
                let durable = SyncStore.durableDeviceMarkersForTests.withLock { $0[setup.markerPath] } ?? ""
                try setup.putMarker(durable.isEmpty ? nil : durable)
            }
            try check(setup, opened, cutAt)
            if ranThrough { return }
            cutAt += 1
        }
        Issue.record("the open never ran through")
    }

    /// The option newly on: the store is this device's and keeps its node id,
    /// whatever crash came while it got its first marker.
    @Test(arguments: Crash.allCases) func aStoreGettingItsFirstMarkerKeepsItsNodeIDThroughACrash(_ crash: Crash) throws {
        try Self.sweep(crash, prepare: { (setup: Setup) throws in
            _ = try setup.open(marked: false, preferring: 0x51)
        }, open: { setup in
            try setup.open()
        }, check: { (setup: Setup, opened: UInt32?, cutAt: Int) throws in
            #expect(opened == nil || opened == 0x51, "cut at \(cutAt)")
            #expect(try setup.open() == 0x51, "\(crash), cut at \(cutAt): the next open took a new node id")
            #expect(try setup.open() == 0x51, "\(crash), cut at \(cutAt)")
        })
    }

    /// A store restored onto this device (its marker missing) takes one new
    /// node id (the one its options give), whatever crash came while it did:
    /// not a second one at the next open, nor a random one.
    @Test(arguments: Crash.allCases) func aRestoredStoreRenewsOnceThroughACrash(_ crash: Crash) throws {
        try Self.sweep(crash, prepare: { (setup: Setup) throws in
            #expect(try setup.open(preferring: 0x51) == 0x51)
            try setup.putMarker(nil)  // restored: the marker was not in the backup
        }, open: { setup in
            try setup.open(preferring: 0x52)
        }, check: { (setup: Setup, opened: UInt32?, cutAt: Int) throws in
            #expect(opened == nil || opened == 0x52, "cut at \(cutAt)")
            #expect(try setup.open(preferring: 0x52) == 0x52, "\(crash), cut at \(cutAt): renewed again, or not at all")
            #expect(try setup.open(preferring: 0x53) == 0x52, "\(crash), cut at \(cutAt)")
        })
    }

    /// The states a crash leaves between the steps of an update, copied to
    /// another device (without the marker, or with another store's): the copy
    /// takes a new node id, once. On this device, a file that names the
    /// pending token finishes the update: one renewal if it was one, none if
    /// not; a file that still names the marker keeps the node id.
    @Test func aCopyTakenMidUpdateStillRenewsOnce() throws {
        for renews in [false, true] {
            for copy in [nil, "another store's", "pending", "marker"] as [String?] {
                let setup = Setup(registry: try TestKeys.registry())
                let original = try setup.open(preferring: 0x51)
                Self.vfs.writeBack()
                let marker = setup.marker()
                var db: OpaquePointer?
                #expect(sqlite3_open(setup.path, &db) == SQLITE_OK)
                let sql = """
                    INSERT INTO sync_meta(name, value) VALUES('\(SyncStore.pendingDeviceMarkerMeta)', 'pending'),
                    ('\(SyncStore.pendingMarkerRenewsMeta)', '\(renews ? 1 : 0)')
                    """
                #expect(sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK)
                sqlite3_close(db)
                try setup.putMarker(copy == "marker" ? marker : copy)
                let opened = try setup.open()
                if copy == "pending" {
                    #expect((opened != original) == renews, "this device's update finished, renews: \(renews)")
                } else if copy == "marker" {
                    #expect(opened == original, "the file still names the marker (the rename of the update lost)")
                } else {
                    #expect(opened != original, "a copy (marker \(copy ?? "missing")) kept the node id")
                }
                #expect(try setup.open() == opened, "renewed a second time")
                #expect(try setup.open(marked: false) == opened)
            }
        }
    }
}
