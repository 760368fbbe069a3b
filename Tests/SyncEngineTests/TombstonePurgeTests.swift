import Foundation
@_spi(Benchmarks) @testable import SyncEngine
import SyncTransport
import Testing

/// A phone and its watches in one temp folder, on one manual clock; each
/// session is a step-driven `Link` run until quiet, then dropped.
final class Neighbourhood {
    let folder = TempFolder()
    let clock = ManualClock()
    let registry: KeyRegistry
    let phone: SyncStore
    let watches: [SyncStore]
    /// The frames of the last session of each watch.
    var lastFrames: [Int: [(from: String, frame: Frame)]] = [:]
    /// The pairing epoch of each watch.
    let epochs: [String]

    init(watches count: Int, epochs: [String]? = nil) throws {
        self.epochs = epochs ?? Array(repeating: "test", count: count)
        let registry = try TestKeys.registry()
        self.registry = registry
        let folder = self.folder
        let clock = self.clock
        phone = try SyncStore(path: folder.file("phone.sqlite"), role: .phone, registry: registry,
                              options: StoreOptions(clock: clock, encryption: .keyFile(path: folder.file("phone.key"))))
        watches = try (0..<count).map { i in
            try SyncStore(path: folder.file("watch\(i).sqlite"), role: .watch, registry: registry,
                          options: StoreOptions(clock: clock, encryption: .keyFile(path: folder.file("watch\(i).key"))))
        }
    }

    /// One session between the phone and watch `i`, until nothing more moves
    /// (`watchHighestProtocol`: the top of the watch's protocol range).
    func sync(_ i: Int, watchHighestProtocol: UInt16 = SyncMessage.highestProtocolVersion) {
        var watchConfiguration = ReplicationConfiguration(pairingEpoch: epochs[i])
        watchConfiguration.protocolRange = 1...watchHighestProtocol
        let link = Link(endpoints: ReplicationEndpoint(store: phone, configuration: ReplicationConfiguration(pairingEpoch: epochs[i])),
                        ReplicationEndpoint(store: watches[i], configuration: watchConfiguration), now: 1_000)
        link.connect()
        link.settle()
        lastFrames[i] = link.frames
    }

    /// Whether the last session of watch `i` carried a re-baseline notice (from the phone).
    func rebaselined(_ i: Int) -> Bool {
        (lastFrames[i] ?? []).contains { $0.from == "a" && $0.frame.type == SyncMessage.MessageType.rebaseline.rawValue }
    }

    func advance(days: Int64) { clock.advance(by: days * Self.day) }

