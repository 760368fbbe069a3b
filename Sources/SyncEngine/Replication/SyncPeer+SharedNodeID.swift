import Foundation

/// Two devices with one node id and one pairing, both live (a watch restored
/// from another's backup, given its secret too): the phone takes each new
/// session for the same watch redialling and replaces the older one, so the
/// two replace each other's session for ever and neither gets what the other
/// wrote. A stale connection is replaced once; a peer whose sessions are
/// replaced again and again, each soon after the last, is two devices: said
/// once, as a `node-id-conflict` error naming the fix.
struct ReplacementLog: Sendable {
    /// Replacements of one peer, each within `window` of the one before, that say it is two devices.
    static let suspicious = 4
    static let window: Duration = .seconds(60)
    var recent: [UInt32: (count: Int, last: ContinuousClock.Instant)] = [:]
    var told: Set<UInt32> = []

    /// Counts a replacement of `peer` at `now`; true when it is the one that says two devices share the node id.
    mutating func note(_ peer: UInt32, at now: ContinuousClock.Instant) -> Bool {
        let count = recent[peer].map { now - $0.last <= Self.window ? $0.count + 1 : 1 } ?? 1
        recent[peer] = (count, now)
        if recent.count > 64 { recent = recent.filter { now - $0.value.last <= Self.window } }
        return count >= Self.suspicious && told.insert(peer).inserted
    }
}

extension SyncError {
    static func nodeIDSharedLive(node: UInt32, replacements: Int) -> SyncError {
        SyncError(.nodeIDConflict, "the sessions of node \(String(node, radix: 16)) replaced each other \(replacements) times, each soon after the last: two devices seem to share that node id and pairing (a store copied or restored from another watch's), and neither gets what the other wrote; on the copy call SyncStore.renewNodeID() (or set StoreOptions.renewsNodeIDWhenRestored), and pair each watch with a secret of its own")
    }
}

extension SyncPeer {
    func noteReplacement(of peer: UInt32) {
        if replacements.withLock({ $0.note(peer, at: .now) }) {
            store.emit(.error(.nodeIDSharedLive(node: peer, replacements: ReplacementLog.suspicious)), peer: peer)
        }
    }
}
