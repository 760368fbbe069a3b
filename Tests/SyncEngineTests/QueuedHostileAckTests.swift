import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@testable import SyncTransport
import Testing

/// A queued acknowledgement from a buggy or hostile peer (one that holds the
/// pairing secret) that names more of this store's stream than it wrote.
@Suite struct QueuedHostileAckTests {
    /// The phone moved its cursor to whatever the acknowledgement named: past
    /// its own stream, so the changes it wrote next were never posted (and a
    /// reopened store would number them past what a queued batch can name).
    /// Such an acknowledgement moves no cursor now; the next change arrives.
    @Test func anAcknowledgementPastTheStreamMovesNoCursor() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)

        try await pair.phone.set(5, for: TestKeys.steps)
        try phone.deliverQueued(through: phoneBox)
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)

        // The watch's acknowledgement, replaced by one that names the stream up to the largest position.
        let posted = try #require(try watchBox.outgoingMessages().last)
        guard case .ack(let header, let after, let through, let applied, let rejected) = try QueuedMessage(frame: posted.frame) else {
            Issue.record("the watch's last message is no acknowledgement")
            return
        }
        try watchBox.withdraw(posted)
        let generation = through >> QueuedStreamPosition.generationShift
        let farThrough = try QueuedStreamPosition.coded(QueuedStreamPosition.positionLimit - 1, generation: generation)
        let forged = QueuedMessage.ack(header, after: after, through: farThrough, applied: applied, rejected: rejected)
        try watchBox.post(forged.frame(), reserve: true)

        let written = pair.phone.nextSeq.withLock { $0 } - 1
        try phone.deliverQueued(through: phoneBox)
        let cursor = try #require(try pair.phone.peerRecords().first { $0.node == pair.watch.nodeID }?.cursor)
        #expect(cursor <= written, "the cursor \(cursor) passed the stream's end \(written)")

        // What the phone writes next still reaches the watch.
        try await pair.phone.set(6, for: TestKeys.steps)
        try phone.deliverQueued(through: phoneBox)
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 6)
        try phone.deliverQueued(through: phoneBox)
        #expect(try pair.phone.pendingSummary(for: pair.watch.nodeID).automatic == 0)
    }

    /// A queued message that names the reader's own node id as its sender (a
    /// buggy or hostile peer; a live session refuses such a peer at its
    /// hello): the phone recorded itself as a watch of the pairing, and while
    /// that record was the watch it posted for, it passed over every change it
    /// wrote itself as "come from that watch" (moving that cursor past them).
    /// Such a message is refused and kept aside now.
    @Test func aMessageNamingTheReadersOwnNodeIDIsRefused() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try QueuedDeliveryTests().peers(pair, directory: folder.path)
        try await pair.watch.set(1, for: TestKeys.steps)
        try watch.deliverQueued(through: watchBox)
        try phone.deliverQueued(through: phoneBox)
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.phone.storedValue(for: TestKeys.steps) == 1)

        // The watch's next message, sent again under the phone's node id.
        try await pair.watch.set(2, for: TestKeys.steps)
        try watch.deliverQueued(through: watchBox)
        let posted = try #require(try watchBox.outgoingMessages().last)
        guard case .batch(var header, let after, let through, let entries) = try QueuedMessage(frame: posted.frame) else {
            Issue.record("the watch's last message is no batch")
            return
        }
        header.node = pair.phone.nodeID
        try watchBox.post(QueuedMessage.batch(header, after: after, through: through, entries: entries).frame())
        let report = try phone.deliverQueued(through: phoneBox)
        #expect(report.refused.count == 1, "\(report.refused)")
        #expect(try !pair.phone.knownPeers().contains(pair.phone.nodeID))

        // What the phone writes next still reaches the watch.
        try await pair.phone.set(7, for: TestKeys.daily["d"])
        for _ in 0..<2 {
            try phone.deliverQueued(through: phoneBox)
            try watch.deliverQueued(through: watchBox)
        }
        #expect(try pair.watch.storedValue(for: TestKeys.daily["d"]) == 7)
    }
}