    /// Steps is gone from the phone and watch 0, mine-alive and p0, p1 are on
    /// both, watch 0's app saw only steps go, and nothing is marked.
    func expectStepsGoneAndTheRestEverywhere(seenOnWatchZero seen: SeenChanges) throws {
        for store in [phone, watches[0]] {
            #expect(try store.storedValue(for: TestKeys.steps) == nil, "steps came back on the \(store.role)")
            #expect(try store.storedValue(for: TestKeys.daily["mine-alive"]) == 30)
            for i in 0..<2 { #expect(try store.storedValue(for: TestKeys.daily["p\(i)"]) == 100 + i, "p\(i) on the \(store.role)") }
        }
        #expect(seen.removedKeys == [TestKeys.steps.name], "the app saw \(seen.all.map { "\($0.kind) \($0.key)" })")
        #expect(try watches[0].rebaselineMarkCount() == 0)
    }

    /// A purge pass on every store, as the engine runs one after
    /// acknowledgements (at most once a minute): it records what each peer
    /// has acknowledged, for the tombstones to go a retention later.
    func recordAcknowledgements() {
        _ = try? phone.purgeTombstones()
        for watch in watches { _ = try? watch.purgeTombstones() }
    }

    /// Two watches (watch 0 paired with `pairing`); watch 0 holds steps (the
    /// phone's) and mine-alive (its own), then stays away while the phone
    /// deletes steps, watch 1 acknowledges it and 91 days pass: the phone
    /// forgets watch 0 and purges the tombstone.
    /// `phoneValues`: that many more values of the phone (`daily["p0"]`…) that both watches hold.
    /// `largeValue`: the phone's blob, over the inline limit (sent in chunks), released and held by both watches.
    static func withForgottenWatch(pairing: PairingSecret? = nil, phoneValues: Int = 0, largeValue: Data? = nil) async throws -> Neighbourhood {
        let home = try await withDeleteWatchZeroMissed(epochs: pairing.map { [$0.epoch, "test"] }, phoneValues: phoneValues, largeValue: largeValue)
        home.advance(days: 91)
        home.sync(1)
        _ = try home.phone.purgeTombstones()
        return home
    }

    /// Two watches; both hold steps (the phone's), watch 0 also mine-alive
    /// (its own); then watch 0 stays away while the phone deletes steps and
    /// watch 1 acknowledges the delete (recorded by a purge pass).
    static func withDeleteWatchZeroMissed(epochs: [String]? = nil, phoneValues: Int = 0, largeValue: Data? = nil) async throws -> Neighbourhood {
        let home = try Neighbourhood(watches: 2, epochs: epochs)
        try await home.phone.set(1, for: TestKeys.steps)
        if let largeValue {
            try await home.phone.set(largeValue, for: TestKeys.blob)
            try home.phone.requestManualSync()
        }
        for i in 0..<phoneValues { try await home.phone.set(100 + i, for: TestKeys.daily["p\(i)"]) }
        try await home.watches[0].set(30, for: TestKeys.daily["mine-alive"])
        home.sync(0)
        home.sync(1)
        home.clock.advance(by: 1_000)
        try await home.phone.remove(TestKeys.steps)
        home.sync(1)
        home.recordAcknowledgements()
        return home
    }

    /// One watch (of `watches`); the phone holds steps and d1, deletes steps, the watch
    /// acknowledges the delete (recorded by a purge pass), and 31 days pass.
    static func withAcknowledgedDelete(watches: Int = 1, epochs: [String]? = nil) async throws -> Neighbourhood {
        let home = try Neighbourhood(watches: watches, epochs: epochs)
        try await home.phone.set(1, for: TestKeys.steps)
        try await home.phone.set(2, for: TestKeys.daily["d1"])
        home.sync(0)
        try await home.phone.remove(TestKeys.steps)
        home.sync(0)
        home.recordAcknowledgements()
        home.advance(days: 31)
        return home
    }

    static let day: Int64 = 86_400_000
}

/// Tombstones are purged once every known peer has them and the retention
/// passed; a watch unseen past the horizon is forgotten, and when it returns
/// it is re-baselined so that a purged delete never comes back.
@Suite struct TombstonePurgeTests {
    /// One watch that has not acknowledged a delete keeps its tombstone, and
    /// so does the retention; once both are past, the row goes.
    @Test func purgesOnlyOnceEveryKnownPeerAckedAndTheRetentionPassed() async throws {
        let home = try Neighbourhood(watches: 2)
        try await home.phone.set(1, for: TestKeys.steps)
        home.sync(0)
        home.sync(1)
        try await home.phone.remove(TestKeys.steps)
        home.sync(0)

        home.advance(days: 31)
        #expect(try home.phone.purgeTombstones() == 0)  // watch 1 has not acknowledged the delete
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name)?.isDeleted == true)
        #expect(try home.phone.purgedThrough() == 0)

