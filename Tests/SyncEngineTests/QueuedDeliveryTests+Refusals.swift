import Foundation
@_spi(Benchmarks) @testable import SyncEngine
@testable import SyncTransport
import Testing

/// What waits for the registries' comparison, and what the spool and the
/// protocol versions let through.
extension QueuedDeliveryTests {
    /// Of a peer's declarations, only the names this device declares are
    /// remembered as mismatched: a buggy or hostile peer naming thousands of
    /// keys cannot grow the store's record of it.
    @Test func onlyMismatchedKeysThisDeviceDeclaresAreRemembered() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, otherWatch, _, _, watchBox) = try registriesThatDiffer(pair, folder)
        let lines = (otherWatch.registry.wireDeclarations(from: .watch) + (0..<2_000).map { "junk:\($0)|all|automaticSmall|json" }).sorted()
        let header = QueuedHeader(protocolVersion: 1, node: otherWatch.nodeID, role: .watch, pairingEpoch: secret.epoch,
                                  registryFingerprint: KeyRegistry.fingerprint(of: lines))
        try watchBox.post(QueuedMessage.declarations(header, lines, isAnswer: false).frame())
        let read = try phone.deliverQueued(through: phoneBox)
        #expect(read.refused.isEmpty)
        let record = try #require(try pair.phone.peerRecords().first { $0.node == otherWatch.nodeID })
        #expect(record.mismatched == ["health:daily:steps"])
        #expect(record.registries == pair.phone.registry.fingerprint(for: .phone) + header.registryFingerprint)
    }

    /// Once a live session compared the two key registries, queued messages of
    /// the peer's registry are taken at once, passing over only the keys
    /// declared differently (their changes wait, pending, as they do live).
    @Test func afterALiveSessionComparedTheRegistriesOnlyKeysDeclaredDifferentlyWait() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, otherWatch, otherSteps, watch, watchBox) = try registriesThatDiffer(pair, folder)
        try await pair.phone.set(4, for: TestKeys.steps)
        try await pair.phone.set("imperial", for: TestKeys.units)

        // A live session compares the registries (units goes, steps does not).
        let link = Link(pair.phone, otherWatch, epoch: secret.epoch)
        link.connect()
        link.settle()
        #expect(try otherWatch.storedValue(for: TestKeys.units) == "imperial")
        #expect(try otherWatch.storedValue(for: otherSteps) == nil)

        // Queued again: the phone posts what the watch declares alike, and the watch takes it.
        try await pair.phone.set("uk", for: TestKeys.units)
        try await pair.phone.set(6, for: TestKeys.steps)
        let posted = try phone.deliverQueued(through: phoneBox)
        #expect(posted.refused.isEmpty)
        #expect(try queuedKeys(phoneBox) == ["units"])
        #expect(try phoneBox.outgoingCount() == 1)  // no declarations: the live session compared the registries
        let read = try watch.deliverQueued(through: watchBox)
        #expect(read.refused.map(\.code) == [])
        #expect(read.entriesApplied == 1)
        #expect(try otherWatch.storedValue(for: TestKeys.units) == "uk")
        #expect(try otherWatch.storedValue(for: otherSteps) == nil)

        // The other way: the phone takes the watch's registry too; steps waits for the watch.
        try await expectTheWatchsChangesArriveAndStepsWaits(pair, phone, phoneBox, otherWatch, watch, watchBox)
    }

    /// A refusal of our registry read after a live session compared the two
    /// registries is older than the comparison: what it refused is posted again,
    /// once. A second refusal (a peer that refuses any other registry, as
    /// builds before this one do) stops the sender.
    @Test func aRefusalOlderThanTheRegistriesComparisonIsRetriedOnce() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, otherWatch, _, watch, watchBox) = try registriesThatDiffer(pair, folder)

        try await pair.phone.set("imperial", for: TestKeys.units)
        try phone.deliverQueued(through: phoneBox)
        #expect(try watch.deliverQueued(through: watchBox).refused.map(\.code) == [.keyDeclarationMismatch])
        // The live session compares the registries before the phone reads the refusal.
        let link = Link(pair.phone, otherWatch, epoch: secret.epoch)
        link.connect()
        link.settle()
        try await pair.phone.set("uk", for: TestKeys.units)
        let stale = try phone.deliverQueued(through: phoneBox)
        #expect(stale.refused.map(\.code) == [.keyDeclarationMismatch])
        #expect(try queuedKeys(phoneBox) == ["units"])
        #expect(try watch.deliverQueued(through: watchBox).entriesApplied == 1)
        #expect(try otherWatch.storedValue(for: TestKeys.units) == "uk")

        // A watch that refuses again although the registries were compared (as a build before
        // this one does): the phone pauses posting for a minute, then tries again.
        let phoneNode = pair.phone.nodeID
        try SQLiteReplicationPort(otherWatch).recordRegistries([0], for: phoneNode)
        try await pair.phone.set("us", for: TestKeys.units)
        try phone.deliverQueued(through: phoneBox)
        #expect(try watch.deliverQueued(through: watchBox).refused.map(\.code) == [.keyDeclarationMismatch])
        #expect(try phone.deliverQueued(through: phoneBox).refused.map(\.code) == [.keyDeclarationMismatch])
        try await pair.phone.set("fr", for: TestKeys.units)
        #expect(try phone.deliverQueued(through: phoneBox).messagesPosted == 0)
        pair.phoneClock.advance(by: MailboxReplicator.probeInterval)
        try phone.deliverQueued(through: phoneBox)
        #expect(try queuedKeys(phoneBox) == ["units"])
    }

    /// A phone whose posting paused after the watch refused its registry
    /// (`MailboxReplicator.probeInterval`) and whose clock is then set back
    /// tries again at its next round: the pause lasted until the clock had
    /// caught up with when it should have ended (a day set back: a day).
    @Test func aPauseAfterARefusalEndsWhenTheClockIsSetBack() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, otherWatch, _, watch, watchBox) = try registriesThatDiffer(pair, folder)
        try await pair.phone.set("imperial", for: TestKeys.units)
        try phone.deliverQueued(through: phoneBox)
        #expect(try watch.deliverQueued(through: watchBox).refused.map(\.code) == [.keyDeclarationMismatch])
        let link = Link(pair.phone, otherWatch, epoch: secret.epoch)
        link.connect()
        link.settle()
        try await pair.phone.set("uk", for: TestKeys.units)
        #expect(try phone.deliverQueued(through: phoneBox).refused.map(\.code) == [.keyDeclarationMismatch])
        #expect(try watch.deliverQueued(through: watchBox).entriesApplied == 1)
        // A watch that refuses although the registries were compared: the phone pauses posting.
        try SQLiteReplicationPort(otherWatch).recordRegistries([0], for: pair.phone.nodeID)
        try await pair.phone.set("us", for: TestKeys.units)
        try phone.deliverQueued(through: phoneBox)
        #expect(try watch.deliverQueued(through: watchBox).refused.map(\.code) == [.keyDeclarationMismatch])
        #expect(try phone.deliverQueued(through: phoneBox).refused.map(\.code) == [.keyDeclarationMismatch])
        try await pair.phone.set("fr", for: TestKeys.units)
        #expect(try phone.deliverQueued(through: phoneBox).messagesPosted == 0)
        pair.phoneClock.advance(by: -86_400_000)
        try phone.deliverQueued(through: phoneBox)
        #expect(try queuedKeys(phoneBox) == ["units"])
    }

    /// A build of protocol 1 (or 2) and this one exchange queued messages both
    /// ways: the queued format is the same, and each message names the oldest
    /// protocol its sender speaks. A sender that refuses protocol 1 is refused
    /// by a build that speaks only protocol 1.
    @Test func aBuildOfAnOlderProtocolAndThisOneDeliverQueuedBothWays() async throws {
        for older: ClosedRange<UInt16> in [1...1, 1...2] {
            let pair = try Pair()
            let folder = TempFolder()
            let phone = SyncPeer(store: pair.phone, configuration: ReplicationConfiguration(pairingEpoch: secret.epoch))
            var olderConfiguration = ReplicationConfiguration(pairingEpoch: secret.epoch)
            olderConfiguration.protocolRange = older
            let watch = SyncPeer(store: pair.watch, configuration: olderConfiguration)
            let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret)
            let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret)

            try await pair.phone.set(5, for: TestKeys.steps)
            try phone.deliverQueued(through: phoneBox)
            let read = try watch.deliverQueued(through: watchBox)
            #expect(read.refused.map(\.code) == [], "a watch of protocol \(older)")
            #expect(read.entriesApplied == 1)
            #expect(try pair.watch.storedValue(for: TestKeys.steps) == 5)

            try await pair.watch.set(9, for: TestKeys.steps)
            try watch.deliverQueued(through: watchBox)
            let back = try phone.deliverQueued(through: phoneBox)
            #expect(back.refused.map(\.code) == [])
            #expect(back.acknowledged)
            #expect(try pair.phone.storedValue(for: TestKeys.steps) == 9)
            #expect(try pair.phone.pendingSummary(for: pair.watch.nodeID).total == 0)
        }

        // A phone that no longer speaks protocol 1 is refused by a watch that speaks only 1.
        let pair = try Pair()
        let folder = TempFolder()
        var newerOnly = ReplicationConfiguration(pairingEpoch: secret.epoch)
        newerOnly.protocolRange = 2...3
        var oldest = ReplicationConfiguration(pairingEpoch: secret.epoch)
        oldest.protocolRange = 1...1
        let phone = SyncPeer(store: pair.phone, configuration: newerOnly)
        let watch = SyncPeer(store: pair.watch, configuration: oldest)
        try await pair.phone.set(6, for: TestKeys.steps)
        try phone.deliverQueued(through: Mailbox(directory: folder.path, role: .phone, secret: secret))
        let refused = try watch.deliverQueued(through: Mailbox(directory: folder.path, role: .watch, secret: secret))
        #expect(refused.refused.map(\.code) == [.unsupportedVersion])
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == nil)
    }

    @Test func aFullSpoolIsAnErrorEventAndNothingIsLost() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let limits = MailboxLimits(maxMessages: 1, maxBytes: 1 << 20, maxMessageBytes: 1 << 20, acknowledgementReserve: 4)
        let (phone, phoneBox, watch, watchBox) = try peers(pair, directory: folder.path, limits: limits)
        let events = pair.phone.events()
        try await pair.phone.set(1, for: TestKeys.steps)
        try phone.deliverQueued(through: phoneBox)
        try await pair.phone.set("x", for: TestKeys.units)
        let full = try phone.deliverQueued(through: phoneBox)
        #expect(full.messagesPosted == 0)
        let error = try await first(of: events, "the mailbox-full event") { if case .error = $0 { true } else { false } }
        guard case .error(let failure) = error else { return }
        #expect(failure.code == .mailboxFull)
        try watch.deliverQueued(through: watchBox)
        try phone.deliverQueued(through: phoneBox)
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.watch.storedValue(for: TestKeys.units) == "x")
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 1)
    }

    @Test func aLargeValueTravelsWholeInOneMessage() async throws {
        let pair = try Pair()
        let folder = TempFolder()
        let (phone, phoneBox, watch, watchBox) = try peers(pair, directory: folder.path)
        let big = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 7) })
        try await pair.phone.set(big, for: TestKeys.blob)  // over the automatic limit: deferred until sync()
        try await pair.phone.set(2, for: TestKeys.steps)
        try phone.deliverQueued(through: phoneBox)
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.watch.storedValue(for: TestKeys.steps) == 2)
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == nil)
        try phone.sync()
        let posted = try phone.deliverQueued(through: phoneBox)
        #expect(posted.entriesPosted == 1)
        try watch.deliverQueued(through: watchBox)
        #expect(try pair.watch.storedValue(for: TestKeys.blob) == big)
        try phone.deliverQueued(through: phoneBox)
        #expect(try pair.phone.pendingSummary(for: pair.watch.nodeID).total == 0)
    }
}
