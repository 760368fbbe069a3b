import Foundation
import Synchronization
import SyncTransport
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `StoreOptions.renewsNodeIDWhenRestored`: the marker beside the store's file.
///
/// The token lives in two places (`sync_meta` and the file), so a change of
/// it is made in three steps, each on stable storage before the next: the new
/// token committed as pending (with whether the store takes a new node id),
/// the file replaced (fsynced, renamed, its folder fsynced), then the token
/// committed as the marker, with the renewal, the pending one removed. At
/// open, a file naming the pending token is this device's (a crash came
/// between the steps): the update is finished, its renewal made once. A file
/// missing or naming any other token starts the update again.
extension SyncStore {
    /// Where `StoreOptions.renewsNodeIDWhenRestored` keeps the marker of the store at `path`.
    static func deviceMarkerPath(_ path: String) -> String { path + ".device" }

    /// Tests only: for each marker path a test put here, the token its file
    /// last held on stable storage (set after the folder's fsync). Paths not
    /// put here are not recorded.
    static let durableDeviceMarkersForTests = Mutex<[String: String]>([:])

    static let deviceMarkerMeta = "device_marker"
    static let pendingDeviceMarkerMeta = "device_marker_pending"
    static let pendingMarkerRenewsMeta = "device_marker_pending_renews"

    /// One marker update under way: its token and whether it renews the node id.
    private struct MarkerUpdate {
        let token: String
        let renews: Bool
    }

    /// `StoreOptions.renewsNodeIDWhenRestored` at open: the marker beside the
    /// file must name the token in the store; a store whose marker is missing
    /// or names another token takes a new node id, and both get a new token
    /// (see above). A marker that matches costs a read; each step of an
    /// update runs under the write lock, so that processes sharing the file agree.
    func checkDeviceMarker() throws {
        let markerPath = Self.deviceMarkerPath(path)
        func onDisk() -> String? {
            (try? String(contentsOfFile: markerPath, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let stored = try database.read { conn in try SyncStore.readMeta(conn)[Self.deviceMarkerMeta] }
        if let stored, stored == onDisk() { return }
        var renewedHere: UInt32?
        var finished = false
        // Another process opening the file at the same time can take an update over (a new pending token): start again.
        for _ in 0..<16 where !finished {
            let update = try database.write { conn -> MarkerUpdate? in
                let meta = try SyncStore.readMeta(conn)
                let file = onDisk()
                if let marker = meta[Self.deviceMarkerMeta], marker == file { return nil }  // mended meanwhile
                if let pending = meta[Self.pendingDeviceMarkerMeta], pending == file {
                    // The file was replaced, the marker not committed: this device's update, to finish.
                    return MarkerUpdate(token: pending, renews: meta[Self.pendingMarkerRenewsMeta] == "1")
                }
                // No token yet: the option is new to this store, which is this device's.
                let update = MarkerUpdate(token: Self.freshMarkerToken(), renews: meta[Self.deviceMarkerMeta] != nil)
                try SyncStore.writeMeta(conn, Self.pendingDeviceMarkerMeta, update.token)
                try SyncStore.writeMeta(conn, Self.pendingMarkerRenewsMeta, update.renews ? "1" : "0")
                return update
            }
            guard let update else {
                finished = true
                break
            }
            // The pending token on stable storage before the file names it: a power cut must not keep the file and lose the token.
            try database.syncCommittedBeforeFileChanges()
            let outcome = try database.write { conn -> (done: Bool, renewed: UInt32?, old: UInt32) in
                let meta = try SyncStore.readMeta(conn)
                let old = UInt32(meta["node_id"] ?? "") ?? 0
                guard meta[Self.pendingDeviceMarkerMeta] == update.token else {
                    let marker = meta[Self.deviceMarkerMeta]
                    return (marker != nil && marker == onDisk(), nil, old)  // taken over by another process
                }
                try Self.writeMarkerFile(update.token, at: markerPath)
                let renewed = update.renews ? try SyncStore.writeNewNodeID(conn, replacing: old, preferred: options.nodeID) : nil
                try SyncStore.writeMeta(conn, Self.deviceMarkerMeta, update.token)
                try SyncStore.deleteMeta(conn, Self.pendingDeviceMarkerMeta)
                try SyncStore.deleteMeta(conn, Self.pendingMarkerRenewsMeta)
                return (true, renewed, old)
            }
            finished = outcome.done
            if let renewed = outcome.renewed { renewedHere = renewed }
        }
        guard finished else {
            throw SyncError(.invalidConfiguration, "the marker \(markerPath) (StoreOptions.renewsNodeIDWhenRestored) kept being replaced by other processes opening the store; open it again")
        }
        // The marker and the renewal on stable storage: a power cut must not finish the update a second time.
        try database.syncCommittedBeforeFileChanges()
        let current = try database.read { conn in UInt32(try SyncStore.readMeta(conn)["node_id"] ?? "") ?? 0 }
        if current != clock.node, current != 0 {
            try adoptRenewed(current, old: clock.node)
            if renewedHere != nil {
                logger.notice("the store was restored from a backup or copied (its marker is missing or another's): it took a new node id",
                              metadata: ["marker": "\(markerPath)"])
            }
        }
    }

    private static func freshMarkerToken() -> String {
        (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    /// Replaces the marker file with `token`, on stable storage when it returns
    /// (the file synced, renamed over, its folder synced).
    private static func writeMarkerFile(_ token: String, at markerPath: String) throws {
        let temporary = markerPath + ".tmp"
        unlink(temporary)  // left by a crash
        do {
            try FileWrite.replace(markerPath, with: Array(token.utf8), through: temporary)
        } catch {
            throw SyncError(FileWrite.isStorageFull(error.code) ? .storageFull : .invalidConfiguration,
                            "could not write the marker \(markerPath) (StoreOptions.renewsNodeIDWhenRestored): \(FileWrite.describe(error.code)); the node id was not changed")
        }
        if let failure = FileWrite.syncFolder(of: markerPath) {
            throw SyncError(.invalidConfiguration, "could not sync the folder of the marker \(markerPath) (StoreOptions.renewsNodeIDWhenRestored): \(FileWrite.describe(failure)); the node id was not changed")
        }
        durableDeviceMarkersForTests.withLock { if $0[markerPath] != nil { $0[markerPath] = token } }
        #if canImport(Darwin)
        var marker = URL(fileURLWithPath: markerPath)
        var values = URLResourceValues()
        values.isExcludedFromBackup = true
        try? marker.setResourceValues(values)
        #endif
    }
}
