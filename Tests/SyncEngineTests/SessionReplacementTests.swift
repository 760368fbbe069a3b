import Foundation
import SyncEngine
import SyncTransport
import Testing

/// One device runs one session at a time (its replication lock), so a second
/// session with the same peer means the first one's connection is stale: its
/// other end is gone and this end has not noticed yet (half-open, until the
/// dead-peer timeout), or the peer is buggy or hostile. The newer session
/// replaces the older one as soon as it is established.
@Suite(.timeLimit(.minutes(5))) struct SessionReplacementTests {
    @Test func aNewerSessionWithTheSamePeerReplacesTheOlderOne() async throws {
        let pair = try Pair()
        let config = ReplicationConfiguration(pairingEpoch: "replace")
        let phonePeer = SyncPeer(store: pair.phone, configuration: config, tickInterval: .milliseconds(20))
        // Two drivers on the watch's store: the first stands for the watch's old connection, which
        // its end still holds, so nothing closes the phone's end of it but the phone itself.
        let oldWatchPeer = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(20))
        let newWatchPeer = SyncPeer(store: pair.watch, configuration: config, tickInterval: .milliseconds(20))
        let (phoneOld, watchOld) = InMemoryConnection.makePair()
        let phoneOldSession = Task { await phonePeer.run(over: phoneOld) }
        let watchOldSession = Task { await oldWatchPeer.run(over: watchOld) }
        try await phonePeer.waitUntilIdle(timeout: waitLimit)
        #expect(phonePeer.connectedPeers == [pair.watch.nodeID])

        let (phoneNew, watchNew) = InMemoryConnection.makePair()
        let phoneNewSession = Task { await phonePeer.run(over: phoneNew) }
        let watchNewSession = Task { await newWatchPeer.run(over: watchNew) }
        let reason = try await withDeadline("the phone's older session with the watch to end") { await phoneOldSession.value }
        #expect(reason.contains("replaced by a newer session with the same peer"), "\(reason)")
        let watchReason = try await withDeadline("the watch's end of the old connection to close") { await watchOldSession.value }
        #expect(!watchReason.contains("replaced"), "\(watchReason)")
        #expect(phonePeer.connectedPeers == [pair.watch.nodeID])

        // The newer session is the one that replicates.
        try pair.phone.setNow(7, for: TestKeys.steps)
        try await eventually(pair.watch, "the phone's write over the newer session") { try pair.watch.value(for: TestKeys.steps) == 7 }
        try await phonePeer.waitUntilIdle(timeout: waitLimit)
        #expect(newWatchPeer.isConnected && !oldWatchPeer.isConnected)

        await phoneNew.close()
        try await withDeadline("the newer sessions to end") {
            _ = await phoneNewSession.value
            _ = await watchNewSession.value
        }
        _ = watchNew
    }
}
