import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// Re-baselines: a watch returning through the mailbox, and live notices
/// against queued batches and acknowledgements.
extension TombstonePurgeTests {
    /// The same return through the mailbox only (the watch never connects
    /// live): the phone posts a re-baseline notice ahead of the baseline, so
    /// the purged delete stays gone there too, and what the watch wrote
    /// offline still arrives.
    @Test func returningWatchThroughTheMailboxIsRebaselined() async throws {
        let pairing = PairingSecret.generate()
        let home = try await Neighbourhood.withForgottenWatch(pairing: pairing)
        #expect(try home.phone.forgottenPeers() == [home.watches[0].nodeID])
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == 1)
        try await home.watches[0].set(7, for: TestKeys.daily["offline"])
        let changes = home.watches[0].changes(matching: .key(TestKeys.steps.name))
        let seen = SeenChanges(home.watches[0])

        let folder = TempFolder()
        let config = ReplicationConfiguration(pairingEpoch: pairing.epoch)
        let phone = SyncPeer(store: home.phone, configuration: config)
        let watch = SyncPeer(store: home.watches[0], configuration: config)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: pairing)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: pairing)
        try phone.deliverQueued(through: phoneBox)
        let posted = try phoneBox.outgoingMessages().map { try QueuedMessage(frame: $0.frame) }
        // The marker announced, the notice, the baseline, the marker.
        #expect(posted.first == .caughtUpFollows(posted[0].header))
        if posted.count > 1, case .rebaseline(_, let purgedThrough) = posted[1] {
            #expect(purgedThrough == (try home.phone.purgedThrough()))
        } else {
            Issue.record("the phone's second queued message for the returning watch is not a re-baseline notice: \(posted.map { $0.frame().type })")
        }
        #expect(posted.last == .caughtUp(posted[0].header))
        #expect(posted.dropFirst(2).dropLast().allSatisfy { if case .batch = $0 { true } else { false } })
        for _ in 0..<3 {
            try watch.deliverQueued(through: watchBox)
            try phone.deliverQueued(through: phoneBox)
        }
        for store in [home.phone, home.watches[0]] {
            #expect(try store.storedValue(for: TestKeys.steps) == nil, "steps came back on the \(store.role)")
            #expect(try store.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
            #expect(try store.storedValue(for: TestKeys.daily["offline"]) == 7)
        }
        let removal = try await first(of: changes, "watch 0's removal of steps") { $0.kind == .removed }
        #expect(removal.origin == .remote)
        // The app saw only the purged value go, never its own live one removed and set again.
        #expect(seen.removedKeys == [TestKeys.steps.name])
        #expect(try home.watches[0].rebaselineMarkCount() == 0)
        #expect(try home.phone.pendingSummary(for: home.watches[0].nodeID).total == 0)
        // The rounds after the baseline post no second notice.
        #expect(try phoneBox.outgoingMessages().allSatisfy {
            if case .rebaseline = try QueuedMessage(frame: $0.frame) { false } else { true }
        })
    }

    /// The same return through a spool that holds two messages, each entry
    /// in a batch of its own: the baseline takes several reads. What it
    /// brings back stays in place until its last batch came (the phone ends
    /// it with a caught-up marker), so the app sees only the purged value go,
    /// never a live one removed and set again.
    /// `phoneRestarts`: the phone's app starts anew before each round (what
    /// it owes the watch, the marker, is on its stable storage).
    @Test(arguments: [false, true])
    func aBaselineLongerThanOneMailboxReadRemovesOnlyThePurgedValue(phoneRestarts: Bool) async throws {
        let pairing = PairingSecret.generate()
        let home = try await Neighbourhood.withForgottenWatch(pairing: pairing, phoneValues: 4)
        let seen = SeenChanges(home.watches[0])
        let queued = try QueuedPair(home, pairing: pairing)
        var reads = 0
        for _ in 0..<30 {
            let phone = phoneRestarts ? SyncPeer(store: home.phone, configuration: queued.config) : queued.phone
            try phone.deliverQueued(through: queued.phoneBox)
            if try queued.watch.deliverQueued(through: queued.watchBox).messagesRead > 0 { reads += 1 }
            if try queued.phoneBox.outgoingCount() == 0, try home.phone.pendingSummary(for: home.watches[0].nodeID).total == 0 { break }
        }
        #expect(reads >= 3, "the baseline came in \(reads) reads")
        for store in [home.phone, home.watches[0]] {
            #expect(try store.storedValue(for: TestKeys.steps) == nil, "steps came back on the \(store.role)")
            #expect(try store.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
            for i in 0..<4 { #expect(try store.storedValue(for: TestKeys.daily["p\(i)"]) == 100 + i) }
        }
        #expect(seen.removedKeys == [TestKeys.steps.name])
        #expect(try home.watches[0].rebaselineMarkCount() == 0)
    }

    /// A watch met first through the mailbox, on a phone that purged
    /// tombstones: the notice and the baseline go before the phone knows the
    /// watch's node; the watch's first acknowledgement names them, moves the
    /// cursor, and the phone posts the baseline once.
    @Test func aWatchMetFirstThroughTheMailboxGetsOneBaseline() async throws {
        let pairing = PairingSecret.generate()
        let home = try await Neighbourhood.withAcknowledgedDelete(watches: 2, epochs: ["test", pairing.epoch])
        #expect(try home.phone.purgeTombstones() == 1)

        let queued = try QueuedPair(home, watch: 1, pairing: pairing, batchEntries: nil, maxMessages: nil)
        var posted: [QueuedMessage] = []
        for _ in 0..<4 {
            try queued.phone.deliverQueued(through: queued.phoneBox)
            posted += try queued.phoneBox.outgoingMessages().map { try QueuedMessage(frame: $0.frame) }
            try queued.watch.deliverQueued(through: queued.watchBox)
        }
        #expect(try home.watches[1].storedValue(for: TestKeys.daily["d1"]) == 2)
        #expect(try home.watches[1].storedValue(for: TestKeys.steps) == nil)
        #expect(try home.phone.pendingSummary(for: home.watches[1].nodeID).total == 0)
        let notices = posted.filter { if case .rebaseline = $0 { true } else { false } }
        let entries = posted.flatMap { message -> [String] in
            if case .batch(_, _, _, let entries) = message { entries.map(\.key) } else { [] }
        }
        #expect(notices.count == 1)
        #expect(entries == [TestKeys.daily["d1"].name])
    }

    /// The phone posts a watch's changes until the spool is full, deletes a
    /// value that a waiting batch carries, then forgets the watch and purges
    /// the delete before the watch read anything. What waits in the mailbox
    /// was posted to the watch before it was forgotten: the phone posts a
    /// re-baseline notice after it (fuzz seed 11202695), so the value the
    /// waiting batch brings goes again, and nothing deleted comes back.
    @Test func batchesWaitingForAWatchThePhoneForgetsAreFollowedByANotice() async throws {
        let pairing = PairingSecret.generate()
        let queued = try QueuedPair(try Neighbourhood(watches: 2, epochs: [pairing.epoch, "test"]), pairing: pairing)
        let home = queued.home
        // The phone meets watch 0 through the mailbox only (its cursor stays at 0).
        try await home.watches[0].set(30, for: TestKeys.daily["mine"])
        try queued.watch.deliverQueued(through: queued.watchBox)
        try await queued.postStepsThenDeleteItWhileTheSpoolIsFull()
        #expect(try home.phone.knownPeers().contains(home.watches[0].nodeID))
        home.advance(days: 91)
        home.sync(1)
        _ = try home.phone.purgeTombstones()
        #expect(try home.phone.forgottenPeers() == [home.watches[0].nodeID])
        #expect(try home.phone.purgedThrough() > 0)
        try queued.phone.deliverQueued(through: queued.phoneBox)  // the phone's next round, before the watch reads

        try queued.rounds(12)
        try queued.expectStepsGoneAndThePhonesValuesEverywhere()
    }

    /// A watch the phone has not met yet: its batches wait in a full spool,
    /// the phone deletes a value one of them carries, the other watch
    /// acknowledges the delete, and the phone purges it (a watch not met does
    /// not hold purges back). The phone posts a re-baseline notice after
    /// what waits, so the value goes again on the watch (fuzz seed 11202695).
    @Test func aPurgeAfterBatchesWentToAWatchNotMetYetIsFollowedByANotice() async throws {
        let queued = try await QueuedPair.withTheDeletePurgedWhileItsBatchesWait()

        try queued.rounds(12)
        try queued.expectStepsGoneAndThePhonesValuesEverywhere()
    }

    /// As above, but the watch connects live before it reads the mailbox: the
    /// phone re-baselines it live, and on its next round takes back the
    /// batches the notice superseded, so the watch never applies the value
    /// whose delete was purged after the notice (fuzz seed 11202695).
    @Test func batchesALiveRebaselineSupersededAreTakenBack() async throws {
        let queued = try await QueuedPair.withTheDeletePurgedWhileItsBatchesWait()
        let home = queued.home

        home.sync(0)
        #expect(home.rebaselined(0))
        try queued.phone.deliverQueued(through: queued.phoneBox)
        #expect(try queued.phoneBox.outgoingMessages().allSatisfy {
            if case .batch(_, _, _, let entries) = try QueuedMessage(frame: $0.frame) { !entries.contains { $0.key == TestKeys.steps.name } } else { true }
        })
        try queued.rounds(4)
        try queued.expectStepsGoneAndThePhonesValuesEverywhere()
    }

    /// As above, but the watch reads the mailbox right after the live
    /// re-baseline, before the phone's next round: the phone took back the
    /// superseded batches before its live notice went, so the watch finds
    /// none of them.
    @Test func batchesALiveRebaselineSupersededAreGoneBeforeItsNotice() async throws {
        let queued = try await QueuedPair.withTheDeletePurgedWhileItsBatchesWait()
        let home = queued.home

        home.sync(0)
        #expect(home.rebaselined(0))
        try queued.watch.deliverQueued(through: queued.watchBox)
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == nil, "a superseded batch was applied")
        try queued.rounds(4)
        try queued.expectStepsGoneAndThePhonesValuesEverywhere()
    }

    /// As above, but the phone's app started again and has not used the
    /// mailbox since, so its live notice cannot take the batches back: the
    /// watch (protocol 4: the notice names the generation it starts) passes
    /// over the batches posted in an older generation. Before, it applied
    /// them and got back the value whose delete was purged.
    @Test func batchesPostedBeforeALiveNoticeInAMailboxNotUsedSinceArePassedOver() async throws {
        let queued = try await QueuedPair.withTheDeletePurgedWhileItsBatchesWait()
        let home = queued.home
        try queued.restartPhonesApp()

        home.sync(0)
        #expect(home.rebaselined(0))
        #expect(try queued.phoneBox.outgoingMessages().contains {
            if case .batch(_, _, _, let entries) = try QueuedMessage(frame: $0.frame) { entries.contains { $0.key == TestKeys.steps.name } } else { false }
        }, "the batch is still there")
        try queued.watch.deliverQueued(through: queued.watchBox)
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == nil, "a batch posted before the live notice was applied")
        try queued.rounds(4)
        try queued.expectStepsGoneAndThePhonesValuesEverywhere()
    }

    /// A mailbox whose spool cannot be read does not hold a live re-baseline
    /// up: the notice goes (an `.error` event says what could not be taken
    /// back), and the phone's round takes the batches back once the spool is
    /// there again.
    @Test func anUnreadableSpoolDoesNotHoldALiveRebaselineUp() async throws {
        let queued = try await QueuedPair.withTheDeletePurgedWhileItsBatchesWait()
        let home = queued.home

        let events = home.phone.events()
        let spool = queued.phoneBox.outboxPath
        try FileManager.default.moveItem(atPath: spool, toPath: spool + ".away")
        home.sync(0)
        #expect(home.rebaselined(0))
        let error = try await first(of: events, "the error event") { if case .error = $0 { true } else { false } }
        #expect(error.description.contains("mailbox-io"), "\(error)")
        try FileManager.default.moveItem(atPath: spool + ".away", toPath: spool)
        try queued.phone.deliverQueued(through: queued.phoneBox)
        try queued.rounds(4)
        try queued.expectStepsGoneAndThePhonesValuesEverywhere()
    }

    /// A batch the watch read from the mailbox just before a live re-baseline
    /// notice, and would apply just after it (its queued round and its live
    /// session run side by side), is not applied: the phone took it back
    /// before the notice went, and the watch leaves it for its next round,
    /// where it is gone. (A watch of protocol 4 passes it over at once: the
    /// notice named a newer generation than the batch's.)
    @Test(arguments: [UInt16(3), 4])
    func aBatchReadBeforeALiveNoticeAndAppliedAfterItIsLeft(watchHighestProtocol: UInt16) async throws {
        let queued = try await QueuedPair.withTheDeletePurgedWhileItsBatchesWait()
        let home = queued.home

        let watchStore = home.watches[0]
        let reader = MailboxReplicator(port: SQLiteReplicationPort(watchStore), reporter: StoreReporter(watchStore),
                                       configuration: queued.config, mailbox: queued.watchBox)
        var liveDuringRead = false
        reader.afterReading = { message in
            guard !liveDuringRead, case .batch(_, _, _, let entries) = message, entries.contains(where: { $0.key == TestKeys.steps.name }) else { return }
            liveDuringRead = true
            home.sync(0, watchHighestProtocol: watchHighestProtocol)
        }
        let report = reader.exchange(sendsPending: false)
        #expect(liveDuringRead)
        #expect(home.rebaselined(0))
        #expect(report.entriesApplied == 0 && report.messagesRead == (watchHighestProtocol >= 4 ? 1 : 0), "\(report)")
        #expect(try watchStore.storedValue(for: TestKeys.steps) == nil, "the batch read before the notice was applied after it")
        reader.afterReading = nil
        _ = reader.exchange(sendsPending: true)
        try queued.rounds(4)
        try queued.expectStepsGoneAndThePhonesValuesEverywhere()
    }

    /// A queued re-baseline (notice, baseline, marker) waits for the watch;
    /// the phone purges another delete, and the watch comes back live first:
    /// the live notice (of the newer purge) re-baselines it, and the phone
    /// takes back the queued baseline it superseded. The queued notice the
    /// watch reads after that is older than the one it acted on: it marks
    /// nothing, and the marker after it removes nothing the live baseline
    /// brought.
    @Test func aQueuedNoticeOlderThanALiveOneTheWatchActedOnMarksNothing() async throws {
        let queued = try await QueuedPair.withAQueuedRebaselineWaiting()
        let home = queued.home
        let purgedFirst = try home.phone.purgedThrough()
        // Another delete, acknowledged by watch 1 and purged.
        try await home.phone.set(9, for: TestKeys.daily["later"])
        home.sync(1)
        home.clock.advance(by: 1_000)
        try await home.phone.remove(TestKeys.daily["later"])
        home.sync(1)
        home.recordAcknowledgements()
        home.advance(days: 31)
        home.sync(1)
        #expect(try home.phone.purgeTombstones() == 1)
        #expect(try home.phone.purgedThrough() > purgedFirst)
        let seen = SeenChanges(home.watches[0])

        home.sync(0)
        #expect(home.rebaselined(0))
        try queued.phone.deliverQueued(through: queued.phoneBox)
        try queued.rounds(3)
        try home.expectStepsGoneAndTheRestEverywhere(seenOnWatchZero: seen)
    }

    /// A queued re-baseline (marker announced, notice, baseline, marker)
    /// waits for a forgotten watch when the phone re-baselines it live; the
    /// watch reads its mailbox before the live notice reaches it. The phone
    /// took back the whole queued re-baseline, not only its baseline: the
    /// watch never acts on a queued notice whose baseline is gone (its marker
    /// would remove what the phone still has, and the live baseline would set
    /// it again: the app would see it go and come back; fuzz seed 13900383).
    @Test func aQueuedRebaselineALiveNoticeSupersededIsTakenBackWhole() async throws {
        let queued = try await QueuedPair.withAQueuedRebaselineWaiting()
        let home = queued.home
        #expect(try queued.phoneBox.outgoingCount() >= 4, "announcement, notice, baseline, marker")
        let seen = SeenChanges(home.watches[0])

        // The live session's hello and notice, as the phone's endpoint takes and gives them (not delivered yet).
        let phonePort = SQLiteReplicationPort(home.phone)
        _ = try phonePort.recordPeer(node: home.watches[0].nodeID, role: .watch, epoch: queued.config.pairingEpoch)
        #expect(try phonePort.rebaselineNotice(for: home.watches[0].nodeID, cursor: 0, queuedIn: nil) != nil)
        #expect(try queued.phoneBox.outgoingCount() == 0, "the whole queued re-baseline is taken back")
        try queued.watch.deliverQueued(through: queued.watchBox)
        for i in 0..<2 { #expect(try home.watches[0].storedValue(for: TestKeys.daily["p\(i)"]) == 100 + i, "p\(i) went") }
        #expect(seen.removedKeys.isEmpty, "the app saw \(seen.all.map { "\($0.kind) \($0.key)" })")

        home.sync(0)
        #expect(home.rebaselined(0))
        try queued.rounds(3)
        try home.expectStepsGoneAndTheRestEverywhere(seenOnWatchZero: seen)
    }

    /// As above, but the phone's app started again and has not used the
    /// mailbox since: the whole queued re-baseline is still there when the
    /// watch, re-baselined live (its session ended before the baseline
    /// came), reads it. Its notice is no newer than the live one (it marks
    /// nothing), its batches are of an older generation (passed over), and
    /// its marker, announced ahead of that notice, removes nothing: the
    /// values the live notice marked stay until the live baseline settles
    /// them. Before, the marker removed them, and the live baseline set them
    /// again (the app saw them go and come back).
    @Test func aQueuedRebaselineLeftInAMailboxNotUsedSinceRemovesNothing() async throws {
        let queued = try await QueuedPair.withAQueuedRebaselineWaiting()
        let home = queued.home
        #expect(try queued.phoneBox.outgoingCount() >= 4, "announcement, notice, baseline, marker")
        try queued.restartPhonesApp()
        let seen = SeenChanges(home.watches[0])

        // A live session that ends once the watch acted on the notice, before any of the baseline.
        let link = Link(home.phone, home.watches[0], epoch: queued.config.pairingEpoch)
        link.run(link.a.start(now: link.now), link.b.start(now: link.now)) { $0.type == SyncMessage.MessageType.batch.rawValue }
        #expect(try home.watches[0].rebaselineMarkCount() > 0, "the live notice marked what the phone knew")
        #expect(try queued.phoneBox.outgoingCount() >= 4, "nothing was taken back")

        try queued.watch.deliverQueued(through: queued.watchBox)
        #expect(try queued.phoneBox.outgoingCount() == 0, "the watch took them all")
        for i in 0..<2 { #expect(try home.watches[0].storedValue(for: TestKeys.daily["p\(i)"]) == 100 + i, "p\(i) went") }
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["mine-alive"]) == 30)
        #expect(seen.removedKeys.isEmpty, "the app saw \(seen.all.map { "\($0.kind) \($0.key)" })")

        home.sync(0)
        try queued.rounds(3)
        try home.expectStepsGoneAndTheRestEverywhere(seenOnWatchZero: seen)
    }

    /// A queued caught-up marker that no announcement came before (its
    /// re-baseline was taken back) removes nothing: the marks it would sweep
    /// are a live re-baseline's, whose baseline may still be on its way.
    @Test func aCaughtUpMarkerWithoutItsAnnouncementRemovesNothing() async throws {
        let home = try await Neighbourhood.withForgottenWatch(phoneValues: 2)
        let watch = home.watches[0]
        let marked = try watch.applyRebaseline(purgedThrough: try home.phone.purgedThrough(), from: home.phone.nodeID, mismatched: [],
                                               removal: .atCaughtUp)
        #expect(marked > 0)
        #expect(try watch.sweepRebaselineMarks(after: .queuedCaughtUp) == 0)
        #expect(try watch.rebaselineMarkCount() == marked)
        try watch.expectQueuedCaughtUp()
        #expect(try watch.sweepRebaselineMarks(after: .queuedCaughtUp) == marked)
        #expect(try watch.rebaselineMarkCount() == 0)
    }

    /// A phone of a build before caught-up markers (its markers taken out of
    /// the mailbox here): the watch removes what is still marked when the
    /// read that carried the notice ends, as before, and all converges.
    @Test func aPhoneThatPostsNoMarkersStillHasThePurgedValueRemoved() async throws {
        let pairing = PairingSecret.generate()
        let home = try await Neighbourhood.withForgottenWatch(pairing: pairing, phoneValues: 2)
        let queued = try QueuedPair(home, pairing: pairing, batchEntries: nil, maxMessages: nil)
        let (phone, phoneBox, watch, watchBox) = (queued.phone, queued.phoneBox, queued.watch, queued.watchBox)
        var markers = 0
        for _ in 0..<3 {
            try phone.deliverQueued(through: phoneBox)
            for message in try phoneBox.outgoingMessages() {
                switch try QueuedMessage(frame: message.frame) {
                case .caughtUpFollows, .caughtUp:
                    markers += 1
                    try FileManager.default.removeItem(atPath: phoneBox.outboxPath + "/" + message.fileName)
                default: break
                }
            }
            try watch.deliverQueued(through: watchBox)
        }
        #expect(markers == 2)
        for store in [home.phone, home.watches[0]] {
            #expect(try store.storedValue(for: TestKeys.steps) == nil, "steps came back on the \(store.role)")
            #expect(try store.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
            for i in 0..<2 { #expect(try store.storedValue(for: TestKeys.daily["p\(i)"]) == 100 + i) }
        }
        #expect(try home.watches[0].rebaselineMarkCount() == 0)
        #expect(try home.phone.pendingSummary(for: home.watches[0].nodeID).total == 0)
    }

    /// A watch acknowledges a queued batch, then the phone re-baselines it
    /// live (it has no cursor for it, and has purged tombstones) and the
    /// session ends before the baseline arrives. The acknowledgement, read
    /// from the mailbox after that, is of a batch from before the notice,
    /// which removed what the batch brought: it moves no cursor, and the
    /// baseline comes again (fuzz seed 5701642).
    @Test func aQueuedAcknowledgementFromBeforeALiveRebaselineMovesNoCursor() async throws {
        let pairing = PairingSecret.generate()
        let home = try Neighbourhood(watches: 2, epochs: [pairing.epoch, "test"])
        try await home.phone.set(5, for: TestKeys.daily["kept"])
        try await home.phone.set(1, for: TestKeys.steps)
        try await home.phone.remove(TestKeys.steps)
        let config = ReplicationConfiguration(pairingEpoch: pairing.epoch)
        let phone = SyncPeer(store: home.phone, configuration: config)
        let watch = SyncPeer(store: home.watches[0], configuration: config)
        let folder = TempFolder()
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: pairing)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: pairing)
        // The phone posts everything for watch 0, a watch it has not met; watch 1 takes the delete live.
        try phone.deliverQueued(through: phoneBox)
        home.sync(1)
        home.recordAcknowledgements()
        home.advance(days: 31)
        #expect(try home.phone.purgeTombstones() == 1)
        // Watch 0 applies the batch and queues its acknowledgement.
        try watch.deliverQueued(through: watchBox)
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["kept"]) == 5)

        // Live: the notice arrives, the phone's batches are lost, the session ends.
        let live = Link(home.phone, home.watches[0], epoch: pairing.epoch)
        var toWatch = live.a.start(now: live.now), toPhone = live.b.start(now: live.now)
        var noticed = false
        for _ in 0..<20 where !(toWatch.isEmpty && toPhone.isEmpty) {
            let frames = toWatch.filter { $0.type != SyncMessage.MessageType.batch.rawValue }
            noticed = noticed || frames.contains { $0.type == SyncMessage.MessageType.rebaseline.rawValue }
            toWatch = toPhone.flatMap { live.a.receive($0, now: live.now) }
            toPhone = frames.flatMap { live.b.receive($0, now: live.now) }
        }
        #expect(noticed)
        // The notice marks what the phone knew, kept and the tombstone of steps (they go once the
        // phone caught up, unless the baseline brings them).
        #expect(try home.watches[0].rebaselineMarkCount() == 2)
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["kept"]) == 5)

        // The phone reads the acknowledgement queued before the notice.
        try phone.deliverQueued(through: phoneBox)
        #expect(try home.phone.pendingSummary(for: home.watches[0].nodeID).total > 0, "the watch lacks kept until the baseline comes")
        for _ in 0..<3 {
            try watch.deliverQueued(through: watchBox)
            try phone.deliverQueued(through: phoneBox)
        }
        home.sync(0)
        for store in [home.phone, home.watches[0]] {
            #expect(try store.storedValue(for: TestKeys.daily["kept"]) == 5, "kept is lost on the \(store.role)")
            #expect(try store.storedValue(for: TestKeys.steps) == nil, "steps came back on the \(store.role)")
        }
        #expect(try home.phone.pendingSummary(for: home.watches[0].nodeID).total == 0)
    }

    /// A queued re-baseline notice, or caught-up marker, that reaches a phone
    /// is refused and kept aside, and the phone's entries stay.
    @Test(arguments: ["notice", "marker announced", "marker"])
    func aPhoneRefusesAQueuedRebaselineNotice(kind: String) async throws {
        let pairing = PairingSecret.generate()
        let home = try Neighbourhood(watches: 1, epochs: [pairing.epoch])
        try await home.phone.set(1, for: TestKeys.steps)
        let folder = TempFolder()
        let config = ReplicationConfiguration(pairingEpoch: pairing.epoch)
        let phone = SyncPeer(store: home.phone, configuration: config)
        let phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: pairing)
        let watchBox = try Mailbox(directory: folder.path, role: .watch, secret: pairing)
        let header = QueuedHeader(protocolVersion: config.protocolRange.upperBound, node: home.watches[0].nodeID, role: .watch,
                                  pairingEpoch: pairing.epoch, registryFingerprint: home.registry.fingerprint(for: .watch))
        let message: QueuedMessage = switch kind {
        case "notice": .rebaseline(header, purgedThrough: Int64.max / 2)
        case "marker announced": .caughtUpFollows(header)
        default: .caughtUp(header)
        }
        try watchBox.post(message.frame())
        let report = try phone.deliverQueued(through: phoneBox)
        #expect(report.refused.map(\.code) == [.protocolViolation])
        #expect(report.refused.first?.message.contains(kind == "notice" ? "re-baseline notice" : "caught-up marker") == true)
        #expect(try home.phone.storedValue(for: TestKeys.steps) == 1)
        #expect(try phoneBox.refusedFiles().count == 1)
    }

}