        home.sync(1)
        #expect(try home.watches[1].storedValue(for: TestKeys.steps) == nil)
        let tombstone = try #require(try home.phone.entryInfo(forKey: TestKeys.steps.name))
        // Watch 1 acknowledged it only now: an older copy it sent before could still be on its way.
        #expect(try home.phone.purgeTombstones() == 0)
        home.advance(days: 30)
        #expect(try home.phone.purgeTombstones() == 1)
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name) == nil)
        #expect(try home.phone.purgedThrough() == tombstone.version.packed)
        #expect(try home.phone.storedValue(for: TestKeys.steps) == nil)
    }

    /// Every peer has the delete, but the retention has not passed: kept.
    @Test func keepsTombstonesYoungerThanTheRetention() async throws {
        let home = try Neighbourhood(watches: 1)
        try await home.phone.set(1, for: TestKeys.steps)
        home.sync(0)
        try await home.phone.remove(TestKeys.steps)
        home.sync(0)
        home.recordAcknowledgements()
        home.advance(days: 29)
        #expect(try home.phone.purgeTombstones() == 0)
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name)?.isDeleted == true)
        home.advance(days: 2)
        #expect(try home.phone.purgeTombstones() == 1)
    }

    /// The purge also runs after an acknowledgement (at most once a minute),
    /// and at open.
    @Test func purgesAfterAcknowledgementsAndAtOpen() async throws {
        let home = try await Neighbourhood.withAcknowledgedDelete()
        try await home.phone.set("imperial", for: TestKeys.units)  // something to acknowledge
        home.sync(0)
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name) == nil)

        try await home.phone.remove(TestKeys.daily["d1"])
        home.sync(0)
        home.recordAcknowledgements()
        home.advance(days: 31)
        let path = home.phone.path
        home.phone.close()
        let reopened = try SyncStore(path: path, role: .phone, registry: home.registry,
                                     options: StoreOptions(clock: home.clock, encryption: .keyFile(path: home.folder.file("phone.key"))))
        #expect(try reopened.entryInfo(forKey: TestKeys.daily["d1"].name) == nil)
    }

    /// A store that knows no peer yet keeps its tombstones: nobody has the deletes.
    @Test func keepsTombstonesWhileNoPeerIsKnown() async throws {
        let home = try Neighbourhood(watches: 0)
        try await home.phone.set(1, for: TestKeys.steps)
        try await home.phone.remove(TestKeys.steps)
        home.advance(days: 365)
        #expect(try home.phone.purgeTombstones() == 0)
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name)?.isDeleted == true)
    }

    /// A watch that declares a key differently passes over its changes (its
    /// cursor moves on without them): that key's tombstone waits for it.
    @Test func aKeyDeclaredDifferentlyHoldsItsTombstoneBack() async throws {
        let folder = TempFolder()
        let clock = ManualClock()
        let shared = Key<Int>("shared", default: 0)
        let phoneView = Key<Int>("disputed", default: 0, policy: .automaticSmall)
        let watchView = Key<Int>("disputed", default: 0, policy: .manual)
        let phone = try SyncStore(path: folder.file("p"), role: .phone, registry: try KeyRegistry([shared, phoneView]),
                                  options: StoreOptions(clock: clock))
        let watch = try SyncStore(path: folder.file("w"), role: .watch, registry: try KeyRegistry([shared, watchView]),
                                  options: StoreOptions(clock: clock))
        try await phone.set(1, for: shared)
        try await phone.set(2, for: phoneView)
        Link(phone, watch).connect()
        try await phone.remove(shared)
        try await phone.remove(phoneView)
        Link(phone, watch).connect()
        #expect(try watch.storedValue(for: shared) == nil)
        #expect(try phone.peerRecords().first?.mismatched == ["disputed"])
        _ = try phone.purgeTombstones()  // records what the watch acknowledged
        clock.advance(by: 31 * Neighbourhood.day)
        #expect(try phone.purgeTombstones() == 1)
        #expect(try phone.entryInfo(forKey: "shared") == nil)
        #expect(try phone.entryInfo(forKey: "disputed")?.isDeleted == true)
    }

    /// A delete waiting for `sync()` in the manual lane is never purged, however old.
    @Test func keepsManualTombstonesWaitingForSync() async throws {
        let home = try Neighbourhood(watches: 1)
        try await home.phone.set("Ada", for: TestKeys.name)
        try home.phone.requestManualSync()
        home.sync(0)
        #expect(try home.watches[0].storedValue(for: TestKeys.name) == "Ada")
        try await home.phone.remove(TestKeys.name)
        home.sync(0)
        home.advance(days: 31)
        #expect(try home.phone.purgeTombstones() == 0)
        let waiting = try #require(try home.phone.entryInfo(forKey: TestKeys.name.name))
        #expect(waiting.isDeleted && waiting.lane == .manual)

        try home.phone.requestManualSync()
        home.sync(0)
        #expect(try home.watches[0].storedValue(for: TestKeys.name) == nil)
        home.recordAcknowledgements()
        home.advance(days: 31)
        #expect(try home.phone.purgeTombstones() == 1)
    }

    /// A watch unseen past the horizon is forgotten and no longer holds the
    /// tombstone back; one seen within it is kept.
    @Test func forgettingAWatchAfterTheHorizonLetsThePurgeGoAhead() async throws {
        let home = try Neighbourhood(watches: 2)
        try await home.phone.set(1, for: TestKeys.steps)
        home.sync(0)
        home.sync(1)
        // Watch 0 goes away; watch 1 stays in touch.
        try await home.phone.remove(TestKeys.steps)
        home.sync(1)
        home.advance(days: 60)
        home.sync(1)
        #expect(try home.phone.purgeTombstones() == 0)  // watch 0, seen 60 days ago, has not got the delete
        #expect(try home.phone.forgottenPeers().isEmpty)

        home.advance(days: 31)
        home.sync(1)
        _ = try home.phone.purgeTombstones()
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name) == nil)
        #expect(try home.phone.forgottenPeers() == [home.watches[0].nodeID])
        #expect(try home.phone.peerRecords().map(\.node) == [home.watches[1].nodeID])
        // A watch never forgets its phone.
        _ = try home.watches[0].purgeTombstones()
        #expect(try home.watches[0].peerRecords().map(\.node) == [home.phone.nodeID])
    }

    /// A watch in one long session is seen with each acknowledgement: it is
    /// not forgotten while it keeps acknowledging.
    @Test func aWatchInALongSessionIsSeenWithEachAcknowledgement() async throws {
        let home = try Neighbourhood(watches: 1)
        try await home.phone.set(1, for: TestKeys.steps)
        let link = Link(home.phone, home.watches[0])
        link.connect()
        link.settle()
        for day in 1...4 {
            home.advance(days: 30)
            try await home.phone.set(1 + day, for: TestKeys.steps)
            link.settle()
        }
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == 5)
        _ = try home.phone.purgeTombstones()
        #expect(try home.phone.forgottenPeers().isEmpty)
        #expect(try home.phone.peerRecords().map(\.node) == [home.watches[0].nodeID])
    }

    /// A watch connected to the phone is being seen even when it has nothing
    /// to acknowledge (or the phone's clock jumped): it is not forgotten, so
    /// the tombstones it has not received stay until it has them. Once its
    /// session ends, the horizon counts again. Found by `syncsim fuzz` with
    /// purges: the phone forgot a connected watch after a clock jump, purged
    /// a delete, and the watch kept the deleted value for the rest of the
    /// session (it is re-baselined only at its next session).
    @Test func aConnectedWatchIsNeverForgotten() async throws {
        let home = try Neighbourhood(watches: 2)
        try await home.phone.set(1, for: TestKeys.steps)
        home.sync(1)
        var link: Link? = Link(home.phone, home.watches[0])
        link?.connect()
        link?.settle()
        // Watch 0 stays connected with nothing to acknowledge; the phone deletes, watch 1 takes the delete.
        home.clock.advance(by: 1_000)
        try await home.phone.remove(TestKeys.steps)
        home.sync(1)
        home.advance(days: 91)
        home.sync(1)
        _ = try home.phone.purgeTombstones()
        #expect(try home.phone.forgottenPeers().isEmpty)
        #expect(Set(try home.phone.peerRecords().map(\.node)) == [home.watches[0].nodeID, home.watches[1].nodeID])
        #expect(try home.phone.entryInfo(forKey: TestKeys.steps.name)?.isDeleted == true, "the tombstone waits for watch 0")
        link?.settle()
        #expect(try home.watches[0].storedValue(for: TestKeys.steps) == nil, "the delete reached the connected watch")

        // The session ends: forgotten once the horizon has passed since it was last seen.
        link = nil
        home.advance(days: 91)
        home.sync(1)
        _ = try home.phone.purgeTombstones()
        #expect(try home.phone.forgottenPeers() == [home.watches[0].nodeID])
    }

    /// A batch resent after its keys changed carries only what is still
    /// current. Found by `syncsim fuzz`: a retransmitted old batch reached a
    /// watch after it had applied the key's newer tombstone and purged it, and
    /// the old value came back (nothing was left to compare it with).
    @Test func aResentBatchLeavesOutWhatWasSupersededSince() throws {
        let pair = try Pair()
        let config = ReplicationConfiguration(pairingEpoch: "test")
        let phone = ReplicationEndpoint(store: pair.phone, configuration: config)  // a lossy transport: it retransmits
        let watch = ReplicationEndpoint(store: pair.watch, configuration: config)
        establish(phone, watch)
        try pair.phone.setNow(1, for: TestKeys.daily["gone"])
        try pair.phone.setNow(2, for: TestKeys.daily["kept"])
        let lost = try #require(phone.pump(now: 0).compactMap { try? SyncMessage(frame: $0).asBatch }.first)
        #expect(Set(lost.entries.map(\.key)) == [TestKeys.daily["gone"].name, TestKeys.daily["kept"].name])
        try pair.phone.removeNow(TestKeys.daily["gone"])  // superseded while the batch is unacknowledged
        let later = phone.tick(now: 60_000).compactMap { try? SyncMessage(frame: $0).asBatch }
        let resent = try #require(later.first { $0.id == lost.id })
        #expect(resent.entries.map(\.key) == [TestKeys.daily["kept"].name])
        // The tombstone goes as usual, in a batch of its own.
        #expect(later.contains { $0.id != lost.id && $0.entries.contains { $0.key == TestKeys.daily["gone"].name && $0.deleted } })
    }

    /// Only a phone re-baselines its watches: a notice sent to a phone fails
    /// the session with a clear error.
    @Test func aPhoneRefusesARebaselineNotice() async throws {
        let home = try Neighbourhood(watches: 1)
        home.sync(0)
        let config = ReplicationConfiguration(pairingEpoch: "test")
        let phone = ReplicationEndpoint(store: home.phone, configuration: config)
        let watch = ReplicationEndpoint(store: home.watches[0], configuration: config)
        var fromWatch: [Frame] = []
        for frame in phone.start(now: 0) { fromWatch += watch.receive(frame, now: 0) }
        for frame in fromWatch { _ = phone.receive(frame, now: 0) }
        #expect(phone.isEstablished)
        let reply = phone.receive(SyncMessage.rebaseline(.init(id: 1, purgedThrough: 1 << 20)).frame(), now: 0)
        #expect(phone.failure?.code == .protocolViolation)
        #expect(reply.map(\.type) == [SyncMessage.MessageType.error.rawValue])
    }
}
