import Foundation
@testable import SyncEngine
import Testing

/// `knownPeerDetails()`: a phone whose watch took a new node id keeps the
/// old one until `peerHorizon` (90 days), and its `pendingSummary()` counts
/// what the old id never gets. Before, an app could not tell which id was
/// stale (`knownPeers()` gives node ids alone); now it sees each one's
/// pairing, when it was last seen, and whether it is connected, and can
/// forget the stale one.
@Suite struct KnownPeerDetailsTests {
    @Test func aRenewedWatchsOldNodeIDIsListedUnseenSinceItsLastSessionAndCanBeForgotten() async throws {
        var pair = try Pair()
        #expect(try pair.phone.knownPeerDetails().isEmpty)
        try await pair.watch.set(1, for: TestKeys.daily["a"])
        let old = pair.watch.nodeID
        let firstSeen = pair.phoneClock.nowMilliseconds()
        let first = CopiedStoreTests.session(pair.phone, pair.watch, epoch: "pairing")
        #expect(try pair.phone.knownPeerDetails() == [
            KnownPeer(node: old, role: .watch, pairingEpoch: "pairing", lastSeenMilliseconds: firstSeen, isConnected: true),
        ])
        #expect(try pair.watch.knownPeerDetails().map(\.role) == [.phone])
        first.a.connectionLost()
        first.b.connectionLost()

        // The watch is restored from a backup and takes a new node id, a day later.
        pair.phoneClock.advance(by: 86_400_000)
        pair.watchClock.advance(by: 86_400_000)
        let renewed = try pair.watch.renewNodeID()
        let secondSeen = pair.phoneClock.nowMilliseconds()
        let second = CopiedStoreTests.session(pair.phone, pair.watch, epoch: "pairing")
        try await pair.phone.set(2, for: TestKeys.daily["b"])
        second.settle()
        #expect(try pair.watch.storedValue(for: TestKeys.daily["b"]) == 2)
        let details = try pair.phone.knownPeerDetails().sorted { $0.lastSeenMilliseconds < $1.lastSeenMilliseconds }
        #expect(details.map(\.node) == [old, renewed])
        #expect(details.map(\.lastSeenMilliseconds) == [firstSeen, secondSeen])
        #expect(details.map(\.isConnected) == [false, true])
        #expect(details.map(\.pairingEpoch) == ["pairing", "pairing"])
        // The old id keeps the phone's write pending, though the watch has it.
        #expect(try pair.phone.pendingSummary().total == 1)
        #expect(try pair.phone.pendingSummary(for: renewed).total == 0)

        // An app with one watch per pairing forgets the ids of the pairing not connected.
        for peer in details where peer.pairingEpoch == "pairing" && !peer.isConnected {
            #expect(try pair.phone.forgetPeer(peer.node))
        }
        #expect(try pair.phone.knownPeerDetails().map(\.node) == [renewed])
        #expect(try pair.phone.pendingSummary().total == 0)
        second.a.connectionLost()
        second.b.connectionLost()
        #expect(try pair.phone.knownPeerDetails().map(\.isConnected) == [false])
        pair.phone.close()
        #expect(throws: SyncError.self) { try pair.phone.knownPeerDetails() }
        pair.phone = try SyncStore(path: pair.folder.file("phone.sqlite"), role: .phone, registry: pair.watch.registry,
                                   options: StoreOptions(clock: pair.phoneClock, encryption: .keyFile(path: pair.folder.file("phone.key"))))
        #expect(try pair.phone.knownPeerDetails().map(\.node) == [renewed])
    }
}
