import SyncTransport
@_spi(Benchmarks) @testable import SyncEngine
import Testing

/// A live re-baseline whose session ends before the watch took the phone's
/// caught-up notice, after which only the mailbox reaches the watch: what the
/// live notice marked (the value whose delete the phone purged) goes once the
/// baseline came through the mailbox, and nothing else (fuzz seed 457001019).
@Suite struct UnfinishedLiveRebaselineTests {
    /// A forgotten watch (`Neighbourhood.withForgottenWatch`) re-baselined
    /// live; frames from the phone that `dropsToWatch` names are lost. Returns
    /// the pair for the mailbox, and what the watch's app sees from then on.
    private static func liveRebaselineCut(droppingToWatch dropsToWatch: @escaping (Frame) -> Bool) async throws -> (QueuedPair, SeenChanges) {
        let pairing = PairingSecret.generate()
        let home = try await Neighbourhood.withForgottenWatch(pairing: pairing, phoneValues: 2)
        let queued = try QueuedPair(home, pairing: pairing, batchEntries: nil, maxMessages: nil)
        let seen = SeenChanges(home.watches[0])
        let link = Link(home.phone, home.watches[0], epoch: queued.config.pairingEpoch)
        link.run(link.a.start(now: link.now), link.b.start(now: link.now), droppingToB: dropsToWatch)
        #expect(try home.watches[0].rebaselineMarkCount() > 0, "the live notice marked what the phone knew")
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == 1, "steps is marked, not gone yet")
        return (queued, seen)
    }

    private static func phonesCursor(_ queued: QueuedPair) throws -> Int64 {
        try queued.home.phone.peerRecords().first { $0.node == queued.home.watches[0].nodeID }?.cursor ?? 0
    }

    /// The whole baseline came live and the caught-up notice was lost: the
    /// phone's mailbox round posts an announced marker, which ends the marks.
    @Test func aLiveBaselineWithoutItsCaughtUpNoticeEndsWithAQueuedMarker() async throws {
        let (queued, seen) = try await Self.liveRebaselineCut { $0.type == SyncMessage.MessageType.caughtUp.rawValue }
        #expect(try Self.phonesCursor(queued) > 0, "the baseline was acknowledged live")
        try queued.phone.deliverQueued(through: queued.phoneBox)
        try queued.rounds(3)
        try queued.home.expectStepsGoneAndTheRestEverywhere(seenOnWatchZero: seen)
    }

    /// None of the baseline came live: the phone, its cursor for the watch at
    /// 0, posts a queued re-baseline. The watch passes over its notice (no
    /// newer than the live one it acted on); the announcement after the notice
    /// still makes the queued marker end the live notice's marks.
    @Test func aQueuedRebaselineAfterAnUnfinishedLiveOneEndsItsMarks() async throws {
        let (queued, seen) = try await Self.liveRebaselineCut { $0.type == SyncMessage.MessageType.batch.rawValue }
        #expect(try Self.phonesCursor(queued) == 0, "nothing of the baseline was acknowledged")
        try queued.phone.deliverQueued(through: queued.phoneBox)
        try queued.rounds(3)
        try queued.home.expectStepsGoneAndTheRestEverywhere(seenOnWatchZero: seen)
    }

    /// As above, and a live notice comes before the watch read the queued
    /// re-baseline: it takes that re-baseline back whole, both announcements
    /// with its notice, baseline and marker.
    @Test func aQueuedRebaselineAnnouncedTwiceIsTakenBackWhole() async throws {
        let (queued, _) = try await Self.liveRebaselineCut { $0.type == SyncMessage.MessageType.batch.rawValue }
        try queued.phone.deliverQueued(through: queued.phoneBox)
        #expect(try queued.phoneBox.outgoingCount() >= 5, "announcement, notice, announcement, baseline, marker")

        let phonePort = SQLiteReplicationPort(queued.home.phone)
        #expect(try phonePort.rebaselineNotice(for: queued.home.watches[0].nodeID, cursor: 0, queuedIn: nil) != nil)
        #expect(try queued.phoneBox.outgoingCount() == 0, "the whole queued re-baseline is taken back")
    }
}
