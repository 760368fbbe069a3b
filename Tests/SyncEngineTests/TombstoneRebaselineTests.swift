import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A watch the phone forgot returns: the phone's re-baseline notice goes
/// first (live or queued), then the baseline, and a purged delete never
/// comes back. (`Neighbourhood` is in TombstonePurgeTests.swift.)
@Suite struct TombstoneRebaselineTests {
    /// The forgotten watch returns holding the old value, a value it wrote
    /// that the phone deleted while it was away, a value it wrote that is
    /// still alive, and a write made offline: after its session the deleted
    /// values are absent on the phone, on it and on the other watch; the live
    /// one stays; the offline write reaches the phone and the other watch.
    @Test func returningWatchHoldingTheOldValueDoesNotBringThePurgedDeleteBack() async throws {
        let home = try Neighbourhood(watches: 2)
        try await home.phone.set(1, for: TestKeys.steps)
        try await home.watches[0].set("face", for: TestKeys.watchFace)  // never leaves the watch
        try await home.watches[0].set(20, for: TestKeys.daily["mine-deleted"])
        try await home.watches[0].set(30, for: TestKeys.daily["mine-alive"])
        home.sync(0)
        home.sync(1)
        #expect(try home.watches[1].storedValue(for: TestKeys.daily["mine-deleted"]) == 20)
        // Written on watch 0 before the deletes, never sent: older than the purged versions, yet new to the phone.
        try await home.watches[0].set(9, for: TestKeys.daily["early"])

        // Watch 0 goes away; meanwhile both values are deleted and the deletes purged.
        home.clock.advance(by: 1_000)
        try await home.phone.remove(TestKeys.steps)
        try await home.watches[1].remove(TestKeys.daily["mine-deleted"])
        home.sync(1)
        home.recordAcknowledgements()
        home.advance(days: 91)
        home.sync(1)
        _ = try home.phone.purgeTombstones()
        _ = try home.watches[1].purgeTombstones()
        for store in [home.phone, home.watches[1]] {
            #expect(try store.entryInfo(forKey: TestKeys.steps.name) == nil)
            #expect(try store.entryInfo(forKey: TestKeys.daily["mine-deleted"].name) == nil)
        }
        #expect(try home.phone.forgottenPeers() == [home.watches[0].nodeID])
        #expect(try home.phone.purgedThrough() > (try home.watches[0].entryInfo(forKey: TestKeys.daily["early"].name)?.version.packed ?? .max))

        // Offline on watch 0: the old values are still there, and a new write.
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == 1)
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["mine-deleted"]) == 20)
        try await home.watches[0].set(7, for: TestKeys.daily["offline"])
        let changes = home.watches[0].changes(matching: .key(TestKeys.steps.name))

        home.sync(0)
        #expect(home.rebaselined(0))
        home.sync(1)
        for store in [home.phone, home.watches[0], home.watches[1]] {
            #expect(try store.storedValue(for: TestKeys.steps) == nil, "steps came back on the \(store.role) \(store.nodeID)")
            #expect(try store.storedValue(for: TestKeys.daily["mine-deleted"]) == nil)
            #expect(try store.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
            #expect(try store.storedValue(for: TestKeys.daily["offline"]) == 7)
            #expect(try store.storedValue(for: TestKeys.daily["early"]) == 9)
        }
        #expect(try home.watches[0].storedValue(for: TestKeys.watchFace) == "face")
        // The app on watch 0 heard the old value go.
        let removal = try await first(of: changes, "watch 0's removal of steps") { $0.kind == .removed }
        #expect(removal.origin == .remote)
        // Nothing is left waiting, and the phone knows watch 0 again.
        #expect(try home.phone.pendingSummary().total == 0)
        #expect(try home.phone.forgottenPeers().isEmpty)
        #expect(Set(try home.phone.peerRecords().map(\.node)) == Set(home.watches.map(\.nodeID)))
    }

    /// A watch the phone forgets on request (`forgetPeer`, an unpaired watch)
    /// no longer holds a delete's tombstone back, long before the peer
    /// horizon; if it returns after the purge it is re-baselined, and the
    /// deleted value does not come back from it.
    @Test func aWatchForgottenOnRequestStopsHoldingTombstonesAndIsRebaselined() async throws {
        let home = try await Neighbourhood.withDeleteWatchZeroMissed()
        // A retention later watch 0, still known and away, holds the tombstone.
        home.advance(days: 31)
        home.sync(1)
        home.recordAcknowledgements()
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name)?.isDeleted == true)

        #expect(try home.phone.forgetPeer(home.watches[0].nodeID))
        home.advance(days: 31)
        home.sync(1)
        home.recordAcknowledgements()
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name) == nil, "the tombstone was not purged")
        #expect(try home.phone.forgottenPeers() == [home.watches[0].nodeID])

        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == 1)
        home.sync(0)
        #expect(home.rebaselined(0))
        for store in [home.phone, home.watches[0], home.watches[1]] {
            #expect(try store.storedValue(for: TestKeys.steps) == nil, "steps came back on the \(store.role) \(store.nodeID)")
            #expect(try store.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
        }
        #expect(try home.phone.knownPeers() == home.watches.map(\.nodeID).sorted())
    }

    /// A watch's write reaches the phone, but the phone's acknowledgement is
    /// lost as the session ends. The phone deletes the key, forgets the
    /// watch and purges the tombstone. When the watch returns, the phone's
    /// receipt says it had the write: the watch does not send it again, the
    /// re-baseline removes it, and the key stays deleted everywhere (before
    /// protocol 3 the watch sent it again and the phone took it as new).
    @Test func aWriteWhoseAcknowledgementWasLostDoesNotComeBackAfterAPurge() async throws {
        let home = try Neighbourhood(watches: 2)
        try await home.phone.set(1, for: TestKeys.steps)
        home.sync(0)
        home.sync(1)
        try await home.watches[0].set(20, for: TestKeys.daily["lost-ack"])
        let config = ReplicationConfiguration(pairingEpoch: "test")
        let phone = ReplicationEndpoint(store: home.phone, configuration: config)
        let watch = ReplicationEndpoint(store: home.watches[0], configuration: config)
        var toWatch = phone.start(now: 1_000), toPhone = watch.start(now: 1_000)
        var lostAcks = 0
        for _ in 0..<1_000 where !(toWatch.isEmpty && toPhone.isEmpty) {
            let (sendWatch, sendPhone) = (toWatch, toPhone)
            (toWatch, toPhone) = ([], [])
            for frame in sendPhone { toWatch += phone.receive(frame, now: 1_000) }
            for frame in sendWatch {
                // Every acknowledgement from the phone is lost.
                if frame.type == SyncMessage.MessageType.ack.rawValue { lostAcks += 1 } else { toPhone += watch.receive(frame, now: 1_000) }
            }
        }
        phone.connectionLost()
        watch.connectionLost()
        #expect(lostAcks > 0)
        #expect(try home.phone.storedValue(for: TestKeys.daily["lost-ack"]) == 20)

        home.clock.advance(by: 1_000)
        try await home.phone.remove(TestKeys.daily["lost-ack"])
        home.sync(1)
        home.recordAcknowledgements()
        home.advance(days: 91)
        home.sync(1)
        _ = try home.phone.purgeTombstones()
        #expect(try home.phone.entryInfo(forKey: TestKeys.daily["lost-ack"].name) == nil)
        #expect(try home.phone.forgottenPeers() == [home.watches[0].nodeID])

        home.sync(0)
        #expect(home.rebaselined(0))
        home.sync(1)
        for store in [home.phone, home.watches[0], home.watches[1]] {
            #expect(try store.storedValue(for: TestKeys.daily["lost-ack"]) == nil, "the deleted value came back on the \(store.role) \(store.nodeID)")
            #expect(try store.storedValue(for: TestKeys.steps) == 1)
        }
    }

    /// A re-baseline notice that overtakes the phone's receipt (a lossy
    /// transport reordered them) is left unacknowledged: the watch acts on
    /// it only once it knows what the phone received, when it comes again.
    @Test func aNoticeThatOvertakesTheReceiptComesAgain() async throws {
        let pairing = PairingSecret.generate()
        let home = try await Neighbourhood.withForgottenWatch(pairing: pairing)
        let config = ReplicationConfiguration(pairingEpoch: pairing.epoch)
        let phone = ReplicationEndpoint(store: home.phone, configuration: config)
        let watch = ReplicationEndpoint(store: home.watches[0], configuration: config)
        var now: Int64 = 1_000
        var toPhone = watch.start(now: now)
        var toWatch = phone.start(now: now)
        var notices: [Frame] = [], receipts: [Frame] = []
        for _ in 0..<10 where !(toWatch.isEmpty && toPhone.isEmpty) {
            let (sendWatch, sendPhone) = (toWatch, toPhone)
            (toWatch, toPhone) = ([], [])
            for frame in sendPhone { toWatch += phone.receive(frame, now: now) }
            for frame in sendWatch {
                switch frame.type {
                case SyncMessage.MessageType.rebaseline.rawValue: notices.append(frame)
                case SyncMessage.MessageType.receipt.rawValue: receipts.append(frame)
                default: toPhone += watch.receive(frame, now: now)
                }
            }
        }
        #expect(notices.count == 1 && receipts.count == 1)
        // The notice first: not acted on, not acknowledged.
        #expect(watch.receive(notices[0], now: now).isEmpty)
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == 1)
        toPhone = watch.receive(receipts[0], now: now)
        for frame in toPhone { _ = phone.receive(frame, now: now) }
        // Sent again after the retransmit interval, and acted on.
        now += config.retransmitMilliseconds
        let again = phone.tick(now: now).filter { $0.type == SyncMessage.MessageType.rebaseline.rawValue }
        #expect(again.count == 1)
        let acknowledgement = watch.receive(again[0], now: now)
        #expect(acknowledgement.contains { $0.type == SyncMessage.MessageType.ack.rawValue })
        // Marked: the purged value goes once the phone, having sent its baseline, says it caught up.
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == 1)
        Link(endpoints: phone, watch, now: now).run([], acknowledgement)
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == nil)
        #expect(phone.failure == nil && watch.failure == nil)
    }

    /// A watch that was away, but not past the horizon, resumes from its
    /// cursor: no re-baseline notice, only what it missed.
    @Test func watchNeverForgottenResumesFromItsCursor() async throws {
        let home = try await Neighbourhood.withAcknowledgedDelete()
        #expect(try home.phone.purgeTombstones() == 1)
        #expect(try home.phone.purgedThrough() > 0)

        home.advance(days: 40)
        try await home.phone.set(3, for: TestKeys.daily["d2"])
        let before = home.watches[0].syncCounters.entriesReceived
        home.sync(0)
        #expect(!home.rebaselined(0))
        #expect(home.watches[0].syncCounters.entriesReceived - before == 1)
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["d1"]) == 2)
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["d2"]) == 3)
    }

    /// The notice must be acted on before the baseline: nothing else goes out
    /// until the watch acknowledges it, and a lost notice is sent again.
    @Test func baselineWaitsForTheRebaselineAcknowledgement() async throws {
        let home = try Neighbourhood(watches: 2)
        try await home.phone.set(1, for: TestKeys.steps)
        try await home.phone.set(5, for: TestKeys.daily["kept"])
        home.sync(0)
        home.sync(1)
        try await home.phone.remove(TestKeys.steps)
        home.sync(1)
        home.recordAcknowledgements()
        home.advance(days: 91)
        home.sync(1)
        #expect(try home.phone.purgeTombstones() == 1)

        let config = ReplicationConfiguration(pairingEpoch: "test")
        let phone = ReplicationEndpoint(store: home.phone, configuration: config)
        let watch = ReplicationEndpoint(store: home.watches[0], configuration: config)
        var now: Int64 = 1_000
        var fromWatch: [Frame] = []
        for frame in phone.start(now: now) { fromWatch += watch.receive(frame, now: now) }
        var fromPhone: [Frame] = []
        for frame in fromWatch { fromPhone += phone.receive(frame, now: now) }
        fromPhone += phone.pump(now: now)
        let types = fromPhone.map(\.type)
        #expect(types.contains(SyncMessage.MessageType.rebaseline.rawValue))
        #expect(!types.contains(SyncMessage.MessageType.batch.rawValue))
        // The notice (and the receipt before it) is lost: still no batch; both go again after the retransmit interval.
        now += config.retransmitMilliseconds
        let again = phone.tick(now: now)
        #expect(again.map(\.type) == [SyncMessage.MessageType.receipt.rawValue, SyncMessage.MessageType.rebaseline.rawValue])
        var acks: [Frame] = []
        for frame in again { acks += watch.receive(frame, now: now) }
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == 1, "marked: it goes once the phone caught up")
        var afterAck: [Frame] = []
        for frame in acks { afterAck += phone.receive(frame, now: now) }
        #expect(afterAck.contains { $0.type == SyncMessage.MessageType.batch.rawValue })
        // A duplicate notice arriving after the baseline removes nothing the baseline brought.
        var replies: [Frame] = []
        for frame in afterAck { replies += watch.receive(frame, now: now) }
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["kept"]) == 5)
        for frame in again { replies += watch.receive(frame, now: now) }
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["kept"]) == 5)
        Link(endpoints: phone, watch, now: now).run([], replies)
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == nil)
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["kept"]) == 5)
    }

    /// In a live session the returning watch's app never sees a value go
    /// that the baseline brings back: what the notice would remove is
    /// marked, and only what the phone did not send again goes, once it
    /// says it caught up (before, the app saw its own live value removed and
    /// then set again by the baseline).
    @Test func theAppSeesOnlyThePurgedValueGo() async throws {
        let home = try await Neighbourhood.withForgottenWatch()
        #expect(try home.phone.forgottenPeers() == [home.watches[0].nodeID])
        let seen = SeenChanges(home.watches[0])

        home.sync(0)
        #expect(home.rebaselined(0))
        let changes = seen.all
        #expect(changes.map(\.key) == [TestKeys.steps.name], "the app saw \(changes.map { "\($0.kind) \($0.key)" })")
        #expect(changes.first?.kind == .removed)
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == nil)
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["mine-alive"]) == 30)
        #expect(try home.phone.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
    }

    /// A large value (sent in chunks) that the watch holds and the baseline
    /// sends again stays: the chunks of a version the watch holds marked
    /// settle its mark as a batch entry would, and the caught-up notice
    /// removes only the purged value (fuzz seed 11300076: the value went,
    /// and the phone's cursor had passed it).
    @Test func aLargeValueTheBaselineSendsAgainInChunksStays() async throws {
        let blob = Data((0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let home = try await Neighbourhood.withForgottenWatch(largeValue: blob)
        #expect(try home.watches[0].storedValue(for: TestKeys.blob) == blob)
        let seen = SeenChanges(home.watches[0])

        home.sync(0)
        #expect(home.rebaselined(0))
        #expect(home.lastFrames[0]?.contains { $0.from == "a" && $0.frame.type == SyncMessage.MessageType.chunk.rawValue } == true)
        #expect(try home.watches[0].storedValue(for: TestKeys.blob) == blob)
        #expect(seen.removedKeys == [TestKeys.steps.name], "the app saw \(seen.all.map { "\($0.kind) \($0.key)" })")
        #expect(try home.watches[0].rebaselineMarkCount() == 0)
        home.sync(0)
        #expect(try home.watches[0].storedValue(for: TestKeys.blob) == blob)
    }

    /// A value the phone merged (a resolver joined the returning watch's
    /// write with an older one of another watch) keeps the watch's version
    /// with another value: the baseline's copy replaces the row the watch
    /// holds marked at that version. Before, the watch kept its own value as
    /// if the two were the same write, and the devices stayed apart (fuzz
    /// seed 15000840).
    @Test func aMergedValueAtTheVersionAMarkedRowHoldsReplacesIt() async throws {
        let home = try Neighbourhood(watches: 2)
        try await home.watches[1].set(["from-1"], for: TestKeys.tags)  // older, not sent yet
        home.clock.advance(by: 10)
        try await home.watches[0].set(["from-0"], for: TestKeys.tags)
        try await home.phone.set(1, for: TestKeys.steps)
        home.sync(0)
        let written = try #require(try home.watches[0].entryInfo(forKey: TestKeys.tags.name)).version
        home.clock.advance(by: 1_000)
        try await home.phone.remove(TestKeys.steps)
        // The phone joins watch 1's older write into watch 0's, at watch 0's version; watch 0 is away.
        home.sync(1)
        #expect(try home.phone.entryInfo(forKey: TestKeys.tags.name)?.version == written)
        #expect(Set(try home.phone.storedValue(for: TestKeys.tags) ?? []) == ["from-0", "from-1"])
        home.recordAcknowledgements()
        home.advance(days: 91)
        home.sync(1)
        _ = try home.phone.purgeTombstones()
        #expect(try home.phone.forgottenPeers() == [home.watches[0].nodeID])

        home.sync(0)
        #expect(home.rebaselined(0))
        home.sync(1)
        for store in [home.phone, home.watches[0], home.watches[1]] {
            #expect(Set(try store.storedValue(for: TestKeys.tags) ?? []) == ["from-0", "from-1"], "on the \(store.role) \(store.nodeID)")
            #expect(try store.entryInfo(forKey: TestKeys.tags.name)?.version == written)
            #expect(try store.storedValue(for: TestKeys.steps) == nil)
        }
        #expect(try home.watches[0].rebaselineMarkCount() == 0)
    }

    /// The live notice names the generation it starts only to a watch of
    /// protocol 4 (payload schema 4), which keeps it (it passes over queued
    /// batches of older ones); to a watch of protocol 3 it goes as before
    /// (schema 1), and the watch keeps nothing. Either way the re-baseline is
    /// the same.
    @Test(arguments: [UInt16(4), 3])
    func theNoticeNamesItsGenerationToAWatchOfProtocolFour(watchHighest: UInt16) async throws {
        let home = try await Neighbourhood.withForgottenWatch()
        var watchConfiguration = ReplicationConfiguration(pairingEpoch: "test")
        watchConfiguration.protocolRange = 1...watchHighest
        let link = Link(endpoints: ReplicationEndpoint(store: home.phone, configuration: ReplicationConfiguration(pairingEpoch: "test")),
                        ReplicationEndpoint(store: home.watches[0], configuration: watchConfiguration), now: 1_000)
        link.connect()
        let notices = link.frames.filter { $0.from == "a" && $0.frame.type == SyncMessage.MessageType.rebaseline.rawValue }
        #expect(!notices.isEmpty)
        let generation = try home.phone.rebaselineGeneration(for: home.watches[0].nodeID)
        #expect(generation > 0)
        let kept = try home.watches[0].liveRebaselineGeneration(from: home.phone.nodeID)
        if watchHighest >= SyncMessage.generationProtocol {
            #expect(notices.allSatisfy { $0.frame.payload.first == SyncMessage.generationPayloadSchema })
            #expect(kept == generation)
        } else {
            #expect(notices.allSatisfy { $0.frame.payload.first == SyncMessage.payloadSchema })
            #expect(kept == nil)
        }
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == nil)
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["mine-alive"]) == 30)
        #expect(try home.watches[0].rebaselineMarkCount() == 0)
    }

    /// A phone of protocol 1 sends no caught-up notices: its notice removes
    /// what it knew at once (the app sees the live value go, then the
    /// baseline sets it again), and nothing stays marked.
    @Test func aProtocolOnePhonesNoticeRemovesAtOnce() async throws {
        let home = try await Neighbourhood.withForgottenWatch()
        let seen = SeenChanges(home.watches[0])

        var old = ReplicationConfiguration(pairingEpoch: "test")
        old.protocolRange = 1...1
        let link = Link(endpoints: ReplicationEndpoint(store: home.phone, configuration: old),
                        ReplicationEndpoint(store: home.watches[0], configuration: ReplicationConfiguration(pairingEpoch: "test")), now: 1_000)
        link.connect()
        #expect(link.frames.contains { $0.from == "a" && $0.frame.type == SyncMessage.MessageType.rebaseline.rawValue })
        #expect(seen.removedKeys.contains(TestKeys.daily["mine-alive"].name), "the app saw \(seen.all.map { "\($0.kind) \($0.key)" })")
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == nil)
        #expect(try home.watches[0].storedValue(for: TestKeys.daily["mine-alive"]) == 30)
        #expect(try home.watches[0].rebaselineMarkCount() == 0)
    }

    /// A session that ends before the phone caught up leaves the marked
    /// values where they were (nothing removed, nothing lost); a value the
    /// app writes meanwhile is its own again and stays; the next session
    /// ends the re-baseline: the purged value goes, and the marks with it.
    @Test func marksOutliveASessionThatEndsBeforeThePhoneCaughtUp() async throws {
        let home = try Neighbourhood(watches: 2)
        try await home.phone.set(1, for: TestKeys.steps)
        try await home.phone.set(2, for: TestKeys.daily["gone"])
        try await home.watches[0].set(30, for: TestKeys.daily["mine-alive"])
        home.sync(0)
        home.sync(1)
        home.clock.advance(by: 1_000)
        try await home.phone.remove(TestKeys.steps)
        try await home.phone.remove(TestKeys.daily["gone"])
        home.sync(1)
        home.recordAcknowledgements()
        home.advance(days: 91)
        home.sync(1)
        #expect(try home.phone.purgeTombstones() == 2)

        // The first session loses every caught-up notice of the phone's.
        let link = Link(home.phone, home.watches[0])
        var notices = 0
        link.run(link.a.start(now: link.now), link.b.start(now: link.now)) { frame in
            guard frame.type == SyncMessage.MessageType.caughtUp.rawValue else { return false }
            notices += 1
            return true
        }
        #expect(notices > 0)
        let watch = home.watches[0]
        #expect(try watch.storedValue(for: TestKeys.steps) == 1, "removed before the phone caught up")
        #expect(try watch.storedValue(for: TestKeys.daily["gone"]) == 2, "removed before the phone caught up")
        #expect(try watch.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
        #expect(try watch.rebaselineMarkCount() == 2)
        #expect(try SyncStore.inspect(path: watch.path).rebaselineMarks == [TestKeys.daily["gone"].name, TestKeys.steps.name].sorted())
        try await watch.set(4, for: TestKeys.steps)

        home.sync(0)
        #expect(!home.rebaselined(0), "the phone has a cursor for the watch again")
        #expect(try watch.storedValue(for: TestKeys.daily["gone"]) == nil)
        #expect(try home.phone.storedValue(for: TestKeys.daily["gone"]) == nil)
        for store in [home.phone, watch] {
            #expect(try store.storedValue(for: TestKeys.steps) == 4, "the app's write on the \(store.role)")
            #expect(try store.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
        }
        #expect(try watch.rebaselineMarkCount() == 0)
        #expect(try SyncStore.inspect(path: watch.path).rebaselineMarks.isEmpty)
    }

    /// The same return over TCP (127.0.0.1, port 0): the phone's listener
    /// serves the returning watch, which dials with `maintainConnection`.
    @Test(.timeLimit(.minutes(5))) func returningWatchOverTCPIsRebaselined() async throws {
        let pairing = PairingSecret.generate()
        let home = try await Neighbourhood.withForgottenWatch(pairing: pairing)
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name) == nil)
        try await home.watches[0].set(7, for: TestKeys.daily["offline"])

        let phone = home.phone, returning = home.watches[0], other = home.watches[1]
        let events = phone.events()
        let phonePeer = SyncPeer(store: phone, configuration: ReplicationConfiguration(pairingEpoch: pairing.epoch),
                                 tickInterval: .milliseconds(50))
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0, configuration: TCPConfiguration(secret: pairing))
        let server = Task { await phonePeer.serve(listener) }
        let watchPeer = SyncPeer(store: returning, configuration: ReplicationConfiguration(pairingEpoch: pairing.epoch),
                                 tickInterval: .milliseconds(50))
        let client = Task {
            await watchPeer.maintainConnection(host: "127.0.0.1", port: listener.port, configuration: TCPConfiguration(secret: pairing))
        }
        try await first(of: events, "the phone's session with the returning watch") { if case .connected = $0 { true } else { false } }
        try await eventually(returning, "the purged value to go and the live one to come back") {
            try returning.storedValue(for: TestKeys.steps) == nil && returning.storedValue(for: TestKeys.daily["mine-alive"]) == 30
        }
        try await eventually(phone, "the offline write to reach the phone") { try phone.storedValue(for: TestKeys.daily["offline"]) == 7 }
        try await phonePeer.waitUntilIdle(timeout: waitLimit)
        client.cancel()
        _ = try await withDeadline("the watch to stop") { await client.value }
        await listener.close()
        server.cancel()
        _ = try await withDeadline("the phone to stop") { await server.value }

        home.sync(1)
        for store in [phone, returning, other] {
            #expect(try store.storedValue(for: TestKeys.steps) == nil)
            #expect(try store.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
            #expect(try store.storedValue(for: TestKeys.daily["offline"]) == 7)
        }
    }
}