/// Queued delivery between the phone and a watch of `home` through a
/// mailbox of the watch's pairing; by default one entry per batch and a spool
/// of three messages (nil: the engine's defaults).
final class QueuedPair {
    let home: Neighbourhood
    let config: ReplicationConfiguration
    private(set) var phone: SyncPeer
    let watch: SyncPeer
    private(set) var phoneBox: Mailbox
    let watchBox: Mailbox
    private let folder = TempFolder()
    private let secret: PairingSecret
    private let limits: MailboxLimits

    /// `pairing`: watch `index`'s (its epoch is the one `home` gave that watch).
    init(_ home: Neighbourhood, watch index: Int = 0, pairing secret: PairingSecret, batchEntries: Int? = 1, maxMessages: Int? = 3) throws {
        self.home = home
        var config = ReplicationConfiguration(pairingEpoch: secret.epoch)
        if let batchEntries { config.maxBatchEntries = batchEntries }
        self.config = config
        phone = SyncPeer(store: home.phone, configuration: config)
        watch = SyncPeer(store: home.watches[index], configuration: config)
        let limits = maxMessages.map { MailboxLimits(maxMessages: $0) } ?? .default
        self.secret = secret
        self.limits = limits
        phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret, limits: limits)
        watchBox = try Mailbox(directory: folder.path, role: .watch, secret: secret, limits: limits)
    }

    /// The phone's app starts again: a `SyncPeer` and a `Mailbox` of its own,
    /// the mailbox not used yet (its store knows no mailbox in this process).
    func restartPhonesApp() throws {
        phone = SyncPeer(store: home.phone, configuration: config)
        phoneBox = try Mailbox(directory: folder.path, role: .phone, secret: secret, limits: limits)
    }

    /// The phone posts steps, p0 and p1 for watch 0 (the spool is then full)
    /// and deletes steps (the delete waits); watch 1 takes it live and
    /// acknowledges it (recorded by a purge pass).
    func postStepsThenDeleteItWhileTheSpoolIsFull() async throws {
        try await home.phone.set(2, for: TestKeys.steps)
        for i in 0..<2 { try await home.phone.set(100 + i, for: TestKeys.daily["p\(i)"]) }
        try phone.deliverQueued(through: phoneBox)
        #expect(try phoneBox.outgoingCount() == 3)
        home.sync(1)
        home.clock.advance(by: 1_000)
        try await home.phone.remove(TestKeys.steps)
        try phone.deliverQueued(through: phoneBox)  // the spool is full: the delete waits
        home.sync(1)
        home.recordAcknowledgements()
    }

    /// A watch the phone forgot (`Neighbourhood.withForgottenWatch`, with two
    /// more values of the phone's), and the phone's queued re-baseline for it
    /// posted (announcement, notice, baseline, marker), through a mailbox of
    /// the engine's default limits.
    static func withAQueuedRebaselineWaiting() async throws -> QueuedPair {
        let pairing = PairingSecret.generate()
        let home = try await Neighbourhood.withForgottenWatch(pairing: pairing, phoneValues: 2)
        let queued = try QueuedPair(home, pairing: pairing, batchEntries: nil, maxMessages: nil)
        try queued.phone.deliverQueued(through: queued.phoneBox)
        return queued
    }

    /// Two watches, watch 0 queued only (`postStepsThenDeleteItWhileTheSpoolIsFull`);
    /// 31 days on the phone purges the delete, and its round posts after that.
    static func withTheDeletePurgedWhileItsBatchesWait() async throws -> QueuedPair {
        let pairing = PairingSecret.generate()
        let queued = try QueuedPair(try Neighbourhood(watches: 2, epochs: [pairing.epoch, "test"]), pairing: pairing)
        try await queued.postStepsThenDeleteItWhileTheSpoolIsFull()
        queued.home.advance(days: 31)
        #expect(try queued.home.phone.purgeTombstones() == 1)
        try queued.phone.deliverQueued(through: queued.phoneBox)
        return queued
    }

    /// `count` rounds: the watch reads and posts, then the phone.
    func rounds(_ count: Int) throws {
        for _ in 0..<count {
            try watch.deliverQueued(through: watchBox)
            try phone.deliverQueued(through: phoneBox)
        }
    }

    /// Steps is gone from the phone and watch 0, p0 and p1 are on both, and nothing waits.
    func expectStepsGoneAndThePhonesValuesEverywhere() throws {
        for store in [home.phone, home.watches[0]] {
            #expect(try store.storedValue(for: TestKeys.steps) == nil, "steps came back on the \(store.role)")
            for i in 0..<2 { #expect(try store.storedValue(for: TestKeys.daily["p\(i)"]) == 100 + i) }
        }
        #expect(try home.watches[0].rebaselineMarkCount() == 0)
        #expect(try home.phone.pendingSummary(for: home.watches[0].nodeID).total == 0)
    }
}
