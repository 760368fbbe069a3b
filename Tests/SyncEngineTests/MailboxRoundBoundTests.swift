import Foundation
@_spi(Testing) @testable import SyncEngine
@testable import SyncTransport
import Testing

/// A round reads at most `MailboxReplicator.maxMessagesPerRound` messages,
/// then posts its own: a peer that posts faster than this end applies could
/// otherwise keep the round reading, and nothing of this end ever went.
@Suite struct MailboxRoundBoundTests {
    @Test func aRoundReadsAtMostItsBoundThenPostsAndLeavesTheRest() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let queued = QueuedDeliveryTests()
        let (phone, phoneBox, _, watchBox) = try queued.peers(pair, directory: folder.path)
        for round in 1...5 {
            try await pair.phone.set(round, for: TestKeys.steps)
            try phone.deliverQueued(through: phoneBox)
        }
        #expect(try phoneBox.outgoingCount() == 5)
        try await pair.watch.set(["from the watch"], for: TestKeys.tags)
        let config = ReplicationConfiguration(pairingEpoch: queued.secret.epoch)
        let watch = MailboxReplicator(port: SQLiteReplicationPort(pair.watch), reporter: StoreReporter(pair.watch),
                                      configuration: config, mailbox: watchBox)
        watch.maxMessagesPerRound = 3
        let first = watch.exchange(sendsPending: true)
        #expect(first.failure == nil)
        #expect(first.messagesRead == 3)
        #expect(try watchBox.incomingCount() == 2, "the rest waits for the next round")
        #expect(first.entriesPosted == 1, "the watch's own change went in this round")
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 3)
        let second = watch.exchange(sendsPending: true)
        #expect(second.failure == nil)
        #expect(second.messagesRead == 2)
        #expect(try watchBox.incomingCount() == 0)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)
        try phone.deliverQueued(through: phoneBox)
        #expect(try pair.phone.storedValue(for: TestKeys.tags) == ["from the watch"])
    }

    @Test func theBoundByDefaultIsWhatAFullSpoolHolds() throws {
        let pair = try Pair()
        let folder = TempFolder()
        let queued = QueuedDeliveryTests()
        let limits = MailboxLimits(maxMessages: 10, acknowledgementReserve: 4)
        let (_, _, _, watchBox) = try queued.peers(pair, directory: folder.path, limits: limits)
        let watch = MailboxReplicator(port: SQLiteReplicationPort(pair.watch), reporter: StoreReporter(pair.watch),
                                      configuration: ReplicationConfiguration(pairingEpoch: queued.secret.epoch), mailbox: watchBox)
        #expect(watch.maxMessagesPerRound == 14)
    }
}
